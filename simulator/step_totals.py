"""Op totals summed over a generation's decode steps: the figures adding every step's op_totals gives,
with the integer ones summed per command and reduced per op once instead of once per step.

A step's FLOPs, bytes and busy cycles are integers per command. Their per-op sums, added step by
step in float64, are exact while every total stays below 2^53, and then equal the integer sums in
any order: so they are accumulated per command (steps of one structure share their commands) and
reduced when the structure changes or at the end. Should a total come near 2^53, the steps from
there on are added one by one as op_totals has them, which is then exactly what that addition
gives too. The timeline figures (spans, main-context time, states) are floats whose sums depend on
their order: each step's are computed and added in step order, as before.
"""

from __future__ import annotations

import numpy as np

from simulator.program import VARYING, Program, ProgramBlock
from simulator.report import (
    OpTotals,
    assemble,
    block_timed_totals,
    command_integers,
    distinct_ops,
    op_starts,
    op_totals,
    timed_totals,
)
from simulator.target import Sites
from simulator.timeline import Timeline

_EXACT = 2**53  # float64 holds every integer below this


class StepTotals:
    """Accumulates op totals over programs that list the same ops (decode steps)."""

    def __init__(self) -> None:
        self._per_op: dict[str, np.ndarray] | None = None  # integer figures per op, reduced so far
        self._timed: dict[str, np.ndarray] | None = None  # timeline figures, added step by step
        self._program: Program | None = None  # the structure whose per-command sums run
        self._sums: dict[str, np.ndarray] | None = None  # its integer figures per command, summed
        self._largest = 0  # a bound on every integer total so far
        self._ops: list | None = None
        self._sites: Sites | None = None
        self._one_by_one: OpTotals | None = None  # once a total nears 2^53: op_totals added

    def add(self, program: Program, timeline: Timeline) -> None:
        if self._one_by_one is not None or distinct_ops(program.ops) != len(program.ops):
            self._add_one(program, timeline)
            return
        integers = command_integers(program)
        largest = self._largest + max(int(v.sum()) for v in integers.values())  # all >= 0
        if largest >= _EXACT:
            self._add_one(program, timeline)
            return
        self._largest = largest
        timed = timed_totals(program, timeline)
        self._timed = timed if self._timed is None else {f: self._timed[f] + v for f, v in timed.items()}
        if self._program is None or not _same_structure(self._program, program):
            self._reduce()
            self._program = program
            self._ops = program.ops if self._ops is None else self._ops  # names as the first step's
            self._sites = program.sites
            self._sums = {f: v.copy() for f, v in integers.items()}
            return
        for f, v in integers.items():
            self._sums[f] += v

    def add_block(self, block: ProgramBlock, timeline: Timeline) -> None:
        """Adds every program of a block, `timeline` holding their [programs, commands] times:
        what adding block.program(k) and its timeline for each k in turn gives."""
        base = block.base
        integers = _block_integers(block)
        largest = self._largest + max(int(v.sum()) for v in integers.values())  # all >= 0
        if self._one_by_one is not None or distinct_ops(base.ops) != len(base.ops) or largest >= _EXACT:
            for k in range(len(block)):
                self.add(block.program(k), timeline.row(k))
            return
        self._largest = largest
        timed = block_timed_totals(block, timeline)
        for k in range(len(block)):  # in step order: float sums depend on it
            self._timed = {f: v[k] for f, v in timed.items()} if self._timed is None else {
                f: self._timed[f] + v[k] for f, v in timed.items()
            }
        if self._program is None or not _same_structure(self._program, base):
            self._reduce()
            self._program = base
            self._ops = base.ops if self._ops is None else self._ops
            self._sites = base.sites
            self._sums = integers
            return
        for f, v in integers.items():
            self._sums[f] += v

    def totals(self) -> OpTotals | None:
        """The sums of every program added (None before any)."""
        if self._one_by_one is not None:
            return self._one_by_one
        self._reduce()
        if self._per_op is None:
            return None
        return assemble(self._ops, self._per_op, self._timed, self._sites)

    def _reduce(self) -> None:
        """Folds the running per-command sums into the per-op ones (exact: all below 2^53)."""
        if self._program is None:
            return
        starts = op_starts(self._program)
        per_op = {f: np.add.reduceat(v.astype(np.float64), starts, axis=0) for f, v in self._sums.items()}
        self._per_op = per_op if self._per_op is None else {f: self._per_op[f] + v for f, v in per_op.items()}
        self._program = self._sums = None

    def _add_one(self, program: Program, timeline: Timeline) -> None:
        """From here on as op_totals added step by step (the sums so far are exact, so the same)."""
        if self._one_by_one is None:
            self._one_by_one = self.totals()  # None when nothing was added yet
        step = op_totals(program, timeline)
        self._one_by_one = step if self._one_by_one is None else self._one_by_one + step


def _block_integers(block: ProgramBlock) -> dict[str, np.ndarray]:
    """command_integers summed over a block's programs, per command (exact: integers): the base's
    times the programs, corrected at the rows that vary."""
    base, rows, count = block.base, block.rows, len(block)
    out = {f: v * count for f, v in command_integers(base).items()}
    for name in ("flops", "hbm_bytes", "dm_bytes", "link_bytes"):
        out[name][rows] = block.values[:, :, VARYING.index(name)].sum(axis=0)
    out["unit_busy"][rows] = block.busy.sum(axis=0)
    moved = block.values[:, :, VARYING.index("moved")].sum(axis=0)
    out["dma_bytes"][rows] = np.where(base.context[rows] == base.sites.pool, moved, 0).astype(np.float64)
    return out


def _same_structure(a: Program, b: Program) -> bool:
    """Whether two programs' commands belong to the same ops in the same order (decode steps patched
    from one template share that column)."""
    return a.op is b.op or (len(a.op) == len(b.op) and a.ops is b.ops and np.array_equal(a.op, b.op))
