"""The Numba engine against the plain-Python reference engine, and the engine's physics."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine import simulate
from simulator.program import OpInfo, ProgramBuilder
from simulator.reference_engine import simulate_reference
from simulator.targets.rngd.sites import SITES

CONTEXTS = SITES.context_names


def random_program(rng: np.random.Generator, n: int, chips: int):
    b = ProgramBuilder(SITES)
    op = b.op(OpInfo("random", "pass", -1))
    for i in range(n):
        context = CONTEXTS[rng.integers(len(CONTEXTS))]
        deps = rng.choice(i, size=min(i, int(rng.integers(0, 4))), replace=False) if i else []
        chip = int(rng.integers(chips))
        if context == "dma" and rng.random() < 0.8:
            latency = int(rng.integers(0, 600))
            moved = int(rng.integers(1, 1 << 22))
            sides = int(rng.integers(0, 3))
            cycles = latency + max(1, int(moved / rng.uniform(64, 2048)))
            b.command(context, op, cycles, deps, latency=latency, moved=moved, hbm_bytes=moved * sides,
                      dm_bytes=moved * (2 - sides), chip=chip)  # fmt: skip
        else:
            b.command(context, op, int(rng.integers(1, 5000)), deps, chip=chip)
    return b.build()


def test_engine_equals_reference_on_thousands_of_random_programs() -> None:
    rng = np.random.default_rng(2026)
    for trial in range(3000):
        program = random_program(rng, int(rng.integers(1, 40)), int(rng.integers(1, 4)))
        hbm, dma = float(rng.uniform(100, 2000)), float(rng.uniform(100, 4000))
        a = simulate_reference(program, hbm, dma)
        b = simulate(program, hbm, dma)
        assert np.array_equal(a.start, b.start) and np.array_equal(a.end, b.end), trial


@pytest.mark.parametrize("seed", range(20))
def test_timelines_obey_dependencies_queues_and_bandwidth(seed: int) -> None:
    rng = np.random.default_rng(seed)
    program = random_program(rng, 200, 2)
    hbm, dma = 1440.0, 2048.0
    t = simulate(program, hbm, dma)
    for i in range(len(program)):
        for d in program.deps(i):
            assert t.start[i] >= t.end[d]
        assert t.end[i] - t.start[i] >= program.cycles[i] - 1e-6  # never faster than uncontended
    # Ordered contexts run one command at a time per chip.
    for chip in range(2):
        for ctx in ("main", "sub", "link"):
            ids = np.flatnonzero((program.chip == chip) & (program.context == CONTEXTS.index(ctx)))
            assert np.all(t.start[ids[1:]] >= t.end[ids[:-1]] - 1e-9)
    # Total HBM bytes can not arrive faster than the bandwidth of the chips that move them.
    for chip in range(2):
        ids = program.chip == chip
        assert program.hbm_bytes[ids].sum() / hbm <= t.end.max() + 1e-6


def test_same_program_same_cycles() -> None:
    program = random_program(np.random.default_rng(7), 500, 3)
    runs = {simulate(program, 1440.0, 2048.0).cycles for _ in range(3)}
    assert len(runs) == 1


def test_more_hbm_bandwidth_is_never_slower() -> None:
    rng = np.random.default_rng(11)
    for _ in range(100):
        program = random_program(rng, 60, 1)
        slow = simulate(program, 500.0, 2048.0).cycles
        fast = simulate(program, 1000.0, 2048.0).cycles
        assert fast <= slow
