"""Broadcasting by axis name, shared by elementwise ops and `where`.

The operand with the most axes (the first on a tie) gives the result's axis order; axes that only
other operands have are appended. Axes of the same name must agree in size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ir.ops.base import OpCall, same_sizes
from ir.types import Axis


def broadcast_axes(call: OpCall) -> tuple[Axis, ...]:
    sizes = same_sizes(call.labelled())
    widest = max(call.operands, key=lambda t: t.rank)
    names = list(widest.names)
    for t in call.operands:
        names += [n for n in t.names if n not in names]
    return tuple(Axis(n, sizes[n]) for n in names)


def align(array: np.ndarray, names: Sequence[str], out_names: Sequence[str]) -> np.ndarray:
    """Transposes `array` (axes `names`) into `out_names` order with size-1 axes where missing."""
    order = sorted(range(len(names)), key=lambda i: out_names.index(names[i]))
    moved = np.transpose(array, order) if order != list(range(len(names))) else array
    present = set(names)
    shape = [moved.shape[[names[i] for i in order].index(n)] if n in present else 1 for n in out_names]
    return moved.reshape(shape)
