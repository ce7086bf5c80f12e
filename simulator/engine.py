"""The cycle-counting engine, compiled with Numba: the reference engine's rules over flat arrays.

simulator.reference_engine states the rules in plain Python; this is the same algorithm on
arrays, with the same floating-point operations in the same order, so both give identical
timelines (tests check that on thousands of random programs). Only the commands under way are
scanned at each event, so an event costs what the concurrency is, not the program's length.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simulator.program import VARYING, Program, ProgramBlock
from simulator.timeline import EPS, Timeline


def simulate(program: Program, hbm_bytes_per_cycle: float, dma_bytes_per_cycle: float) -> Timeline:
    n = len(program)
    chips, prev, following, user_ptr, users = _structure(program)
    start, end = _run(
        program.chip,
        program.cycles,
        program.latency,
        program.moved,
        program.hbm_bytes,
        program.dep_ptr,
        user_ptr,
        users,
        prev,
        following,
        chips,
        float(hbm_bytes_per_cycle),
        float(dma_bytes_per_cycle),
    )
    if n and end.min() < 0:
        raise RuntimeError("deadlock: no command can start")
    return Timeline(start, end)


def simulate_block(block: ProgramBlock, hbm_bytes_per_cycle: float, dma_bytes_per_cycle: float) -> Timeline:
    """The timelines of a block's programs in one call: Timeline of [programs, commands] arrays,
    row k program k's (what `simulate(block.program(k))` gives)."""
    base = block.base
    chips, prev, following, user_ptr, users = _structure(base)
    columns = [VARYING.index(name) for name in ("cycles", "latency", "moved", "hbm_bytes")]
    start, end = _run_each(
        base.chip, base.cycles, base.latency, base.moved, base.hbm_bytes, block.rows,
        np.ascontiguousarray(block.values[:, :, columns]), base.dep_ptr, user_ptr, users, prev, following,
        chips, float(hbm_bytes_per_cycle), float(dma_bytes_per_cycle),
    )  # fmt: skip
    if end.size and end.min() < 0:
        raise RuntimeError("deadlock: no command can start")
    return Timeline(start, end)


@njit(cache=True)
def _run_each(
    chip, cycles, latency, moved, hbm, rows, values, dep_ptr, user_ptr, users, prev, following, chips, hbm_bw,
    dma_bw,
):  # fmt: skip
    """_run on each program of a block: the base's timing columns with `rows` set to values[k]
    (cycles, latency, moved, HBM bytes)."""
    count, n = values.shape[0], cycles.shape[0]
    start = np.empty((count, n))
    end = np.empty((count, n))
    own = (cycles.copy(), latency.copy(), moved.copy(), hbm.copy())
    for k in range(count):
        for r in range(rows.shape[0]):
            own[0][rows[r]] = values[k, r, 0]
            own[1][rows[r]] = values[k, r, 1]
            own[2][rows[r]] = values[k, r, 2]
            own[3][rows[r]] = values[k, r, 3]
        start[k], end[k] = _run(chip, own[0], own[1], own[2], own[3], dep_ptr, user_ptr, users, prev,
                                following, chips, hbm_bw, dma_bw)  # fmt: skip
    return start, end


# The last few programs' queue links and users, by the arrays they derive from. Decode steps are
# one template with patched timings: they share these arrays (a recipe book's DecodeSteps), so
# their structure is derived once. Entries hold the arrays themselves: identity cannot be reused.
_STRUCTURES: list[tuple[tuple[np.ndarray, ...], tuple]] = []


def _structure(program: Program) -> tuple:
    """(chips, prev, following, user_ptr, users) of a program: who queues behind whom, who waits."""
    arrays = (program.chip, program.context, program.dep_ptr, program.dep_idx)
    for key, found in _STRUCTURES:
        if all(a is b for a, b in zip(key, arrays, strict=True)):
            return found
    chips = int(program.chip.max()) + 1 if len(program) else 1
    ordered = np.array([c.ordered for c in program.sites.contexts])
    found = (chips, *_queue_links(program.chip, program.context, ordered, chips),
             *_users(program.dep_ptr, program.dep_idx))  # fmt: skip
    _STRUCTURES[:] = [(arrays, found), *_STRUCTURES[:3]]
    return found


@njit(cache=True)
def _queue_links(chip, context, ordered, chips):
    """The previous and next command of each command's in-order queue (-1: none, or DMA)."""
    n = chip.shape[0]
    contexts = ordered.shape[0]
    prev = np.full(n, -1, np.int64)
    following = np.full(n, -1, np.int64)
    last = np.full(chips * contexts, -1, np.int64)
    for i in range(n):
        if ordered[context[i]]:
            q = chip[i] * contexts + context[i]
            if last[q] >= 0:
                prev[i] = last[q]
                following[last[q]] = i
            last[q] = i
    return prev, following


@njit(cache=True)
def _users(dep_ptr, dep_idx):
    """Who waits for each command (CSR), in ascending order of the waiting command."""
    n = dep_ptr.shape[0] - 1
    ptr = np.zeros(n + 1, np.int64)
    for d in dep_idx:
        ptr[d + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    users = np.empty(dep_idx.shape[0], np.int64)
    for i in range(n):
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            d = dep_idx[k]
            users[fill[d]] = i
            fill[d] += 1
    return ptr, users


@njit(cache=True)
def _add_candidate(candidates, size, mark, stamp, value):
    """Appends value once per event (mark[value] == stamp once added); returns the new size."""
    if mark[value] == stamp:
        return size
    mark[value] = stamp
    candidates[size] = value
    return size + 1


@njit(cache=True)
def _sort_ascending(values, size):
    """Sorts values[:size] in place: by insertion while short (most events start one or two
    commands, and numba's sort costs more than the event itself), else numba's sort."""
    if size > 16:
        values[:size].sort()
        return
    for x in range(1, size):
        v = values[x]
        y = x - 1
        while y >= 0 and values[y] > v:
            values[y + 1] = values[y]
            y -= 1
        values[y + 1] = v


@njit(cache=True)
def _run(chip, cycles, latency, moved, hbm, dep_ptr, user_ptr, users, prev, following, chips, hbm_bw, dma_bw):
    n = cycles.shape[0]
    waiting = np.empty(n, np.int64)
    for i in range(n):
        waiting[i] = dep_ptr[i + 1] - dep_ptr[i]
    start = np.full(n, -1.0)
    end = np.full(n, -1.0)
    left = moved.astype(np.float64)  # bytes a move still has to go
    rate = np.zeros(n)  # its uncontended rate (0: not a move)
    frac = np.zeros(n)  # the HBM share of its bytes
    for i in range(n):
        if moved[i] > 0 and cycles[i] > latency[i]:
            rate[i] = moved[i] / (cycles[i] - latency[i])
            frac[i] = hbm[i] / moved[i]
    active = np.empty(n, np.int64)  # the commands under way, in the order they started
    moving = np.zeros(n, np.bool_)  # per active slot
    share = np.zeros(n)  # per active slot
    demand = np.zeros(chips)
    hbm_demand = np.zeros(chips)
    scale = np.ones(chips)
    candidates = np.empty(n, np.int64)
    mark = np.full(n, -1, np.int64)  # the event at which a command last became a candidate
    stamp = 0
    count = 0
    now = 0.0
    finished = 0
    for i in range(n):
        if waiting[i] == 0 and prev[i] < 0:
            start[i] = now
            active[count] = i
            count += 1
    while finished < n:
        if count == 0:
            break  # deadlock: the caller sees unfinished commands
        for c in range(chips):
            demand[c] = 0.0
            hbm_demand[c] = 0.0
        for a in range(count):
            i = active[a]
            moving[a] = rate[i] > 0 and now >= start[i] + latency[i] - EPS
            if moving[a]:
                demand[chip[i]] = demand[chip[i]] + rate[i]
                hbm_demand[chip[i]] = hbm_demand[chip[i]] + rate[i] * frac[i]
        for c in range(chips):
            if demand[c] > 0:
                scale[c] = min(1.0, dma_bw / demand[c])
                if hbm_demand[c] > 0:
                    scale[c] = min(scale[c], hbm_bw / hbm_demand[c])
        step = np.inf
        for a in range(count):
            i = active[a]
            if moving[a]:
                share[a] = rate[i] * scale[chip[i]]
                step = min(step, left[i] / share[a] if share[a] > 0 else np.inf)
            elif rate[i] > 0:
                step = min(step, start[i] + latency[i] - now)
            else:
                step = min(step, start[i] + cycles[i] - now)
        now += step
        stamp += 1
        n_cand = 0
        kept = 0
        for a in range(count):
            i = active[a]
            if moving[a]:
                left[i] = max(0.0, left[i] - share[a] * step)
                finished_now = left[i] <= 1e-6
            else:
                finished_now = rate[i] == 0 and now >= start[i] + cycles[i] - EPS
            if not finished_now:
                active[kept] = i
                kept += 1
                continue
            end[i] = now
            finished += 1
            if following[i] >= 0:
                n_cand = _add_candidate(candidates, n_cand, mark, stamp, following[i])
            for u in range(user_ptr[i], user_ptr[i + 1]):
                waiting[users[u]] -= 1
                n_cand = _add_candidate(candidates, n_cand, mark, stamp, users[u])
        count = kept
        _sort_ascending(candidates, n_cand)  # ascending index, as the reference starts them
        for c in range(n_cand):
            i = candidates[c]
            if start[i] < 0 and waiting[i] == 0 and (prev[i] < 0 or end[prev[i]] >= 0):
                start[i] = now
                active[count] = i
                count += 1
    return start, end
