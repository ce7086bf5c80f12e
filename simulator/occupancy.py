"""What the chip was doing at each moment of a program: cycles per combination of activities.

A roofline says how long a phase would take if its bound resource (HBM, the Contraction Engine,
the chip links) never rested; the report explains the difference by what ran while it did rest.
That needs, for every instant of the timeline, which kinds of work were under way. This module
cuts a timeline at every command start and end and sums the cycles of each combination (a bit
mask over ACTIVITIES); the sums add across decode steps like every other per-program figure.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulator.program import CONTEXTS, Program
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

_MAIN, _SUB, _DMA = (CONTEXTS.index(c) for c in ("main", "sub", "dma"))
_CONTRACTION = UNIT_NAMES.index("contraction")


def state_cycles(program: Program, timeline: Timeline, chip: int = 0) -> np.ndarray:
    """Cycles of `chip` spent in each combination of ACTIVITIES (index = bit mask), from cycle 0
    to the program's last cycle; they sum to `timeline.cycles`. State 0 is nothing under way
    (waits between dependent commands). Multi-chip programs are SPMD: one chip speaks for all."""
    context, start, end = program.context, timeline.start, timeline.end
    latency, cycles, moved, hbm = program.latency, program.cycles, program.moved, program.hbm_bytes
    busy = program.busy[:, _CONTRACTION]
    if len(context) and program.chip.max() > 0:
        mine = program.chip == chip
        context, start, end, latency = context[mine], start[mine], end[mine], latency[mine]
        cycles, moved, hbm, busy = cycles[mine], moved[mine], hbm[mine], busy[mine]
    times, what = _events(context, start, end, latency, cycles, moved, hbm, busy)
    order = np.argsort(times, kind="stable")  # numpy's stable sort is fast on the nearly sorted times
    return _sweep(times[order], what[order], float(timeline.cycles), len(ACTIVITIES))


# Activity indices as the compiled code reads them (module constants are frozen into it).
_HBM_MOVE, _DMA_ON_CHIP, _DMA_STARTUP, _CONTRACTION_PASS, _OTHER_PASS, _SUB_RUNS, _LINK_RUNS = range(7)
assert ACTIVITIES[_CONTRACTION_PASS] == "contraction" and ACTIVITIES[_LINK_RUNS] == "link"


@njit(cache=True)
def _events(context, start, end, latency, cycles, moved, hbm, busy):
    """Each command's activities as (time, activity * 2 + (0: begins, 1: ends)) events. A DMA
    command transfers only when it has bytes and time beyond its latency (as the engine runs it);
    until then, and all of a command without such bytes, it is in start-up."""
    n = context.shape[0]
    times = np.empty(4 * n)
    what = np.empty(4 * n, np.int64)
    k = 0
    for i in range(n):
        c, middle, second = context[i], end[i], -1
        if c == _MAIN:
            first = _CONTRACTION_PASS if busy[i] > 0 else _OTHER_PASS
        elif c == _SUB:
            first = _SUB_RUNS
        elif c == _DMA:
            first = _DMA_STARTUP
            if moved[i] > 0 and cycles[i] > latency[i]:
                middle = min(start[i] + latency[i], end[i])
                second = _HBM_MOVE if hbm[i] > 0 else _DMA_ON_CHIP
        else:
            first = _LINK_RUNS
        if middle > start[i]:
            times[k], what[k], times[k + 1], what[k + 1] = start[i], 2 * first, middle, 2 * first + 1
            k += 2
        if second >= 0 and end[i] > middle:
            times[k], what[k], times[k + 1], what[k + 1] = middle, 2 * second, end[i], 2 * second + 1
            k += 2
    return times[:k], what[:k]


@njit(cache=True)
def _sweep(times, what, last, activities):
    """Adds each piece of [0, last] between consecutive event `times` to the state under way;
    `what` is activity * 2 + (0: it begins, 1: it ends)."""
    total = np.zeros(1 << activities)
    counts = np.zeros(activities, np.int64)
    now, mask = 0.0, 0
    for j in range(times.shape[0]):
        if times[j] > now:
            total[mask] += times[j] - now
            now = times[j]
        a = what[j] >> 1
        counts[a] += -1 if what[j] & 1 else 1
        if counts[a] > 0:
            mask |= 1 << a
        else:
            mask &= ~(1 << a)
    total[mask] += max(0.0, last - now)
    return total
