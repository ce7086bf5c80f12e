"""The compiled loop of simulator.report's layer spans (Numba), apart so that importing the report
does not import Numba."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def span_pieces(first, last, group, groups):
    """Row g, column r: what the r-th interval of group g in start order (ties in index order)
    adds past the latest end before it, max(last - max(first, latest end), 0); rows padded with 0.
    The rows' sums are the groups' busy spans (simulator.report._busy_spans)."""
    n = first.shape[0]
    counts = np.zeros(groups + 1, np.int64)
    for i in range(n):
        counts[group[i] + 1] += 1
    width = 0
    for g in range(groups):
        width = max(width, counts[g + 1])
        counts[g + 1] += counts[g]
    order = np.empty(n, np.int64)
    fill = counts[:-1].copy()
    for i in range(n):  # by group, index order within each
        order[fill[group[i]]] = i
        fill[group[i]] += 1
    pieces = np.zeros((groups, width))
    for g in range(groups):
        lo, hi = counts[g], counts[g + 1]
        for x in range(lo + 1, hi):  # stable insertion sort by start: ops run nearly in order
            v = order[x]
            y = x - 1
            while y >= lo and first[order[y]] > first[v]:
                order[y + 1] = order[y]
                y -= 1
            order[y + 1] = v
        end = -np.inf
        for r in range(hi - lo):
            i = order[lo + r]
            start = first[i] if first[i] >= end else end
            piece = last[i] - start
            pieces[g, r] = piece if piece >= 0.0 else 0.0
            end = end if end >= last[i] else last[i]
    return pieces


@njit(cache=True)
def span_pieces_rows(first, last, group, groups):
    """span_pieces of each row of [programs, ops] `first` / `last`: [programs, groups, width]."""
    one = span_pieces(first[0], last[0], group, groups)
    out = np.zeros((first.shape[0], one.shape[0], one.shape[1]))
    out[0] = one
    for k in range(1, first.shape[0]):
        out[k] = span_pieces(first[k], last[k], group, groups)
    return out


@njit(cache=True)
def op_busy(start, end, starts):
    """Per op (its commands are the run from starts[k] to starts[k + 1]): the length of the union
    of its commands' [start, end] intervals, summed in start order (ties in index order), each
    command adding what lies beyond the latest end before it. An op whose weight was fetched
    early is busy for the fetch and its pass, not for the ops that ran between them."""
    n, ops = start.shape[0], starts.shape[0]
    out = np.zeros(ops)
    order = np.arange(n)
    for k in range(ops):
        lo = starts[k]
        hi = starts[k + 1] if k + 1 < ops else n
        for x in range(lo + 1, hi):  # stable insertion sort by start: commands run nearly in order
            v = order[x]
            y = x - 1
            while y >= lo and start[order[y]] > start[v]:
                order[y + 1] = order[y]
                y -= 1
            order[y + 1] = v
        latest = -np.inf
        total = 0.0
        for r in range(lo, hi):
            i = order[r]
            begin = start[i] if start[i] >= latest else latest
            if end[i] > begin:
                total += end[i] - begin
            latest = latest if latest >= end[i] else end[i]
        out[k] = total
    return out


@njit(cache=True)
def op_busy_rows(start, end, starts):
    """op_busy of each row of [programs, commands] `start` / `end`: [programs, ops]."""
    out = np.zeros((start.shape[0], starts.shape[0]))
    for k in range(start.shape[0]):
        out[k] = op_busy(start[k], end[k], starts)
    return out
