"""Integer weights with per-group scales: where the groups fall, and quantising a float weight."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ir import BF16
from tcp_compiler.errors import FrontendError


def group_split(name: str, axes: dict[str, int], contract: Sequence[str], group: int) -> tuple[str, int]:
    """Which contracted axis a group boundary cuts, and how many of its elements one group holds."""
    inner = group
    for a in reversed(contract):
        size = axes[a]
        if inner <= size:
            if size % inner:
                break
            return a, inner
        if inner % size:
            break
        inner //= size
    shape = " x ".join(f"{a}={axes[a]}" for a in contract)
    raise FrontendError(
        f"{name}: group size {group} does not tile its input axes {shape}; "
        "choose a --group-size that divides them"
    )


def quantise(w: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 with one bf16 scale per `group` consecutive elements of the last axes."""
    flat = w.astype(np.float32).reshape(-1, group)
    scale = BF16.round(np.maximum(np.abs(flat).max(axis=1), 1e-30) / 7.0)
    q = np.clip(np.rint(flat / scale[:, None]), -8, 7)
    return q, scale
