"""A layer's time is the union of its ops' intervals: the vectorised sum equals the plain walk."""

from __future__ import annotations

import numpy as np

from simulator.report import _busy_spans


def _walk(first, last, group, groups) -> np.ndarray:
    """The definition: in start order per group, each interval adds what lies past the latest end."""
    spans, end, current = np.zeros(groups), -np.inf, -1
    for i in np.lexsort((first, group)):
        if group[i] != current:
            current, end = group[i], -np.inf
        start = max(first[i], end)
        spans[group[i]] += max(0.0, last[i] - start)
        end = max(end, last[i])
    return spans


def test_union_of_intervals_matches_the_walk() -> None:
    rng = np.random.default_rng(0)
    for case in range(2000):
        n, groups = int(rng.integers(1, 50)), int(rng.integers(1, 6))
        first = rng.integers(0, 100, n) + (rng.random(n) if case % 2 else 0.0)
        last = first + rng.integers(0, 30, n)
        _, group = np.unique(rng.integers(0, groups, n), return_inverse=True)
        count = int(group.max()) + 1
        np.testing.assert_allclose(_busy_spans(first, last, group, count), _walk(first, last, group, count),
                                   rtol=1e-12, atol=1e-9)  # fmt: skip
