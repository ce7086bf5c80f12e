"""Fusion into Tensor Unit passes follows the pipeline order and keeps every op exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

import ir
from simulator.targets.rngd.mapping.fusion import fuse, view_roots
from simulator.targets.rngd.mapping.traits import STAGES, traits
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes

EXAMPLES = Path(__file__).parents[1] / "examples" / "ir"


def _graphs() -> dict[str, ir.Graph]:
    gemma = load_model("gemma-3-1b").config
    return {
        "decoder layer": ir.load(EXAMPLES / "llama_decoder_layer.tir"),
        "gemma prefill": run_passes(build_prefill(gemma, PRECISIONS["bf16"], 2, 16).graph),
        "qwen3 moe decode w4": build_decode(load_model("qwen3-30b-a3b").config, PRECISIONS["w4"], 1, 8).graph,
        "llama tp4 decode": build_decode(
            load_model("llama-3.1-8b").config, PRECISIONS["bf16"], 1, 8, chips=4
        ).graph,
    }


GRAPHS = _graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_working_op_lands_in_exactly_one_fused_op(name: str) -> None:
    graph = GRAPHS[name]
    ops = fuse(graph)
    placed = [n.name for op in ops for n in [*op.prologue, *op.nodes]]
    assert len(placed) == len(set(placed))
    skipped = {n.name for n in graph.nodes} - set(placed)
    for value in skipped:  # views, memory-resident values, immediates and fetch-time casts only
        node = graph[value]
        assert traits(node.kind).work == "free" or node.kind == "cast", node


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_passes_follow_the_pipeline_order(name: str) -> None:
    for op in fuse(GRAPHS[name]):
        if op.kind != "pass":
            assert len(op.nodes) == 1 and op.nodes[0].kind not in ("einsum", "reduce")
            continue
        stages = [STAGES.index(traits(n.kind).stage) for n in op.nodes]
        assert stages == sorted(stages), [n.kind for n in op.nodes]
        assert sum(n.kind == "einsum" for n in op.nodes) <= 1
        reductions = [i for i, n in enumerate(op.nodes) if n.kind in ("reduce", "topk")]
        assert not reductions or reductions[0] == len(op.nodes) - 1  # a reduction ends its pass


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_memory_traffic_is_what_crosses_pass_boundaries(name: str) -> None:
    graph = GRAPHS[name]
    ops = fuse(graph)
    produced = {v for op in ops for v in op.outputs}
    for op in ops:
        inside = {n.name for n in op.nodes}
        assert not set(op.inputs) & inside
        for v in op.inputs:  # read from memory: computed by an earlier op, or there from the start
            assert v in produced or graph[v].kind in ("input", "param", "const")
    # A pass writes a value only when another op reads it or the graph returns it (through views).
    roots = view_roots(graph)
    returned = {roots[o] for o in graph.outputs}
    for op in ops:
        if op.kind != "pass":
            continue
        for v in op.outputs:
            assert v in returned or any(v in other.inputs for other in ops if other is not op), v


def test_einsum_and_its_elementwise_tail_share_a_pass() -> None:
    ops = {op.name: op for op in fuse(GRAPHS["decoder layer"])}
    kinds = [n.kind for n in ops["gate"].nodes]
    assert kinds[0] == "einsum" and "silu" in kinds
