"""print(parse(text)) == text for printed graphs, on random graphs and edge-case attributes."""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import numpy as np
from hypothesis import HealthCheck, given, settings

import ir
from tests.graph_strategies import graphs

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _has_nan(g: ir.Graph) -> bool:
    def walk(v):
        return (isinstance(v, float) and math.isnan(v)) or (isinstance(v, tuple) and any(map(walk, v)))

    return any(walk(v) for n in g.nodes for v in n.attrs.values())


@SETTINGS
@given(graphs())
def test_random_graph_round_trips(g: ir.Graph) -> None:
    ir.verify(g)
    text = ir.print_graph(g)
    again = ir.parse(text)
    ir.verify(again)
    assert ir.print_graph(again) == text
    if not _has_nan(g):
        assert again == g


@SETTINGS
@given(graphs(max_ops=8))
def test_random_graph_runs_with_declared_shapes(g: ir.Graph) -> None:
    rng = np.random.default_rng(0)
    inputs = {n.name: rng.standard_normal(n.type.shape) for n in g.of_kind("input")}
    out = ir.interpret(g, inputs)
    for name, value in out.items():
        t = g[name].type
        assert value.shape == t.shape
        assert value.dtype == t.dtype.storage
        np.testing.assert_array_equal(t.dtype.round(value), value)  # on the dtype's grid


def test_special_attribute_values_round_trip() -> None:
    g = ir.Graph("edge cases")
    t = ir.TensorType.of(ir.F32, A=6)
    values = [float("inf"), -float("inf"), 1e-45, 3.4028234663852886e38, -0.0, 7]
    g.add("const", type=t, values=values, name="c.0")
    g.add("const", type=ir.TensorType.of(ir.F32), value=float("nan"), name="nan")
    g.add("const", type=ir.TensorType.of(ir.BOOL), value=True, name="flag")
    g.set_outputs("c.0", "nan", "flag")
    text = ir.print_graph(g)
    assert 'graph "edge cases" {' in text
    assert "values = [inf, -inf, 1e-45, 3.4028234663852886e+38, -0.0, 7]" in text
    assert "value = nan" in text and "value = true" in text
    again = ir.parse(text)
    assert ir.print_graph(again) == text
    assert again["c.0"].attrs["values"][5] == 7 and isinstance(again["c.0"].attrs["values"][5], int)


def test_comments_and_layout_are_free() -> None:
    text = """
    # a comment before the graph
    graph g {   # trailing comment
      %x = input() : f32[A=2]    # comment
      %y =
         exp(%x)
         : f32[A=2]
      return %y
    }
    """
    g = ir.parse(text)
    assert (
        ir.print_graph(g)
        == "graph g {\n  %x = input() : f32[A=2]\n  %y = exp(%x) : f32[A=2]\n  return %y\n}\n"
    )


def test_networkx_view_mirrors_dataflow() -> None:
    g = ir.load(Path(__file__).parents[1] / "examples" / "ir" / "llama_decoder_layer.tir")
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == len(g)
    assert nxg.number_of_edges() == sum(len(n.operands) for n in g)
    assert nxg.nodes["q"]["kind"] == "einsum"
    assert list(nx.topological_sort(nxg))  # acyclic
    # Every weight reaches the layer output.
    for p in g.of_kind("param"):
        assert nx.has_path(nxg, p.name, "out")
