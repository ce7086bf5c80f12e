"""How busy each unit was: the one definition the report, the timeline plot and the trace share.

A unit whose `Unit.moves` names a byte count (on RNGD: TensorDMA, chip links) is busy for those bytes at its
full bandwidth, since the moves in flight share it: counting each move's own duration instead
would count overlapping moves (and their start-ups) several times over. Every other unit is busy
for its busy column in the Program. Utilisation is busy cycles over elapsed cycles, at most 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from simulator.program import Program
from simulator.spec import Spec
from simulator.target import MOVED, Unit

if TYPE_CHECKING:  # simulator.report builds its per-op byte counts with command_bytes
    from simulator.report import OpTotals


def command_bytes(program: Program) -> dict[str, np.ndarray]:
    """Per command, each byte count in MOVED: `dma_bytes` is what a DMA command moves (a pass's own
    DM reads and writes are not DMA moves), `link_bytes` what a command sends over the links."""
    return {
        "dma_bytes": np.where(program.context == program.sites.pool, program.moved, 0).astype(np.float64),
        "link_bytes": program.link_bytes.astype(np.float64),
    }


def busy_cycles(
    units: Sequence[Unit], hw: Spec, busy: np.ndarray, moved: Mapping[str, np.ndarray | float]
) -> np.ndarray:
    """Busy cycles per unit along the last axis of `busy` (a Program's busy columns, or their sums),
    with the units that move bytes measured by `moved[unit.moves]` bytes instead, at their bandwidth."""
    out = np.array(busy, dtype=np.float64)
    for u, unit in enumerate(units):
        if unit.moves is not None:
            out[..., u] = np.asarray(moved[unit.moves], np.float64) / unit.bandwidth(hw)
    return out


def utilisation(busy: np.ndarray | float, cycles: np.ndarray | float) -> np.ndarray:
    """Busy over elapsed cycles, capped at 1 (0 where nothing elapsed)."""
    busy, cycles = np.asarray(busy, np.float64), np.asarray(cycles, np.float64)
    safe = np.where(cycles > 0, cycles, 1.0)
    return np.where(cycles > 0, np.minimum(busy / safe, 1.0), 0.0)


def totals_busy_cycles(totals: OpTotals, hw: Spec) -> np.ndarray:
    """Busy cycles per unit of a whole phase, from its per-op sums (what the report shows)."""
    moved = {f: getattr(totals, f).sum() for f in MOVED}
    return busy_cycles(totals.sites.units, hw, totals.unit_busy.sum(axis=0), moved)
