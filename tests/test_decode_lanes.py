"""Decode steps costed a block of lengths at once (the lanes of the recipe book) equal the steps costed
one length at a time, for every bundled model; a block run and totalled whole equals its programs
run one by one; and Lanes arithmetic equals Python's, lane by lane."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from simulator.hardware import load_hardware
from simulator.occupancy import StateSweeps, plan, state_cycles
from simulator.step_totals import StepTotals
from simulator.targets.rngd.mapping.lanes import Diverged, Lanes, maximum, minimum
from simulator.targets.rngd.mapping.schedule import _split
from simulator.targets.rngd.mapping.steps import BLOCK, DecodeSteps
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes
from tcp_compiler.pipeline import run, run_block
from tests.programs import same_program


def _lengths(model: str) -> range:
    """Across a block boundary, and where a sliding window fills up if the model has one."""
    cfg = load_model(model).config
    windows = [layer.sliding_window for layer in cfg.layers if layer.sliding_window]
    learned = cfg.max_positions - BLOCK if cfg.positions.kind == "learned" else 2048  # a table of positions
    middle = min([*windows, 2048, learned])
    return range(middle - 40, middle - 40 + BLOCK + 30)


def _check(
    model: str, lengths: range, dtype: str = "bf16", batch: int = 2, chips: int = 1, hw=None,
    in_blocks: float = 0.5,
) -> None:  # fmt: skip
    hw = hw or load_hardware("rngd" if chips == 1 else f"rngd-{chips}")
    cfg = load_model(model).config
    graph = run_passes(build_decode(cfg, PRECISIONS[dtype], batch, lengths[0] - 1, chips=chips).graph)
    steps = DecodeSteps(graph, hw)
    blocked = list(steps.programs(lengths))
    one_by_one = DecodeSteps(graph, hw)
    assert len(blocked) == len(lengths)
    assert steps.in_blocks >= len(lengths) * in_blocks, "lengths are costed in blocks, not alone"
    for n, program in zip(lengths, blocked, strict=True):
        assert same_program(program, one_by_one.at(n)), (model, dtype, n)


@pytest.mark.parametrize("model", bundled_models())
def test_blocks_equal_single_steps_for_every_bundled_model(model: str) -> None:
    large = ("deepseek-v3", "llama-3.1-70b", "qwen3-32b", "gemma-3-27b", "mixtral-8x7b")  # fp8 to fit
    _check(model, _lengths(model), dtype="fp8" if model in large else "bf16")


@pytest.mark.parametrize(
    ("model", "lengths", "dtype", "batch", "chips"),
    [
        ("llama-3.2-1b", range(1, 140), "bf16", 1, 1),  # short caches: the structure changes often
        ("llama-3.2-1b", range(4060, 4200), "w4-zp", 8, 1),  # weight codes, a larger batch
        ("qwen3-30b-a3b", range(1000, 1100), "fp8", 4, 1),  # MoE
        ("llama-3.2-1b", range(4080, 4200), "bf16", 2, 2),  # two chips: all-reduces
    ],
)
def test_blocks_equal_single_steps(model: str, lengths: range, dtype: str, batch: int, chips: int) -> None:
    _check(model, lengths, dtype, batch, chips)


@pytest.mark.parametrize(("slices", "lanes", "in_blocks"), [(16, 16, 0.5), (24, 6, 0.0)])
def test_blocks_equal_single_steps_on_other_hardware(tmp_path, slices: int, lanes: int, in_blocks: float):
    """Other slice and lane counts: other candidate grids and placements. With lanes no power of two
    each length has its own candidates, so blocks split down to single lengths (and still agree)."""
    spec = tmp_path / "other.toml"
    assumed = 'source = "assumed: test"'
    spec.write_text(
        f'extends = "rngd"\ndescription = "test"\n[chip]\nslices_per_pe = {{ value = {slices}, {assumed} }}\n'
        f"lanes_per_slice = {{ value = {lanes}, {assumed} }}\n"
        f"[switch]\nring_slices = {{ value = {4 * slices}, {assumed} }}\n"
    )
    _check("qwen3-8b", range(3000, 3300), hw=load_hardware(spec), in_blocks=in_blocks)


# --- Lanes against Python's own ints and floats ---------------------------------------------------

_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "truediv": lambda a, b: a / b,
    "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
}  # fmt: skip


def _operand(rng: random.Random) -> int | float:
    kind = rng.random()
    if kind < 0.6:
        return rng.randint(-(10**9), 10**9)
    if kind < 0.8:
        return rng.randint(1, 300)
    return rng.uniform(-1e6, 1e6)


@pytest.mark.parametrize("op", sorted(_BINARY))
def test_lanes_arithmetic_equals_python_lane_by_lane(op: str) -> None:
    rng = random.Random(op)
    f = _BINARY[op]
    for _ in range(200):
        xs = [_operand(rng) for _ in range(16)]
        ys = [_operand(rng) or 1 for _ in range(16)]
        if all(type(x) is type(xs[0]) for x in xs) and all(type(y) is type(ys[0]) for y in ys):
            got = f(Lanes.of(xs), Lanes.of(ys))
            assert got.v.tolist() == [f(x, y) for x, y in zip(xs, ys, strict=True)]
        scalar = ys[0]  # a Python scalar on either side
        assert f(Lanes.of([int(x) for x in xs]), scalar).v.tolist() == [f(int(x), scalar) for x in xs]
        assert f(scalar, Lanes.of([int(x) or 1 for x in xs])).v.tolist() == [
            f(scalar, int(x) or 1) for x in xs
        ]


def test_lanes_ceil_floor_sum_prod_max_min_and_split_equal_python() -> None:
    rng = random.Random(7)
    for _ in range(300):
        ints = [rng.randint(0, 10**7) for _ in range(8)]
        others = [rng.randint(0, 10**7) for _ in range(8)]
        lanes = Lanes.of(ints)
        assert math.ceil(lanes / 7.5).v.tolist() == [math.ceil(x / 7.5) for x in ints]
        assert math.floor(lanes / 3).v.tolist() == [math.floor(x / 3) for x in ints]
        assert sum([lanes, 3, lanes]).v.tolist() == [2 * x + 3 for x in ints]
        assert math.prod([2, lanes, 5]).v.tolist() == [10 * x for x in ints]
        assert maximum(lanes, Lanes.of(others), 1).v.tolist() == [
            max(x, y, 1) for x, y in zip(ints, others, strict=True)
        ]
        assert minimum(lanes, 5000).v.tolist() == [min(x, 5000) for x in ints]
        parts = rng.randint(1, 9)
        split = _split(lanes, parts)
        assert [[int(p.v[k]) for p in split] for k in range(8)] == [_split(x, parts) for x in ints]


def test_lanes_refuse_what_they_cannot_do_exactly() -> None:
    mixed = Lanes.of([1, 5, 9])
    with pytest.raises(Diverged):
        bool(mixed > 4)  # a branch the lanes take differently
    with pytest.raises(Diverged):
        range(mixed)  # a count that differs between lanes
    assert bool(mixed > 0) and not bool(mixed > 9)  # lanes that agree branch as one
    assert len(range(Lanes.of([3, 3]))) == 3
    with pytest.raises(Diverged):
        Lanes.of([2**40, 1]) * 2**30  # beyond exact int64
    with pytest.raises(Diverged):
        Lanes.of([2**54, 1]) / 3  # Python divides big ints exactly; float64 would not
    with pytest.raises(ZeroDivisionError):
        Lanes.of([4, 5]) // Lanes.of([1, 0])
    with pytest.raises(Diverged):
        maximum(Lanes.of([1, 2]), 1.5)  # a float among them: the builtin, whose lanes disagree


def test_blocks_run_whole_equal_their_programs_run_one_by_one() -> None:
    """The engine and the op totals take a block whole; the same figures as program by program,
    across blocks of several lengths, a single length and a template recompile."""
    hw = load_hardware("rngd")
    cfg = load_model("llama-3.2-1b").config
    graph = run_passes(build_decode(cfg, PRECISIONS["bf16"], 2, 8099).graph)
    blocks = list(DecodeSteps(graph, hw).blocks(range(8100, 8400)))  # KV reads take a tile more at 8193
    assert len({len(b.base) for b in blocks}) > 1 and max(len(b) for b in blocks) > 1
    whole, one_by_one = StepTotals(), StepTotals()
    for block in blocks:
        timeline = run_block(block, hw)
        whole.add_block(block, timeline)
        for k in range(len(block)):
            program = block.program(k)
            alone = run(program, hw)
            row = timeline.row(k)
            assert np.array_equal(row.start, alone.start) and np.array_equal(row.end, alone.end)
            assert block.sums("flops")[k] == program.flops.sum()
            assert block.sums("hbm_bytes")[k] == program.hbm_bytes.sum()
            one_by_one.add(program, alone)
    a, b = whole.totals(), one_by_one.totals()
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, field.name


def test_lanes_compare_ints_with_floats_only_where_float64_is_exact() -> None:
    assert (Lanes.of([3, 2**52]) < 2.5).v.tolist() == [False, False]
    with pytest.raises(Diverged):
        _ = Lanes.of([1, 2**60 + 1]) < 2.0**60  # Python compares exactly; float64(2**60 + 1) is 2.0**60


def test_state_sweeps_sorted_from_the_previous_order_equal_state_cycles() -> None:
    """Occupancy states sorted from the previous step's order (or, when that order does not fit
    or is far off, by numpy) are the state_cycles of each program: events at one time change the
    state together, so any order by time gives the same sums."""
    hw = load_hardware("rngd")
    graph = run_passes(build_decode(load_model("llama-3.2-1b").config, PRECISIONS["bf16"], 2, 1999).graph)
    steps = DecodeSteps(graph, hw)
    sweeps = StateSweeps(steps.program.sites)
    marker = plan(steps.program.sites)[1]
    rng = np.random.default_rng(0)
    for n, program in enumerate(steps.programs(range(2000, 2010))):
        timeline = run(program, hw)
        if n == 5:  # a far-off order: the sort gives up and numpy sorts
            sweeps.order = rng.permutation(len(sweeps.order))
        if n == 8:  # an order of another length: numpy sorts
            sweeps.order = sweeps.order[:-1]
        got = sweeps(program.context, program.chip, timeline.start, timeline.end, program.latency,
                     program.cycles, program.moved, program.hbm_bytes, program.busy[:, marker],
                     timeline.cycles)  # fmt: skip
        assert np.array_equal(got, state_cycles(program, timeline)), n
