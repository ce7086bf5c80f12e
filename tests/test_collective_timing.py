"""Collectives are timed as rings: 2(n-1) latency-bound steps for an all-reduce, n-1 for a gather."""

from __future__ import annotations

import math

import pytest

import ir
from ir import BF16, Graph, TensorType
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.schedule import schedule
from simulator.targets.rngd.sites import SITES

RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1}


@pytest.mark.parametrize("chips", [2, 4, 8])
@pytest.mark.parametrize(("kind", "steps"), RING_STEPS.items())
def test_link_time_is_one_latency_per_ring_step_plus_the_bytes(chips: int, kind: str, steps) -> None:
    hw = load_hardware("rngd", chips)
    g = Graph("collective")
    x = g.input("x", TensorType.of(BF16, S=256, D=4096))
    attrs = {"op": "sum"} if kind == "all_reduce" else {"axis": "D"}
    y = g.add(kind, x, name="y", chips=chips, **attrs)
    g.set_outputs(y)
    ir.verify(g)
    program = schedule(g, hw)

    link = program.context == SITES.context("link")
    sent = int(program.link_bytes[link].sum())
    expected = steps(chips) * hw.link_latency_cycles + math.ceil(sent / hw.link_bytes_per_cycle)
    assert int(program.cycles[link].sum()) == expected
    nbytes = x.type.nbytes if kind == "all_reduce" else y.type.nbytes
    assert sent == (2 if kind == "all_reduce" else 1) * nbytes * (chips - 1) // chips
