"""The concepts the mapping relies on have one home each: op traits, units, graph metadata."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from ir.ops import REGISTRY
from simulator.hardware import load_hardware
from simulator.targets.rngd import units
from simulator.targets.rngd.mapping import traits
from simulator.targets.rngd.mapping.fusion import fuse
from simulator.targets.rngd.mapping.stage_chain import chain, in_turn
from simulator.targets.rngd.mapping.steps import DecodeSteps, resize_graph
from simulator.targets.rngd.sites import SITES
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.passes import run_passes
from tcp_compiler.pipeline import Lowered, lower

LLAMA = load_model("llama-3.2-1b").config


def test_every_registered_op_has_traits_and_an_unknown_one_is_refused() -> None:
    assert set(traits.TRAITS) == set(REGISTRY)
    for kind, t in traits.TRAITS.items():
        assert (t.work == "pass") == (t.stage is not None), kind
        assert t.stage is None or t.stage in traits.STAGES
    with pytest.raises(TypeError, match="has no mapping traits"):
        traits._traits("not_an_op")


def test_units_are_defined_once_and_read_real_spec_keys() -> None:
    assert SITES.units == units.UNITS
    keys = set(Hardware.params())
    for unit in units.UNITS:
        assert unit.reads and set(unit.reads) <= keys, unit.name
        assert unit.moves in (None, "dma_bytes", "link_bytes")
    hw = load_hardware("rngd")
    assert units.TENSOR_DMA.bandwidth(hw) == hw.dma.engines * hw.dma.bytes_per_cycle_each


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_graph_metadata_survives_the_passes_and_names_are_not_parsed(phase: str) -> None:
    build = build_prefill if phase == "prefill" else build_decode
    built = build(LLAMA, PRECISIONS["bf16"], 1, 16)
    meta = built.graph.meta
    assert meta.kv_outputs == tuple(f"l{i}.{kv}_cache" for i in range(len(LLAMA.layers)) for kv in "kv")
    assert meta.kv_axes == ("P", "Sk")
    after = run_passes(built.graph)
    assert after.meta.kv_outputs == meta.kv_outputs and after.meta.kv_axes == meta.kv_axes
    # Every value the passes made belongs to a layer through the map, never through its name.
    assert all(n.name in after.meta.layers for n in after.nodes)
    layers = {op.layer for op in fuse(after)}
    assert layers == {-1, *range(len(LLAMA.layers))}


def test_layers_come_from_the_map_not_the_names() -> None:
    graph = run_passes(build_decode(LLAMA, PRECISIONS["bf16"], 1, 16).graph)
    graph.meta.layers = {name: 7 for name in graph.meta.layers}  # a model whose values all sit in layer 7
    assert {op.layer for op in fuse(graph)} == {7}


def test_online_softmax_tiles_keep_their_layer_and_shared_masks_stay_shared() -> None:
    lowered = _long_prefill()
    assert all(note["form"] == "online" for note in lowered.attention)
    meta = lowered.graph.meta
    blocks = [n.name for n in lowered.graph.nodes if ".blk" in n.name]
    assert blocks and all(meta.layer_of(b) == int(b.split(".")[0][1:]) for b in blocks)
    masks = [n.name for n in lowered.graph.nodes if n.name.startswith("mask.")]
    assert masks and all(meta.layer_of(m) == -1 for m in masks)


@pytest.mark.parametrize(
    ("name", "layer", "role"),
    [
        ("l12.down", 12, "down"),
        ("l0.act.sig", 0, "act.sig"),  # made by decompose from l0.act
        ("logits.raw", -1, "logits.raw"),  # a value of no layer is its own role
        ("l0.attn.Sq1536.blk3.scores", 0, "attn.Sq*.blk*.scores"),  # a tile of the online softmax
        ("l3.q_heads.bf16.Sq0", 3, "q_heads.bf16.Sq*"),
        ("mask.causal.Sq0.Sk0", -1, "mask.causal.Sq*.Sk*"),
    ],
)
def test_roles_are_recorded_as_values_are_named_tiles_sharing_one(name: str, layer: int, role: str) -> None:
    meta = _long_prefill().graph.meta
    assert (meta.layer_of(name), meta.role_of(name)) == (layer, role)


def test_every_lowered_value_has_a_role_and_fused_ops_take_it() -> None:
    graph = _long_prefill().graph
    assert all(n.name in graph.meta.roles for n in graph.nodes)
    assert {op.role for op in fuse(graph) if op.name.endswith(".blk3.scores")} == {"attn.Sq*.blk*.scores"}


def test_roles_come_from_the_map_not_the_names() -> None:
    graph = run_passes(build_decode(LLAMA, PRECISIONS["bf16"], 1, 16).graph)
    graph.meta.roles = {name: "same" for name in graph.meta.roles}  # a model whose values all play one role
    assert {op.role for op in fuse(graph)} == {"same"}


@functools.cache
def _long_prefill() -> Lowered:
    """A prefill long enough for the online softmax's query tiles and key blocks (lowered once)."""
    return lower(LLAMA, load_hardware("rngd"), PRECISIONS["bf16"], "prefill", 2048)


def test_resizing_a_decode_graph_keeps_its_metadata() -> None:
    graph = run_passes(build_decode(LLAMA, PRECISIONS["bf16"], 1, 16).graph)
    bigger = resize_graph(graph, dict.fromkeys(graph.meta.kv_axes, 100))
    assert bigger.meta is graph.meta
    assert all(bigger[o].type.size("P") == 100 for o in bigger.meta.kv_outputs)



@pytest.mark.parametrize("model", ["llama-3.2-1b", "qwen1.5-moe-a2.7b", "gemma-2-2b"])
def test_the_builder_records_each_values_layer_as_it_names_it(model: str) -> None:
    """The map agrees with the printed names (`l{i}.*` in layer i, everything else in none),
    though nothing reads it back from them: shared values made inside a layer (masks, RoPE
    tables, weights) stay out of every layer."""
    graph = build_prefill(load_model(model).config, PRECISIONS["bf16"], 1, 16).graph
    named = {n.name: int(m[1]) if (m := re.match(r"l(\d+)\.", n.name)) else -1 for n in graph.nodes}
    assert graph.meta.layers == named
    assert {graph.meta.layer_of(n) for n in ("rope.rot", "model.layers.0.mlp.up_proj.weight")} <= {-1}


def test_build_blocks_import_only_public_names_of_one_another() -> None:
    package_name = "tcp_compiler.frontend.builder"
    package = Path(__file__).resolve().parents[1] / "tcp_compiler" / "frontend" / "build"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package_name):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_a_later_stage_names_the_input_it_receives_and_the_chain_waits_on_that() -> None:
    hw = load_hardware("rngd")
    first, second = (run_passes(build_decode(LLAMA, PRECISIONS["bf16"], 1, 16, stage=s).graph)
                     for s in pipeline_stages(LLAMA, 2))  # fmt: skip
    assert (first.meta.received, second.meta.received) == (None, "hidden")
    programs = [DecodeSteps(g, hw).at(17) for g in (first, second)]
    waits = len(chain(programs, in_turn(2), [None, "hidden"]).dep_idx)
    assert waits > len(chain(programs, in_turn(2), [None, "not an input"]).dep_idx)
    with pytest.raises(ValueError, match="graph.meta.received"):
        chain(programs, in_turn(2), [None, None])


# How code reads structure out of a generated or checkpoint name: its layer prefix, its dotted
# parts, the checkpoint's module paths. analysis/ and mapping/ take all of it from metadata.
NAME_PARSING = re.compile(
    r'"l\{|\.r?partition\("\."\)|\.split\("\."\)|\.(starts|ends)with\(\(?"[\w.]*\."|"\.[\w.]*\." in '
)


def test_analysis_and_mapping_parse_no_names() -> None:
    root = Path(__file__).parents[1]
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for folder in ("tcp_compiler/analysis", "simulator/targets/rngd/mapping")
        for path in sorted((root / folder).glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if NAME_PARSING.search(line)
    ]
    assert not found, "\n".join(found)


def test_values_the_passes_make_record_what_they_were_made_from() -> None:
    """A layer's copy renames each value made by a pass through its source (mapping.replicate),
    found in the metadata, never by cutting the name at its dots."""
    meta = _long_prefill().graph.meta
    assert meta.origins["l0.act.sig"] == "l0.act"  # decompose
    assert meta.origins["l3.q_heads.bf16.Sq0"] == "l3.q_heads.bf16"  # a query tile
    assert meta.origins["l0.attn.Sq1536.blk3.scores"] == "l0.attn"  # the online softmax of l0.attn
    assert "l0.attn" not in meta.origins and "l0.act" not in meta.origins  # the graph's own values
    assert meta.copy().origins == meta.origins
