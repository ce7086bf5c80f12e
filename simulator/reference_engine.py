"""The plain-Python reference engine: the semantics the Numba engine must reproduce exactly.

A command starts when its dependencies are done and, on the ordered contexts (main, sub, link),
when the previous command of its chip and context has finished; DMA descriptors start as soon as
their dependencies allow. A command that moves no bytes takes its `cycles`. A DMA command spends
`latency` cycles starting up, then moves its bytes at up to its own rate (moved / (cycles -
latency)); when the moves active on a chip together ask for more than the chip's DMA bandwidth,
or their HBM bytes for more than its HBM bandwidth, all of them slow by the same factor. Time is
a float; the engine reports each command's start and end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.program import CONTEXTS, ORDERED, Program


@dataclass
class Timeline:
    start: np.ndarray  # float64 cycles
    end: np.ndarray

    @property
    def cycles(self) -> int:
        return int(math.ceil(self.end.max())) if len(self.end) else 0


def simulate_reference(program: Program, hbm_bytes_per_cycle: float, dma_bytes_per_cycle: float) -> Timeline:
    n = len(program)
    start = np.full(n, -1.0)
    end = np.full(n, -1.0)
    waiting = np.diff(program.dep_ptr).astype(np.int64)
    users: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for d in program.deps(i):
            users[int(d)].append(i)
    ordered = {CONTEXTS.index(c) for c in ORDERED}
    # Ordered contexts queue per (chip, context); every DMA descriptor is a queue of its own.
    key_of = [
        (int(program.chip[i]), int(program.context[i]) if program.context[i] in ordered else -1 - i)
        for i in range(n)
    ]
    queues: dict[tuple[int, int], list[int]] = {}
    for i in range(n):
        queues.setdefault(key_of[i], []).append(i)
    head = {key: 0 for key in queues}
    left = program.moved.astype(np.float64).copy()  # bytes still to move
    rate = np.zeros(n)  # uncontended move rate
    for i in range(n):
        transfer = program.cycles[i] - program.latency[i]
        if program.moved[i] > 0 and transfer > 0:
            rate[i] = program.moved[i] / transfer
    active: list[int] = []
    now = 0.0
    finished = 0

    def startable(key) -> None:
        q = queues[key]
        if head[key] < len(q):
            i = q[head[key]]
            if waiting[i] == 0 and start[i] < 0:
                start[i] = now
                active.append(i)

    for key in queues:
        startable(key)
    while finished < n:
        if not active:
            raise RuntimeError("deadlock: no command can start")
        shares = _shares(program, active, rate, start, now, hbm_bytes_per_cycle, dma_bytes_per_cycle)
        step = math.inf
        for i in active:
            step = min(step, _time_to_finish(program, i, start[i], now, left[i], shares.get(i, 0.0)))
        now += step
        done_now = []
        for i in active:
            in_transfer = rate[i] > 0 and now - start[i] > program.latency[i] - 1e-9 and i in shares
            if in_transfer:
                moved = min(left[i], shares[i] * min(step, now - (start[i] + program.latency[i])))
                left[i] -= moved
            if _is_done(program, i, start[i], now, left[i], rate[i]):
                done_now.append(i)
        for i in done_now:
            active.remove(i)
            end[i] = now
            finished += 1
            key = key_of[i]
            head[key] += 1
            for u in users[i]:
                waiting[u] -= 1
        touched = {key_of[i] for i in done_now} | {key_of[u] for i in done_now for u in users[i]}
        for key in sorted(touched):
            startable(key)
    return Timeline(start, end)


def _shares(program, active, rate, start, now, hbm_bandwidth, dma_bandwidth) -> dict[int, float]:
    """Rates of the moves past their start-up, scaled per chip to fit DMA and HBM bandwidth."""
    by_chip: dict[int, list[int]] = {}
    for i in active:
        if rate[i] > 0 and now >= start[i] + program.latency[i] - 1e-9:
            by_chip.setdefault(int(program.chip[i]), []).append(i)
    shares = {}
    for ids in by_chip.values():
        demand = sum(rate[i] for i in ids)
        hbm_demand = sum(rate[i] * program.hbm_bytes[i] / program.moved[i] for i in ids)
        scale = min(1.0, dma_bandwidth / demand, hbm_bandwidth / hbm_demand if hbm_demand else 1.0)
        for i in ids:
            shares[i] = rate[i] * scale
    return shares


def _time_to_finish(program, i, began, now, left, share) -> float:
    if program.moved[i] == 0 or program.cycles[i] == program.latency[i]:
        return began + program.cycles[i] - now
    startup_end = began + program.latency[i]
    if now < startup_end - 1e-9:
        return startup_end - now
    return left / share if share > 0 else math.inf


def _is_done(program, i, began, now, left, rate) -> bool:
    if rate == 0:
        return now >= began + program.cycles[i] - 1e-9
    return left <= 1e-6 and now >= began + program.latency[i] - 1e-9
