"""The bandwidth each DMA move had while it moved, replayed from a Timeline by the engine's rule.

The engine (simulator.engine, rule 5 of docs/hardware-model.md) pools a chip's TensorDMA engines:
a move past its start-up asks for its own rate, and when the moves under way ask for more than the
pool (or their HBM ends for more than HBM) all slow down by one factor. The Timeline keeps only
when each command started and ended, so traces and plots that show *how* the pool was shared
replay that rule here, once, instead of each guessing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.program import Program
from simulator.timeline import EPS, Timeline


@dataclass(frozen=True)
class Shares:
    """Constant-rate pieces of the moves: move `command` ran at `rate` bytes/cycle over [t0, t1).

    Pieces are sorted by (chip, t0) and, within one interval, by when the move started moving
    (then by index): the order the engine sums them in, and a stable stacking order for layouts.
    """

    command: np.ndarray  # int64 index into the program
    chip: np.ndarray  # int64
    t0: np.ndarray  # float64 cycles, the run's own axis
    t1: np.ndarray
    rate: np.ndarray  # bytes per cycle

    def __len__(self) -> int:
        return len(self.command)


def moving_rate(program: Program) -> np.ndarray:
    """Each command's uncontended move rate (0: not a move), as the engine computes it."""
    moving = (program.moved > 0) & (program.cycles > program.latency)
    span = np.where(moving, program.cycles - program.latency, 1)
    return np.where(moving, program.moved / span, 0.0)


def dma_shares(
    program: Program, timeline: Timeline, hbm_bytes_per_cycle: float, dma_bytes_per_cycle: float
) -> Shares:
    """Every interval between two changes of a chip's set of moving DMA commands, with each
    mover's share of the pool there: rate * min(1, pool / demand, hbm / hbm_demand)."""
    rate = moving_rate(program)
    movers = np.flatnonzero((rate > 0) & (program.context == program.sites.pool))
    begin_all = timeline.start + program.latency
    pieces: list[tuple[int, int, float, float, float]] = []
    for chip in np.unique(program.chip[movers]).tolist():
        mine = movers[program.chip[movers] == chip]
        mine = mine[np.lexsort((mine, begin_all[mine]))]  # the engine's order: started moving, then index
        begin, end = begin_all[mine].tolist(), timeline.end[mine].tolist()
        ends = sorted(range(len(mine)), key=end.__getitem__)
        cuts = np.unique(np.concatenate([begin_all[mine], timeline.end[mine]])).tolist()
        on: dict[int, None] = {}  # positions in `mine` moving now, in the engine's order
        nb = ne = 0
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            while nb < len(mine) and begin[nb] <= a + EPS:
                on[nb] = None
                nb += 1
            while ne < len(mine) and end[ends[ne]] <= a + EPS:
                on.pop(ends[ne], None)
                ne += 1
            if b - a <= EPS or not on:
                continue
            ids = mine[list(on)]
            r = rate[ids]
            demand = float(r.sum())
            hbm_demand = float((r * program.hbm_bytes[ids] / program.moved[ids]).sum())
            scale = min(1.0, dma_bytes_per_cycle / demand)
            if hbm_demand > 0:
                scale = min(scale, hbm_bytes_per_cycle / hbm_demand)
            pieces += [(i, chip, a, b, x * scale) for i, x in zip(ids.tolist(), r.tolist(), strict=True)]
    types = (np.int64, np.int64, np.float64, np.float64, np.float64)
    cols = list(zip(*pieces, strict=True)) if pieces else [()] * len(types)
    return Shares(*(np.array(c, t) for c, t in zip(cols, types, strict=True)))
