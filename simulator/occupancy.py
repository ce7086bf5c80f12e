"""What the chip was doing at each moment of a program: cycles per combination of activities.

A roofline says how long a phase would take if its bound resource (HBM, the Contraction Engine,
the chip links) never rested; the report explains the difference by what ran while it did rest.
That needs, for every instant of the timeline, which kinds of work were under way. This module
cuts a timeline at every command start and end and sums the cycles of each combination (a bit
mask over ACTIVITIES); the sums add across decode steps like every other per-program figure.
"""

from __future__ import annotations

import numpy as np

from simulator.program import Program
from simulator.timeline import Timeline
from simulator.units import UNIT_NAMES

# The activities, one bit each (bit i = ACTIVITIES[i]); what each one is:
ACTIVITIES = (
    "hbm_move",  # a TensorDMA move touching HBM is transferring bytes (past its start-up)
    "dma_on_chip",  # a TensorDMA move that does not touch HBM is transferring bytes
    "dma_startup",  # a TensorDMA command is in its fixed start-up latency
    "contraction",  # a Tensor Unit pass that uses the Contraction Engine runs
    "tensor_unit_other",  # a Tensor Unit pass without a contraction (Vector Engine work) runs
    "sub",  # a command of the sub pipeline runs
    "link",  # a chip-link transfer (collective) is under way
)
_INDEX = {name: i for i, name in enumerate(ACTIVITIES)}
BIT = {name: 1 << i for name, i in _INDEX.items()}
STATES = 1 << len(ACTIVITIES)

CONTRACTION = UNIT_NAMES.index("contraction")


def state_cycles(program: Program, timeline: Timeline, chip: int = 0) -> np.ndarray:
    """Cycles of `chip` spent in each combination of ACTIVITIES (index = bit mask), from cycle 0
    to the program's last cycle; they sum to `timeline.cycles`. State 0 is nothing under way
    (waits between dependent commands). Multi-chip programs are SPMD: one chip speaks for all."""
    return StateSweeps()(
        program.context, program.chip, timeline.start, timeline.end, program.latency, program.cycles,
        program.moved, program.hbm_bytes, program.busy[:, CONTRACTION], timeline.cycles, chip,
    )  # fmt: skip


class StateSweeps:
    """state_cycles of programs one after another: each program's events are sorted from the
    previous one's order when it nearly sorts them (decode steps of one structure), else by numpy."""

    def __init__(self) -> None:
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
            totals, order = sweep_from(context, start, end, latency, cycles, moved, hbm, busy, float(last),
                                       len(ACTIVITIES), self.order)  # fmt: skip
            if len(order):
                self.order = order
                return totals
        times, what = events(context, start, end, latency, cycles, moved, hbm, busy)
        self.order = np.argsort(times, kind="stable")  # numpy's stable sort is fast on nearly sorted times
        return sweep(times[self.order], what[self.order], float(last), len(ACTIVITIES))
