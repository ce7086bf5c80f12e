"""The compiled loops of simulator.occupancy (Numba), apart so that importing the report does not
import Numba: commands to activity events, and the sweep that sums cycles per state."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def events(context, start, end, latency, cycles, moved, hbm, busy, plan):
    """Each command's activities as (time, activity * 2 + (0: begins, 1: ends)) events, by `plan`
    (simulator.occupancy.plan). A pooled (DMA) command transfers only when it has bytes and time
    beyond its latency (as the engine runs it); until then, and all of a command without such
    bytes, it is in start-up. `busy`: each command's busy cycles on the plan's marker unit."""
    n = context.shape[0]
    times = np.empty(4 * n)
    what = np.empty(4 * n, np.int64)
    k = 0
    for i in range(n):
        c, middle, second = context[i], end[i], -1
        first = plan[c, 0]
        if plan[c, 4]:
            if moved[i] > 0 and cycles[i] > latency[i]:
                middle = min(start[i] + latency[i], end[i])
                second = plan[c, 2] if hbm[i] > 0 else plan[c, 3]
        elif plan[c, 1] >= 0 and busy[i] > 0:
            first = plan[c, 1]
        if first < 0:
            continue
        if middle > start[i]:
            times[k], what[k], times[k + 1], what[k + 1] = start[i], 2 * first, middle, 2 * first + 1
            k += 2
        if second >= 0 and end[i] > middle:
            times[k], what[k], times[k + 1], what[k + 1] = middle, 2 * second, end[i], 2 * second + 1
            k += 2
    return times[:k], what[:k]


@njit(cache=True)
def sweep(times, what, last, activities):
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


@njit(cache=True)
def sweep_from(context, start, end, latency, cycles, moved, hbm, busy, plan, last, activities, hint):
    """`events` sorted by time and swept, in one call, sorting by insertion from `hint` (the
    previous decode step's order: steps differ little, so it nearly sorts their events). Any
    order by time gives the same sums (events at one time change the state together), so ties
    need not keep the stable sort's order. (totals, order), or empty arrays when `hint` does not
    fit or leaves too much to sort (the caller then sorts with numpy)."""
    times, what = events(context, start, end, latency, cycles, moved, hbm, busy, plan)
    n = times.shape[0]
    if hint.shape[0] != n:
        return np.zeros(0), np.zeros(0, np.int64)
    order = hint.copy()
    budget = 8 * n + 64
    for x in range(1, n):
        v = order[x]
        t = times[v]
        y = x - 1
        while y >= 0 and times[order[y]] > t:
            order[y + 1] = order[y]
            y -= 1
            budget -= 1
        order[y + 1] = v
        if budget < 0:
            return np.zeros(0), np.zeros(0, np.int64)
    return sweep(times[order], what[order], last, activities), order
