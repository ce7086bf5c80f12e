"""Mapping onto the Tensor Unit: placements within the hardware's limits, commands that never
beat physics, FLOPs carried exactly, and the contraction-engine efficiency of GEMM and GEMV."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from simulator.hardware import load_hardware
from simulator.reference_engine import simulate_reference
from simulator.targets.rngd.mapping.placement import EinsumShape, place
from simulator.targets.rngd.mapping.schedule import schedule
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS

MACHINE = load_hardware("rngd")
EXAMPLES = Path(__file__).parents[1] / "examples" / "ir"


def _reference(program):
    """The plain-Python engine's timeline at the spec's bandwidths."""
    return simulate_reference(program, MACHINE.hbm.sustained_bytes_per_cycle, MACHINE.dma_bytes_per_cycle)


def _gemm(m: int, n: int, k: int, dtype=ir.BF16) -> ir.Graph:
    g = ir.Graph("gemm")
    a = g.input("a", ir.TensorType.of(dtype, M=m, K=k))
    w = g.param("w", ir.TensorType.of(dtype, N=n, K=k))
    c = g.add("einsum", a, w, name="c", eq="M K, N K -> M N", type=ir.TensorType.of(ir.BF16, M=m, N=n))
    g.set_outputs(c)
    return g


def _graphs() -> dict[str, ir.Graph]:
    cfg = load_model("llama-3.2-1b").config
    moe = load_model("qwen3-30b-a3b").config
    return {
        "decoder layer example": ir.load(EXAMPLES / "llama_decoder_layer.tir"),
        "attention example": ir.load(EXAMPLES / "attention_gqa_causal.tir"),
        "llama-3.2-1b prefill 64": build_prefill(cfg, PRECISIONS["bf16"], 1, 64).graph,
        "llama-3.2-1b decode": build_decode(cfg, PRECISIONS["bf16"], 4, 500).graph,
        "llama-3.2-1b decode w4": build_decode(cfg, PRECISIONS["w4"], 1, 100).graph,
        "qwen3-30b-a3b decode fp8": build_decode(moe, PRECISIONS["fp8"], 2, 100).graph,
        "gemm": _gemm(512, 1024, 256),
    }


GRAPHS = _graphs()


def _roofline(program, i: int) -> float:
    """The fewest cycles physics allows command i: FLOPs at the fastest contraction rate, bytes at
    peak HBM, DM, DMA and link bandwidth."""
    peak_flops = (
        2
        * MACHINE.slices
        * MACHINE.chip.lanes_per_slice
        * max(MACHINE.contraction.macs_per_lane_cycle.values())
    )
    hw = load_hardware("rngd")
    return max(
        program.flops[i] / peak_flops,
        program.hbm_bytes[i] / hw.hbm.peak_bytes_per_cycle,
        program.dm_bytes[i] / (MACHINE.slices * int(MACHINE.memory.dm_bytes_per_cycle_per_slice)),
        program.moved[i] / MACHINE.dma_bytes_per_cycle,
        program.link_bytes[i] / MACHINE.link_bytes_per_cycle,
    )


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_command_respects_its_roofline(name: str) -> None:
    program = schedule(GRAPHS[name], MACHINE)
    timeline = _reference(program)
    for i in range(len(program)):
        floor = _roofline(program, i)
        assert program.cycles[i] >= floor - 1e-6, (name, i, program.ops[program.op[i]].name)
        assert timeline.end[i] - timeline.start[i] >= floor - 1e-6


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_commands_carry_exactly_the_ir_flops(name: str) -> None:
    graph = GRAPHS[name]
    assert int(schedule(graph, MACHINE).flops.sum()) == ir.analyze(graph).total.flops


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_same_input_same_cycles(name: str) -> None:
    a = schedule(GRAPHS[name], MACHINE)
    b = schedule(GRAPHS[name], MACHINE)
    ta = _reference(a)
    tb = _reference(b)
    assert (a.cycles == b.cycles).all() and ta.cycles == tb.cycles


def test_large_bf16_gemm_reaches_80_percent_of_contraction_peak() -> None:
    program = schedule(_gemm(4096, 4096, 4096), MACHINE)
    cycles = _reference(program).cycles
    ideal = 4096**3 / MACHINE.macs_per_cycle(ir.BF16)
    assert ideal / cycles >= 0.80, ideal / cycles


def test_gemv_is_bound_by_hbm_bandwidth() -> None:
    program = schedule(_gemm(1, 4096, 4096), MACHINE)
    cycles = _reference(program).cycles
    hbm = program.hbm_bytes.sum() / MACHINE.hbm.sustained_bytes_per_cycle
    compute = 4096 * 4096 / MACHINE.macs_per_cycle(ir.BF16)
    assert hbm > 10 * compute  # memory, not compute, sets the floor
    assert hbm <= cycles <= 1.25 * hbm, cycles / hbm


DTYPES = [ir.BF16, ir.FP8E4M3, ir.I8, ir.I4]
AXES = st.lists(st.integers(1, 4096), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DTYPES), AXES, AXES, AXES, st.lists(st.integers(1, 64), max_size=2), st.booleans())
def test_random_einsum_placements_respect_every_limit(dtype, ks, ns, ms, bs, swap) -> None:
    named = lambda prefix, sizes: [(f"{prefix}{i}", s) for i, s in enumerate(sizes)]  # noqa: E731
    k, n, m, b = named("k", ks), named("n", ns), named("m", ms), named("b", bs)
    x = ir.TensorType.from_pairs(dtype, b + m + k)
    w = ir.TensorType.from_pairs(dtype, b + n + k)
    out = ir.TensorType.from_pairs(ir.F32, b + m + n)
    operands = (w, x) if swap else (x, w)
    eq = ", ".join(" ".join(t.names) for t in operands) + " -> " + " ".join(out.names)
    p = place(EinsumShape.of(eq, operands, out), MACHINE)
    ebytes = dtype.bits / 8
    assert p.slices_used <= MACHINE.slices
    assert p.clusters(MACHINE) <= MACHINE.chip.clusters
    assert p.lanes <= MACHINE.chip.lanes_per_slice
    assert p.packet * ebytes <= MACHINE.chip.packet_bytes
    assert p.accumulators <= MACHINE.contraction.accumulators_per_slice
    assert p.trf_tile_bytes <= MACHINE.memory.trf_bytes_per_slice
    assert p.dm_tile_bytes <= MACHINE.memory.dm_bytes_per_slice
    # Every axis is covered by its slices x (lanes | packets) x time steps.
    roles, slices, time = dict(p.roles), dict(p.slices), dict(p.time)
    sizes = {name: size for name, size in b + m + n + k}
    total = {r: math.prod(sizes[a] for a in roles[r]) for r in "KNMB"}
    assert slices["B"] * time["B"] >= total["B"]
    assert slices["M"] * time["M"] >= total["M"]
    assert slices["N"] * time["N"] * MACHINE.chip.lanes_per_slice >= total["N"]
    assert time["K"] * MACHINE.packet_elements(dtype) >= total["K"]
    # Never faster than the contraction engine at peak on the slices it uses.
    macs = math.prod(sizes.values())
    assert (
        p.compute_cycles * p.slices_used * MACHINE.chip.lanes_per_slice * MACHINE.packet_elements(dtype)
        >= macs
    )


def test_placement_is_cached_by_shape() -> None:
    shape = EinsumShape.of(
        "M K, N K -> M N", (ir.TensorType.of(ir.BF16, M=8, K=64), ir.TensorType.of(ir.BF16, N=64, K=64)),
        ir.TensorType.of(ir.F32, M=8, N=64),
    )  # fmt: skip
    assert place(shape, MACHINE) is place(shape, MACHINE)


@pytest.mark.parametrize("name", ["decoder layer example", "qwen3-30b-a3b decode fp8"])
def test_flops_are_conserved_through_the_passes_too(name: str) -> None:
    from tcp_compiler.passes import run_passes

    graph = run_passes(GRAPHS[name])
    assert int(schedule(graph, MACHINE).flops.sum()) == ir.analyze(graph).total.flops


@pytest.mark.parametrize(("tokens", "passes"), [(8192, 1), (16384, 2), (32768, 4)])
def test_long_projections_sweep_n_in_passes_to_stay_compute_bound(tokens: int, passes: int) -> None:
    """Llama-3.1-8B's gate projection: past 8192 tokens no slice split keeps <= 16 stationary rows
    per slice (the accumulators then hold too few streamed rows per TRF load), so the stationary
    rows are swept in sequential passes, each streaming the tokens again."""
    shape = EinsumShape.of(
        "B S D, F D -> B S F",
        (ir.TensorType.of(ir.BF16, B=1, S=tokens, D=4096), ir.TensorType.of(ir.BF16, F=14336, D=4096)),
        ir.TensorType.of(ir.F32, B=1, S=tokens, F=14336),
    )
    p = place(shape, MACHINE)
    assert p.n_passes == passes and p.bound == "contraction"
    assert p.reload_cycles <= p.compute_cycles and (passes == 1) == ("N-passes" not in p.describe(MACHINE))
