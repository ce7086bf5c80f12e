"""Program equality for the decode-step tests: every command column, busy cycles and dependency."""

from __future__ import annotations

import numpy as np

from simulator.program import COLUMNS, Program


def same_program(a: Program, b: Program) -> bool:
    """Equal arrays throughout (not the ops' placement texts: a patched step keeps its template's)."""
    return (
        all(np.array_equal(getattr(a, n), getattr(b, n)) for n, _ in COLUMNS)
        and np.array_equal(a.busy, b.busy)
        and np.array_equal(a.dep_ptr, b.dep_ptr)
        and np.array_equal(a.dep_idx, b.dep_idx)
    )
