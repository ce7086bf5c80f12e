"""MoE as dispatch / grouped einsum / combine: what the mapping reads, what capacity counts, physics.

The interpreter rules of the MoE ops are checked against a plain numpy MoE in
tests/test_ops_interpreter.py and the whole lowering against transformers in tests/oracle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ir import Graph
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.capacity import capacity, peak_spill
from simulator.targets.rngd.mapping.experts import expected_experts_hit
from simulator.targets.rngd.mapping.fusion import on_the_fly, view_roots
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, Precision
from tcp_compiler.pipeline import Compiled, CompileOptions, compile_phase, lower
from tcp_compiler.simulate import simulate_generation

MOE_KINDS = frozenset({"dispatch", "bincount", "grouped_einsum", "combine"})
FP8 = PRECISIONS["fp8"]
# (model, hardware, batch, prompt): one chip, and the expert width split over eight
RUNS = [("qwen3-30b-a3b", "rngd", 1, 512), ("mixtral-8x7b", "rngd-8", 1, 512)]


@pytest.mark.parametrize(("experts", "top_k", "tokens"), [(8, 2, 1), (8, 2, 3), (128, 8, 4), (128, 8, 40)])
def test_expected_experts_hit_is_what_uniform_routing_hits(experts, top_k, tokens) -> None:
    rng = np.random.default_rng(7)
    trials = 4000
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=-1)[..., :top_k]
    hit = np.array([len(np.unique(p)) for p in picks])
    expected = expected_experts_hit(experts, top_k, tokens)
    assert abs(hit.mean() - expected) < 4 * hit.std() / math.sqrt(trials) + 1e-9
    assert expected_experts_hit(experts, top_k, 1) == pytest.approx(top_k)


def _weights_of(graph: Graph, value: str) -> tuple[str, ...]:
    """The params a grouped einsum's weight operand is made of (through casts and dequantising)."""
    roots = view_roots(graph)
    root = roots[value]
    fly = on_the_fly(graph, roots)
    return fly[root][0] if root in fly else (root,)


def _moe_ops(compiled: Compiled, layer: int) -> list[int]:
    graph = compiled.graph
    return [
        k
        for k, op in enumerate(compiled.program.ops)
        if op.layer == layer and any(graph[n].kind in MOE_KINDS for n in op.nodes)
    ]


def _layer_figures(compiled: Compiled, layer: int) -> tuple[int, int, int]:
    """(HBM bytes the layer's MoE ops move, its stacked expert bytes, the activations they touch)."""
    graph, program = compiled.graph, compiled.program
    ops = _moe_ops(compiled, layer)
    moved = int(program.hbm_bytes[np.isin(program.op, ops)].sum())
    nodes = [graph[n] for k in ops for n in program.ops[k].nodes]
    stacked = {p for n in nodes if n.kind == "grouped_einsum" for p in _weights_of(graph, n.operands[1])}
    weight_bytes = sum(graph[p].type.nbytes for p in stacked)
    fetched = set(on_the_fly(graph, view_roots(graph))) | {n for n, r in view_roots(graph).items() if r != n}
    values = {o for n in nodes for o in (*n.operands, n.name)}
    activations = sum(
        graph[v].type.nbytes for v in values if not traits(graph[v].kind).in_memory and v not in fetched
    )
    return moved, weight_bytes, activations


def _compiled(model: str, hw: str, batch: int, length: int, phase: str, prec: Precision = FP8) -> Compiled:
    cfg = load_model(model).config
    return compile_phase(cfg, load_hardware(hw), prec, phase, length, CompileOptions(batch=batch))


@pytest.mark.parametrize(("model", "hw", "batch", "prompt"), RUNS)
def test_prefill_reads_each_expert_at_most_once(model, hw, batch, prompt) -> None:
    compiled = _compiled(model, hw, batch, prompt, "prefill")
    moe = load_model(model).config.moe
    hit = expected_experts_hit(moe.experts, moe.top_k, batch * prompt)
    for layer in (0, len(compiled.model.config.layers) - 1):
        moved, weights, activations = _layer_figures(compiled, layer)
        assert weights > 0
        assert moved <= weights + activations, (layer, moved, weights, activations)
        assert moved >= weights * hit / moe.experts  # the experts it hits are read


@pytest.mark.parametrize(("model", "hw"), [(m, h) for m, h, _, _ in RUNS])
@pytest.mark.parametrize("batch", [1, 4])
def test_decode_reads_only_the_experts_its_batch_hits(model, hw, batch) -> None:
    compiled = _compiled(model, hw, batch, 100, "decode")
    moe = load_model(model).config.moe
    share = expected_experts_hit(moe.experts, moe.top_k, batch) / moe.experts
    moved, weights, activations = _layer_figures(compiled, 0)
    assert weights * share <= moved <= weights * share + activations + 8  # + rounding up per stacked param


def _from_weights(graph: Graph) -> frozenset[str]:
    """Values computed from weights alone (casts, dequantised codes), and values shaped like an
    expert's weights gathered per routed slot ([B, S, Kk, F, D])."""
    weights: set[str] = set()
    for n in graph.nodes:
        made_of = [o in weights or graph[o].kind == "const" for o in n.operands]
        if n.kind == "param" or made_of and all(made_of):
            weights.add(n.name)
    gathered = {
        n.name
        for n in graph.nodes
        if "Kk" in n.type.names
        and any(a.startswith("F") for a in n.type.names)
        and any(a.startswith("D") for a in n.type.names)
    }
    return frozenset({w for w in weights if graph[w].kind != "param"} | gathered)


@pytest.mark.parametrize("dtype", ["fp8", "w4"])
def test_capacity_counts_no_weights_as_activations(dtype) -> None:
    """The old lowering gathered an expert's weights per routed slot ([B, S, Kk, F, D]) and capacity
    counted them (25.9 GB for qwen3-30b-a3b at 2048 tokens); dequantised weights are made as a
    pass fetches them. Neither may be in the spilled activations."""
    hw = load_hardware("rngd")
    cfg = load_model("qwen3-30b-a3b").config
    lowered = lower(cfg, hw, PRECISIONS[dtype], "prefill", 2048)
    graph = lowered.graph
    derived = _from_weights(graph)
    assert any("experts" in d for d in derived) == (dtype == "w4"), "w4 dequantises the stacked experts"
    assert lowered.capacity.activations == peak_spill(graph, hw, ignore=derived)
    cap = capacity(graph, lowered.weight_names, hw)
    assert cap.needed <= cap.available  # fits one chip now (was refused for 25.9 GB of "activations")


def _peak_flops_per_cycle(hw: Hardware) -> int:
    return 2 * max(hw.macs_per_cycle(d) for d in ("fp8e4m3", "bf16", "f32"))


@pytest.mark.parametrize(("model", "hw", "batch", "prompt"), RUNS)
def test_no_moe_phase_beats_physics(model, hw, batch, prompt) -> None:
    hardware = load_hardware(hw)
    sim = simulate_generation(load_model(model).config, hardware, FP8, batch, prompt, 3)
    program = sim.prefill.program
    peak_flops, peak_bytes = _peak_flops_per_cycle(hardware), hardware.hbm.peak_bytes_per_cycle
    phases = [(sim.prefill.cycles, int(program.flops.sum()), int(program.hbm_bytes.sum()))]
    phases += zip(sim.decode_cycles, sim.decode_flops, sim.decode_hbm, strict=True)
    for cycles, flops, hbm in phases:
        assert cycles >= flops / peak_flops and cycles >= hbm / peak_bytes, (cycles, flops, hbm)
    # the program carries the graph's expert FLOPs: tokens x top_k x one expert's, per chip
    cfg = load_model(model).config
    grouped = sum(
        int(program.flops[program.op == k].sum())
        for k, op in enumerate(program.ops)
        if op.name.split(".")[-1] in ("expert_gate", "expert_up", "expert_down")
    )
    per_chip = cfg.moe.intermediate // hardware.system.chips
    # gate, up and down einsums, plus the SiLU, its sigmoid and the GLU product fused after gate / up
    einsums = len(cfg.layers) * batch * prompt * cfg.moe.top_k * 3 * 2 * cfg.hidden * per_chip
    assert einsums <= grouped <= einsums * (1 + 1 / cfg.hidden + 1 / per_chip)
