"""Placing decode steps' einsums in batches of lengths gives the placements of one at a time, and
every consecutive step across a power of two (where candidate grids change) equals a fresh schedule."""

from __future__ import annotations

import numpy as np

from ir.dtypes import BF16, F32
from simulator.hardware import load_hardware
from simulator.program import COLUMNS
from simulator.targets.rngd.mapping.placement import EinsumShape, _place_batch, first_best, place, place_ahead
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY
from simulator.targets.rngd.mapping.schedule import schedule
from simulator.targets.rngd.mapping.steps import DecodeSteps
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes

MACHINE = load_hardware("rngd")


def _attention_shapes(length: int) -> list[EinsumShape]:
    """A decode step's two attention einsums (scores, then values) at `length` keys."""
    sizes = tuple(sorted({"B": 3, "Hkv": 8, "G": 4, "Sq": 1, "K": 128, "Sk": length}.items()))
    q, k, v = ("B", "Hkv", "G", "Sq", "K"), ("B", "Hkv", "Sk", "K"), ("B", "Hkv", "Sk", "K")
    probs = ("B", "Hkv", "G", "Sq", "Sk")
    return [EinsumShape((q, k), probs, sizes, BF16, F32), EinsumShape((probs, v), q, sizes, BF16, F32)]


def test_a_batch_places_each_shape_as_alone():
    lengths = [*range(1000, 1100), *range(4090, 4100), 65536, 65537]
    for which in (0, 1):
        shapes = [_attention_shapes(n)[which] for n in lengths]
        place_ahead(shapes, MACHINE)  # mixed grids: split into batches of alike shapes
        alone = [_place_batch([s], MACHINE, DEFAULT_POLICY)[0] for s in shapes]
        assert [place(s, MACHINE) for s in shapes] == alone


def _step(cfg, past: int):
    return run_passes(build_decode(cfg, PRECISIONS["bf16"], 2, past).graph)


def test_consecutive_steps_across_a_power_of_two_equal_fresh_schedules():
    cfg = load_model("llama-3.2-1b").config
    steps = DecodeSteps(_step(cfg, 2040), MACHINE)
    for past in range(2040, 2056):  # lengths 2041 .. 2056 cross 2048
        fresh = schedule(_step(cfg, past), MACHINE)
        step = steps.at(past + 1)
        for name, _ in COLUMNS:
            assert np.array_equal(getattr(step, name), getattr(fresh, name)), (past, name)
        assert np.array_equal(step.busy, fresh.busy) and np.array_equal(step.dep_idx, fresh.dep_idx)


def test_first_best_is_the_stable_lexsort_first() -> None:
    """The packed argmin picks what a stable lexsort by (cycles, slices, passes) puts first, ties
    and all; cycles too large to pack take the lexsort itself."""
    rng = np.random.default_rng(3)
    for top in (4, 50, 10**6, 2**60):
        cycles = rng.integers(0, top, (40, 300), dtype=np.int64)
        slices = 1 << rng.integers(0, 7, 300)
        passes = 1 << rng.integers(0, 4, 300)
        keys = (np.broadcast_to(passes, cycles.shape), np.broadcast_to(slices, cycles.shape), cycles)
        want = np.lexsort(keys, axis=-1)[:, 0]
        assert np.array_equal(first_best(cycles, slices, passes), want), top
