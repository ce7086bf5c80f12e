"""Every cycle count of a fixed set of simulations equals the stored fingerprint
(benchmarks/cycle_fingerprint.py): refactors keep results identical; a fidelity fix that moves them
rewrites tests/golden/cycles.json in the same commit and says why."""

from __future__ import annotations

import json

import pytest

from benchmarks.cycle_fingerprint import GOLDEN, POINTS, fingerprint, key

STORED = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("point", POINTS, ids=key)
def test_cycles_equal_the_stored_fingerprint(point: tuple) -> None:
    assert fingerprint(point) == STORED[key(point)]


def test_every_point_has_a_stored_fingerprint() -> None:
    assert set(STORED) == {key(p) for p in POINTS}
