"""`ir.printer.same_text` answers exactly `print_graph(a) == print_graph(b)` (which simplify's
fixed point used to compute by printing both graphs every round), and simplify / run_passes give
the same graphs as printing did, verifying each result once."""

from __future__ import annotations

import importlib
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings

import ir
from ir import BF16, F32, I32, Graph, Node, TensorType, print_graph
from ir.printer import same_text
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import decompose, run_passes, simplify
from tcp_compiler.passes.simplify import _MAX_ROUNDS, cse, dce, fold_constants, verified_once
from tests.graph_strategies import graphs

T = TensorType.of(F32, A=2, B=3)
ATTRS = [
    1, 2, True, False, 1.0, -1.0, 0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1e16, 10**16,
    0.1, 0.30000000000000004, "x", "true", "nan", "inf", "-inf", "a b", "1", "",
    (), (1,), (1.0,), (True,), (1, 2), ((1, 2), 3), (1, (2, 3)), ("a, b",), ("a", "b"), (math.nan, -0.0),
]  # fmt: skip


def _graph(name="g", node_name="y", kind="const", operands=(), attrs=None, type_=T, outputs=None) -> Graph:
    g = Graph(name)
    g.append(Node("x", "input", (), {}, T))
    g.append(Node(node_name, kind, operands, dict(attrs or {}), type_))
    g.set_outputs(*(outputs or [node_name]))
    return g


def _same(a: Graph, b: Graph) -> None:
    assert same_text(a, b) == (print_graph(a) == print_graph(b)), (print_graph(a), print_graph(b))


def test_attribute_values_compare_by_their_text() -> None:
    for u, v in itertools.product(ATTRS, repeat=2):
        _same(_graph(attrs={"value": u}), _graph(attrs={"value": v}))
    equal_text = [(math.nan, -math.nan), ((math.nan,), (-math.nan,))]
    for u, v in equal_text:
        assert same_text(_graph(attrs={"value": u}), _graph(attrs={"value": v}))


def test_every_other_part_counts() -> None:
    base = _graph(attrs={"a": 1, "b": 2})
    variants = [
        _graph(attrs={"a": 1, "b": 2}),
        _graph(attrs={"b": 2, "a": 1}),  # attribute order is part of the text
        _graph(attrs={"a": 1}),
        _graph(attrs={"a": 1, "c": 2}),
        _graph(name="h", attrs={"a": 1, "b": 2}),
        _graph(name="graph", attrs={"a": 1, "b": 2}),
        _graph(node_name="z", attrs={"a": 1, "b": 2}),
        _graph(kind="iota", attrs={"a": 1, "b": 2}),
        _graph(operands=("x",), attrs={"a": 1, "b": 2}),
        _graph(type_=TensorType.of(F32, A=2, B=3), attrs={"a": 1, "b": 2}),  # equal, not the same object
        _graph(type_=TensorType.of(BF16, A=2, B=3), attrs={"a": 1, "b": 2}),
        _graph(type_=TensorType.of(F32, A=3, B=2), attrs={"a": 1, "b": 2}),
        _graph(type_=TensorType.of(I32, A=2), attrs={"a": 1, "b": 2}),
        _graph(attrs={"a": 1, "b": 2}, outputs=["y", "x"]),
        _graph(attrs={"a": 1, "b": 2}, outputs=["x"]),
    ]
    for a, b in itertools.product([base, *variants], repeat=2):
        _same(a, b)


def test_names_the_text_cannot_keep_apart_are_printed() -> None:
    """`%a, %b` reads the same as one operand named `a, %b`: same_text falls back on the text."""
    a = Graph("g")
    a.append(Node("a", "input", (), {}, T))
    a.append(Node("b", "input", (), {}, T))
    a.append(Node("y", "add", ("a", "b"), {}, T))
    b = Graph("g")
    b.append(Node("a", "input", (), {}, T))
    b.append(Node("b", "input", (), {}, T))
    b.append(Node("y", "add", ("a, %b",), {}, T))
    for g in (a, b):
        g.set_outputs("y")
    assert print_graph(a) == print_graph(b)
    assert same_text(a, b)
    b.nodes[2] = Node("y", "add", ("a, %c",), {}, T)
    _same(a, b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_and_their_rewrites(g: Graph) -> None:
    """Each pass's output against its input, and against the graph itself, as simplify compares them."""
    with verified_once():
        rewrites = [fold_constants(g), cse(g), dce(g), dce(cse(fold_constants(g)))]
    for h in rewrites:
        _same(h, g)
        _same(g, h)
    _same(g, g)


def _simplify_by_text(g: Graph) -> Graph:
    """simplify's fixed point as it was: print both graphs every round."""
    current, text = g, print_graph(g)
    with verified_once():
        for _ in range(_MAX_ROUNDS):
            changed = dce(cse(fold_constants(current)))
            changed_text = print_graph(changed)
            if changed_text == text:
                current = changed
                break
            current, text = changed, changed_text
    ir.verify(current)
    return current


def _model_graphs() -> list[Graph]:
    p = PRECISIONS["bf16"]
    llama, gemma = load_model("llama-3.2-1b").config, load_model("gemma-3-1b").config
    return [
        build_prefill(llama, p, 1, 16).graph,
        build_decode(llama, p, 2, 40).graph,
        build_prefill(gemma, p, 2, 16).graph,
        build_decode(gemma, p, 1, 16, chips=2).graph,
    ]


@pytest.mark.parametrize("index", range(4))
def test_simplify_reaches_the_same_graph(index: int) -> None:
    g = _model_graphs()[index]
    for source in (g, decompose(g)):
        assert print_graph(simplify(source)) == print_graph(_simplify_by_text(source))


def test_run_passes_verifies_its_result_once(monkeypatch) -> None:
    g = build_decode(load_model("llama-3.2-1b").config, PRECISIONS["bf16"], 1, 16).graph
    calls = []
    simplify_module = importlib.import_module("tcp_compiler.passes.simplify")
    real = simplify_module.verify

    def counting(graph, *args):
        calls.append(graph)
        return real(graph, *args)

    monkeypatch.setattr(simplify_module, "verify", counting)
    monkeypatch.setattr(importlib.import_module("tcp_compiler.passes"), "verify", counting)
    out = run_passes(g)
    assert calls == [out]
    calls.clear()
    assert simplify(g) is calls[0]  # alone, simplify still verifies what it returns
