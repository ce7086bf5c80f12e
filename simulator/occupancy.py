"""What the chip was doing at each moment of a program: cycles per combination of activities.

A roofline says how long a phase would take if its bound resource (HBM, the Contraction Engine,
the chip links) never rested; the report explains the difference by what ran while it did rest.
That needs, for every instant of the timeline, which kinds of work were under way. This module
cuts a timeline at every command start and end and sums the cycles of each combination (a bit
mask over the target's activities, simulator.target.Activity); the sums add across decode steps
like every other per-program figure.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from simulator.program import Program
from simulator.target import Sites
from simulator.timeline import Timeline


@cache
def plan(sites: Sites) -> tuple[np.ndarray, int]:
    """How the compiled sweep turns commands into activities (the target's Activity list, bit i =
    sites.activities[i]): per context [runs, runs while the marker unit is busy, moving with HBM,
    moving on chip, pooled] (-1: none), and the marker unit's busy column (-1: none)."""
    table = np.full((len(sites.contexts), 5), -1, np.int64)
    units = {a.unit for a in sites.activities if a.unit is not None}
    assert len(units) <= 1, "one unit may split a context's activity"
    for c, context in enumerate(sites.contexts):
        table[c, 4] = 0 if context.ordered else 1
    for i, a in enumerate(sites.activities):
        c = sites.context(a.context)
        column = 1 if a.unit else 0 if not a.moving else 2 if a.hbm else 3
        table[c, column] = i
    return table, (sites.unit(units.pop()) if units else -1)


def state_cycles(program: Program, timeline: Timeline, chip: int = 0) -> np.ndarray:
    """Cycles of `chip` spent in each combination of activities (index = bit mask), from cycle 0
    to the program's last cycle; they sum to `timeline.cycles`. State 0 is nothing under way
    (waits between dependent commands). Multi-chip programs are SPMD: one chip speaks for all."""
    marker = plan(program.sites)[1]
    busy = program.busy[:, marker] if marker >= 0 else np.zeros(len(program), np.int64)
    return StateSweeps(program.sites)(
        program.context, program.chip, timeline.start, timeline.end, program.latency, program.cycles,
        program.moved, program.hbm_bytes, busy, timeline.cycles, chip,
    )  # fmt: skip


class StateSweeps:
    """state_cycles of programs one after another: each program's events are sorted from the
    previous one's order when it nearly sorts them (decode steps of one structure), else by numpy."""

    def __init__(self, sites: Sites) -> None:
        self.plan, self.activities = plan(sites)[0], len(sites.activities)
        self.order: np.ndarray | None = None

    def __call__(
        self, context, chips, start, end, latency, cycles, moved, hbm, busy, last: int, chip: int = 0
    ) -> np.ndarray:
        if len(context) and chips.max() > 0:
            mine = chips == chip
            context, start, end, latency = context[mine], start[mine], end[mine], latency[mine]
            cycles, moved, hbm, busy = cycles[mine], moved[mine], hbm[mine], busy[mine]
        from simulator.occupancy_kernels import events, sweep, sweep_from  # numba: when a program runs

        if self.order is not None:
            totals, order = sweep_from(context, start, end, latency, cycles, moved, hbm, busy, self.plan,
                                       float(last), self.activities, self.order)  # fmt: skip
            if len(order):
                self.order = order
                return totals
        times, what = events(context, start, end, latency, cycles, moved, hbm, busy, self.plan)
        self.order = np.argsort(times, kind="stable")  # numpy's stable sort is fast on nearly sorted times
        return sweep(times[self.order], what[self.order], float(last), self.activities)
