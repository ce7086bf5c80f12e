"""The plain-Python reference engine: the semantics the Numba engine must reproduce exactly.

A command may start when its dependencies are done and, on the ordered contexts (main, sub,
link), when it is the next command of its chip and context; DMA descriptors are independent.
Commands that became startable at the same moment start in ascending index order.

A command that moves no bytes takes its `cycles`. A DMA command spends `latency` cycles
starting up, then moves its bytes at up to its own rate, moved / (cycles - latency). When the
moves under way on a chip together ask for more than the chip's DMA bandwidth, or their HBM
bytes for more than its HBM bandwidth, all of them slow down by the same factor (sums are taken
in the order the commands started, so both engines add the same floats in the same order).
"""

from __future__ import annotations

import math

import numpy as np

from simulator.program import Program
from simulator.timeline import EPS, Timeline


def queue_ids(program: Program) -> np.ndarray:
    """Each command's in-order queue (one per chip and ordered context), or -1 for DMA."""
    contexts = program.sites.contexts
    ordered = np.array([c.ordered for c in contexts])
    key = program.chip.astype(np.int64) * len(contexts) + program.context
    return np.where(ordered[program.context], key, -1)


def users_of(program: Program) -> tuple[np.ndarray, np.ndarray]:
    """The reverse of the dependency lists (CSR): who waits for each command."""
    n = len(program)
    owners = np.repeat(np.arange(n), np.diff(program.dep_ptr))
    order = np.argsort(program.dep_idx, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.add.at(ptr, program.dep_idx + 1, 1)
    return np.cumsum(ptr), owners[order]


def simulate_reference(program: Program, hbm_bytes_per_cycle: float, dma_bytes_per_cycle: float) -> Timeline:
    n = len(program)
    start, end = np.full(n, -1.0), np.full(n, -1.0)
    waiting = np.diff(program.dep_ptr).astype(np.int64)
    user_ptr, users = users_of(program)
    queue = queue_ids(program)
    next_in_queue: dict[int, list[int]] = {}
    for i in range(n):
        if queue[i] >= 0:
            next_in_queue.setdefault(int(queue[i]), []).append(i)
    head = {q: 0 for q in next_in_queue}
    left = program.moved.astype(np.float64)
    rate = [0.0] * n
    for i in range(n):
        if program.moved[i] > 0 and program.cycles[i] > program.latency[i]:
            rate[i] = program.moved[i] / (program.cycles[i] - program.latency[i])
    active: list[int] = []
    now, finished = 0.0, 0

    def can_start(i: int) -> bool:
        if start[i] >= 0 or waiting[i] > 0:
            return False
        q = int(queue[i])
        return q < 0 or next_in_queue[q][head[q]] == i

    for i in range(n):
        if can_start(i):
            start[i] = now
            active.append(i)
    while finished < n:
        if not active:
            raise RuntimeError("deadlock: no command can start")
        share = _shares(program, active, rate, start, now, hbm_bytes_per_cycle, dma_bytes_per_cycle)
        step = math.inf
        for i in active:
            if i in share:
                step = min(step, left[i] / share[i] if share[i] > 0 else math.inf)
            elif rate[i] > 0:
                step = min(step, start[i] + program.latency[i] - now)
            else:
                step = min(step, start[i] + program.cycles[i] - now)
        now += step
        done: list[int] = []
        for i in active:
            if i in share:
                left[i] = max(0.0, left[i] - share[i] * step)
                if left[i] <= 1e-6:
                    done.append(i)
            elif rate[i] == 0 and now >= start[i] + program.cycles[i] - EPS:
                done.append(i)
        candidates: list[int] = []
        for i in done:
            active.remove(i)
            end[i] = now
            finished += 1
            q = int(queue[i])
            if q >= 0:
                head[q] += 1
                if head[q] < len(next_in_queue[q]):
                    candidates.append(next_in_queue[q][head[q]])
            for u in users[user_ptr[i] : user_ptr[i + 1]]:
                waiting[u] -= 1
                candidates.append(int(u))
        for i in sorted(set(candidates)):
            if can_start(i):
                start[i] = now
                active.append(i)
    return Timeline(start, end)


def _shares(program, active, rate, start, now, hbm_bandwidth, dma_bandwidth) -> dict[int, float]:
    """Rates of the moves past their start-up, scaled per chip to fit DMA and HBM bandwidth."""
    demand: dict[int, float] = {}
    hbm_demand: dict[int, float] = {}
    moving = []
    for i in active:
        if rate[i] > 0 and now >= start[i] + program.latency[i] - EPS:
            chip = int(program.chip[i])
            moving.append(i)
            demand[chip] = demand.get(chip, 0.0) + rate[i]
            hbm_demand[chip] = hbm_demand.get(chip, 0.0) + rate[i] * (program.hbm_bytes[i] / program.moved[i])
    share = {}
    for i in moving:
        chip = int(program.chip[i])
        scale = min(1.0, dma_bandwidth / demand[chip])
        if hbm_demand[chip] > 0:
            scale = min(scale, hbm_bandwidth / hbm_demand[chip])
        share[i] = rate[i] * scale
    return share
