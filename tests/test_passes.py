"""Graph passes keep what the graph computes, never touch their input, and do their rewrites.

simplify's rewrites are exact (bit for bit, NaN positions compared as NaN); decompose's within
1e-6 relative (an einsum chain sums in another order). Graphs come hand-built (one per rule),
random (tests/graph_strategies.py) and from the model builder (tiny Llama and Gemma 3).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ir
from ir import BF16, BOOL, F16, F32, FP8E4M3, I8, I32, TensorType
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import PIPELINE, cse, dce, decompose, fold_constants, run_passes, simplify
from tcp_compiler.passes.decompose import contraction_plan
from tcp_compiler.passes.simplify import MAX_FOLD_ELEMENTS
from tests.graph_strategies import AXIS_SIZES, graphs

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PASSES = [dce, cse, fold_constants, simplify, decompose, run_passes]
COMPOSITES = {"silu", "gelu", "gelu_tanh", "relu", "neg", "recip", "rsqrt"}
SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 30.0, -30.0]

Pass = Callable[[ir.Graph], ir.Graph]


# -- helpers -------------------------------------------------------------------------------------------
def random_value(
    t: TensorType, rng: np.random.Generator, int_high: int = 3, whole: bool = False
) -> np.ndarray:
    """Values of type t: normal floats (a few large), small non-negative ints, random bools.

    `whole` floats are small integers, so sums of products are exact in any order.
    """
    if t.dtype == BOOL:
        return rng.random(t.shape) < 0.5
    if t.dtype.is_int:
        return rng.integers(0, int_high, size=t.shape).astype(np.int32)
    if whole:
        return rng.integers(-3, 4, size=t.shape).astype(np.float32)
    return (rng.standard_normal(t.shape) * rng.choice([0.5, 1.0, 4.0], size=t.shape)).astype(np.float32)


def feeds(g: ir.Graph, seed: int = 0, int_high: int = 3, whole: bool = False) -> tuple[dict, dict]:
    """Random inputs and params for every input and param node of g."""
    rng = np.random.default_rng(seed)
    inputs = {n.name: random_value(n.type, rng, int_high, whole) for n in g.of_kind("input")}
    params = {n.name: random_value(n.type, rng, int_high, whole) for n in g.of_kind("param")}
    return inputs, params


def assert_identical(a: np.ndarray, b: np.ndarray) -> None:
    """Equal bit for bit (signed zeros too), NaN where the other is NaN."""
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind != "f":
        np.testing.assert_array_equal(a, b)
        return
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    np.testing.assert_array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


def assert_close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-6) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind != "f":
        np.testing.assert_array_equal(a, b)
        return
    finite = np.abs(a[np.isfinite(a)])
    atol = rtol * float(finite.max()) if finite.size else 0.0
    np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, equal_nan=True)


def assert_equal_sums(a: np.ndarray, b: np.ndarray) -> None:
    """Equal values (whole-number sums are exact in any order; only a zero's sign may differ)."""
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(b, a)


Compare = Callable[[np.ndarray, np.ndarray], None]


def check_same_values(
    before: ir.Graph, after: ir.Graph, compare: Compare, seed: int = 0, whole: bool = False
) -> None:
    """Both graphs on the same random inputs and params (`whole`: small integers) agree."""
    inputs, params = feeds(before, seed, whole=whole)
    want = ir.interpret(before, inputs, params)
    got = ir.interpret(after, inputs, params)
    assert list(got) == list(want)
    for name in want:
        compare(want[name], got[name])


def check_contract(p: Pass, g: ir.Graph) -> ir.Graph:
    """Runs p: input untouched, outputs kept by name and type, result verifies and round-trips."""
    text, values = ir.print_graph(g), dict(g.param_values)
    out = p(g)
    assert ir.print_graph(g) == text
    assert g.param_values.keys() == values.keys()
    assert out is not g
    assert out.name == g.name and out.outputs == g.outputs
    assert [out[o].type for o in out.outputs] == [g[o].type for o in g.outputs]
    assert out.param_values.keys() == g.param_values.keys()
    assert all(out.param_values[k] is v for k, v in g.param_values.items())
    ir.verify(out)
    printed = ir.print_graph(out)
    assert ir.print_graph(ir.parse(printed)) == printed
    return out


def unary(kind: str, t: TensorType, **attrs) -> ir.Graph:
    g = ir.Graph(kind)
    x = g.input("x", t)
    g.add(kind, x, name="y", **attrs)
    g.set_outputs("y")
    return g


def kinds(g: ir.Graph) -> list[str]:
    return [n.kind for n in g.nodes]


def einsum_flops(g: ir.Graph) -> int:
    return sum(nc.cost.flops for nc in ir.analyze(g).per_node if nc.node.kind == "einsum")


def depends_on_inputs(g: ir.Graph) -> set[str]:
    tainted: set[str] = set()
    for n in g.nodes:
        if n.kind in ("input", "param") or any(o in tainted for o in n.operands):
            tainted.add(n.name)
    return tainted


# -- every pass, random graphs ---------------------------------------------------------------------
@pytest.mark.parametrize("p", PASSES, ids=lambda p: p.__name__)
@SETTINGS
@given(g=graphs())
def test_pass_keeps_the_contract_on_random_graphs(p: Pass, g: ir.Graph) -> None:
    check_contract(p, g)


@pytest.mark.parametrize("p", [dce, cse, fold_constants, simplify], ids=lambda p: p.__name__)
@SETTINGS
@given(g=graphs(max_ops=10))
def test_simplify_passes_are_exact_on_random_graphs(p: Pass, g: ir.Graph) -> None:
    check_same_values(g, p(g), assert_identical)


@SETTINGS
@given(g=graphs(max_ops=10))
def test_decompose_keeps_values_and_leaves_no_composite(g: ir.Graph) -> None:
    out = decompose(g)
    check_same_values(g, out, assert_close)
    assert not COMPOSITES & set(kinds(out))
    assert all(len(n.operands) <= 2 for n in out.of_kind("einsum"))
    assert ir.print_graph(decompose(out)) == ir.print_graph(out)  # nothing left to rewrite


@SETTINGS
@given(g=graphs(max_ops=10))
def test_simplify_reaches_a_fixed_point(g: ir.Graph) -> None:
    once = simplify(g)
    assert ir.print_graph(simplify(once)) == ir.print_graph(once)
    assert len(once) <= len(g)


# -- decompose: one hand-built graph per rule ------------------------------------------------------
ELEMENTWISE_CASES = [
    ("silu", F32),
    ("silu", BF16),
    ("gelu_tanh", F32),
    ("gelu_tanh", F16),
    ("gelu", F32),
    ("gelu", FP8E4M3),
    ("relu", F32),
    ("relu", I32),
    ("neg", F32),
    ("neg", BF16),
    ("neg", I8),
    ("recip", F32),
    ("rsqrt", F32),
    ("rsqrt", BF16),
]


@pytest.mark.parametrize("kind, dtype", ELEMENTWISE_CASES, ids=lambda v: str(v))
def test_decompose_elementwise_rule(kind: str, dtype: ir.DType) -> None:
    g = unary(kind, TensorType.of(dtype, B=3, D=40))
    out = check_contract(decompose, g)
    assert kind not in kinds(out)
    assert out["y"].type == g["y"].type
    new = [n for n in out.nodes if n.name not in g]
    assert new and all(n.name.startswith("y.") for n in new)  # named after what they replace
    for n in out.of_kind("const"):
        assert n.type.rank == 0  # scalar constants broadcast without changing the axis order
    rng = np.random.default_rng(1)
    if dtype.is_float:
        x = random_value(g["x"].type, rng) * 3
        x.ravel()[: len(SPECIALS)] = SPECIALS
    else:  # past both ends of i8, so saturation (neg of -128) is compared too
        x = rng.integers(-200, 200, size=g["x"].type.shape).astype(np.int32)
    want = ir.interpret(g, {"x": x})["y"]
    got = ir.interpret(out, {"x": x})["y"]
    assert_close(want, got)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_decompose_xielu_into_vector_engine_ops(dtype: ir.DType) -> None:
    """xIELU becomes exp, log, min, gt, where and arithmetic with scalar constants (no composite
    left), computed in f32 and rounded once for bf16, with the interpreter's values."""
    g = ir.Graph("xielu")
    x = g.input("x", TensorType.of(dtype, B=3, D=40))
    ap, an = (g.input(n, TensorType.of(dtype)) for n in ("ap", "an"))
    g.add("xielu", x, ap, an, name="y", beta=0.5, eps=-1e-6)
    g.set_outputs("y")
    out = check_contract(decompose, g)
    assert "xielu" not in kinds(out) and {"exp", "log", "min", "where"} <= set(kinds(out))
    assert all(n.type.rank == 0 for n in out.of_kind("const"))
    rng = np.random.default_rng(2)
    xv = (random_value(g["x"].type, rng) * 3).astype(dtype.storage)
    xv.ravel()[:3] = [0.0, -1e-3, 1e-3]
    values = {"x": xv, "ap": np.asarray(-0.2, dtype.storage), "an": np.asarray(0.4, dtype.storage)}
    rtol = 1e-6 if dtype == F32 else 1e-2
    assert_close(ir.interpret(g, values)["y"], ir.interpret(out, values)["y"], rtol=rtol)


def test_decompose_names_follow_the_replaced_node() -> None:
    g = ir.Graph("act")
    g.set_outputs(g.add("silu", g.input("x", TensorType.of(F32, S=4, F=8)), name="l0.act"))
    out = decompose(g)
    assert [(n.name, n.kind) for n in out.nodes] == [
        ("x", "input"),
        ("l0.act.sig", "sigmoid"),
        ("l0.act", "mul"),
    ]
    assert out["l0.act"].operands == ("x", "l0.act.sig")


def test_decompose_gelu_tanh_uses_scalar_constants_of_the_operand_dtype() -> None:
    out = decompose(unary("gelu_tanh", TensorType.of(F32, B=2, F=6)))
    consts = {n.name: n.attrs["value"] for n in out.of_kind("const")}
    assert consts["y.k"] == 0.044715 and consts["y.c"] == pytest.approx(math.sqrt(2 / math.pi))
    assert {n.type for n in out.of_kind("const")} == {TensorType.of(F32)}
    assert set(kinds(out)) == {"input", "const", "mul", "add", "tanh"}


def test_decompose_narrow_float_computes_in_f32_and_rounds_once() -> None:
    out = decompose(unary("silu", TensorType.of(BF16, D=8)))
    assert kinds(out) == ["input", "cast", "sigmoid", "mul", "cast"]
    assert out["y"].type == TensorType.of(BF16, D=8) and out["y.sig"].type.dtype == F32


def test_decompose_keeps_the_axis_order_of_rank_zero_and_wide_operands() -> None:
    for t in (TensorType.of(F32), TensorType.of(F32, Z=2, A=3, M=4)):
        out = decompose(unary("gelu", t))
        assert all(n.type.axes == t.axes for n in out.nodes if n.kind != "const")


@pytest.mark.parametrize(
    "exponent, replacement",
    [(2.0, "mul"), (0.5, "sqrt"), (3.0, "pow")],
)
def test_decompose_pow_by_constant(exponent: float, replacement: str) -> None:
    g = ir.Graph("pow")
    x = g.input("x", TensorType.of(F32, B=2, D=16))
    c = g.const(exponent, TensorType.of(F32), name="c")
    g.add("pow", x, c, name="y")
    g.set_outputs("y")
    out = check_contract(decompose, g)
    assert out["y"].kind == replacement
    x = np.abs(random_value(g["x"].type, np.random.default_rng(2)))
    x.ravel()[:4] = [0.0, 1.0, np.inf, 1e-20]
    assert_close(ir.interpret(g, {"x": x})["y"], ir.interpret(out, {"x": x})["y"])


def test_decompose_keeps_pow_whose_exponent_varies_or_broadcasts() -> None:
    g = ir.Graph("pow")
    x = g.input("x", TensorType.of(F32, D=4))
    wide = g.const(2.0, TensorType.of(F32, D=4, E=3), name="wide")
    varying = g.add("const", name="varying", type=TensorType.of(F32, D=4), values=[2.0, 2.0, 0.5, 2.0])
    g.set_outputs(g.add("pow", x, wide, name="y1"), g.add("pow", x, varying, name="y2"))
    out = decompose(g)
    assert out["y1"].kind == "pow" and out["y2"].kind == "pow"


# -- decompose: einsum chains --------------------------------------------------------------------------
def einsum_graph(operands: list[TensorType], output: list[str], dtype: ir.DType | None = None) -> ir.Graph:
    g = ir.Graph("chain")
    xs = [g.input(f"x{i}", t) for i, t in enumerate(operands)]
    eq = ", ".join(" ".join(t.names) for t in operands) + " -> " + " ".join(output)
    sizes = {a.name: a.size for t in operands for a in t.axes}
    out_type = TensorType.from_pairs(dtype or operands[0].dtype, [(n, sizes[n]) for n in output])
    g.add("einsum", *xs, name="y", eq=eq, type=out_type)
    g.set_outputs("y")
    return g


def naive_flops(g: ir.Graph) -> int:
    """FLOPs of the left-to-right chain ((x0 x1) x2) ..., contracting as early as possible."""
    node = g["y"]
    items = [g[o].type for o in node.operands]
    output = set(node.type.names)
    sizes = {a.name: a.size for t in items for a in t.axes}
    acc, total = items[0].names, 0
    for k, t in enumerate(items[1:], start=1):
        union = tuple(dict.fromkeys(acc + t.names))
        total += 2 * math.prod(sizes[a] for a in union)
        later = {a for u in items[k + 1 :] for a in u.names}
        acc = tuple(a for a in union if a in later or a in output)
    return total


def test_einsum_chain_contracts_the_small_pair_first() -> None:
    g = einsum_graph(
        [TensorType.of(F32, I=32, J=4), TensorType.of(F32, J=4, K=32), TensorType.of(F32, K=32)], ["I"]
    )
    out = check_contract(decompose, g)
    chain = out.of_kind("einsum")
    assert [n.name for n in chain] == ["y.c0", "y"]
    assert chain[0].operands == ("x1", "x2") and chain[0].type == TensorType.of(F32, J=4)
    assert einsum_flops(out) < naive_flops(g) < einsum_flops(g)
    check_same_values(g, out, assert_equal_sums, whole=True)


@pytest.mark.parametrize(
    "dtype, result", [(F32, F32), (BF16, F32), (BF16, BF16), (I8, I32), (I8, F32)], ids=str
)
def test_einsum_chain_accumulates_wide_and_keeps_the_declared_dtype(dtype, result) -> None:
    types = [
        TensorType.of(dtype, B=2, S=3, D=4),
        TensorType.of(dtype, D=4, F=5),
        TensorType.of(dtype, F=5, E=3),
        TensorType.of(dtype, E=3),
    ]
    g = einsum_graph(types, ["S", "B"], result)
    out = check_contract(decompose, g)
    assert len(out.of_kind("einsum")) == 3
    wide = F32 if dtype.is_float else I32
    assert all(n.type.dtype == wide for n in out.of_kind("einsum") if n.name != "y")
    assert out["y"].type == g["y"].type
    check_same_values(g, out, assert_equal_sums, whole=True)


def test_einsum_with_a_scalar_operand_and_one_or_two_operands_stay_valid() -> None:
    g = einsum_graph([TensorType.of(F32, A=3), TensorType.of(F32), TensorType.of(F32, A=3)], [])
    out = check_contract(decompose, g)
    assert all(len(n.operands) == 2 for n in out.of_kind("einsum"))
    check_same_values(g, out, assert_equal_sums, whole=True)
    two = einsum_graph([TensorType.of(F32, A=3, B=2), TensorType.of(F32, B=2)], ["A"])
    assert ir.print_graph(decompose(two)) == ir.print_graph(two)


@st.composite
def nary_einsums(draw) -> ir.Graph:
    names = sorted(AXIS_SIZES)
    n = draw(st.integers(3, 5))
    operands = []
    for _ in range(n):
        axes = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
        operands.append(TensorType.of(F32, **{a: AXIS_SIZES[a] for a in axes}))
    union = list(dict.fromkeys(a for t in operands for a in t.names))
    output = draw(st.permutations(union))[: draw(st.integers(0, len(union)))]
    return einsum_graph(operands, list(output))


@SETTINGS
@given(g=nary_einsums())
def test_einsum_chain_never_costs_more_than_the_naive_order(g: ir.Graph) -> None:
    out = check_contract(decompose, g)
    assert all(len(n.operands) == 2 for n in out.of_kind("einsum"))
    assert einsum_flops(out) <= naive_flops(g) <= einsum_flops(g)
    check_same_values(g, out, assert_equal_sums, whole=True)


def test_contraction_plan_prefers_the_smallest_largest_intermediate() -> None:
    sizes = {"A": 64, "B": 2, "C": 64, "D": 2}
    # ((x y) z): intermediate [A C] of 4096; (x (y z)): [B] of 2 at fewer FLOPs.
    plan = contraction_plan([["A", "B"], ["B", "C"], ["C"]], ["A"], sizes)
    assert plan.largest == 2
    assert (plan.steps[0].left, plan.steps[0].right) == (1, 2)


# -- simplify --------------------------------------------------------------------------------------------
def test_cse_merges_duplicates_and_rewires_their_users() -> None:
    g = ir.Graph("dup")
    x = g.input("x", TensorType.of(F32, S=4, D=8))
    a, b = g.add("exp", x, name="a"), g.add("exp", x, name="b")
    s1 = g.add("slice", a, name="s1", axis="D", start=0, stop=4)
    s2 = g.add("slice", b, name="s2", stop=4, axis="D", start=0)  # same attributes, other order
    g.set_outputs(g.add("add", s1, s2, name="y"))
    out = check_contract(cse, g)
    assert [n.name for n in out.nodes] == ["x", "a", "s1", "y"]
    assert out["y"].operands == ("s1", "s1")
    check_same_values(g, out, assert_identical)


def test_cse_keeps_inputs_params_signed_zeros_and_output_duplicates() -> None:
    g = ir.Graph("keep")
    t = TensorType.of(F32, D=4)
    x, y = g.input("x", t), g.input("y", t)
    w1, w2 = g.param("w1", t), g.param("w2", t)
    zero, mzero = (
        g.const(0.0, TensorType.of(F32), name="zero"),
        g.const(-0.0, TensorType.of(F32), name="mzero"),
    )
    e1, e2 = g.add("exp", x, name="e1"), g.add("exp", x, name="e2")
    sums = [g.add("add", v, c, name=f"s{i}") for i, (v, c) in enumerate([(x, zero), (x, mzero), (y, w1)])]
    g.set_outputs(e1, e2, *sums, g.add("mul", w1, w2, name="p"))
    out = check_contract(cse, g)
    assert len(out) == len(g)
    check_same_values(g, out, assert_identical)


def test_cse_merges_constants_from_decomposition() -> None:
    g = ir.Graph("two")
    x = g.input("x", TensorType.of(F32, D=4))
    g.set_outputs(
        g.add("add", g.add("gelu", x, name="g1"), g.add("gelu", g.add("exp", x, name="e"), name="g2"))
    )
    decomposed = decompose(g)
    merged = simplify(decomposed)
    assert len(merged.of_kind("const")) == 3  # sqrt(2), 1, 0.5: once each
    assert len(merged) < len(decomposed)
    check_same_values(g, merged, assert_close)


def test_dce_removes_unused_branches_inputs_and_params() -> None:
    g = ir.Graph("dead")
    x = g.input("x", TensorType.of(F32, D=4))
    g.input("unused", TensorType.of(F32, D=4))
    w = g.param("w", TensorType.of(F32, D=4), np.ones(4, np.float32))
    g.add("mul", g.add("exp", x, name="dead1"), w, name="dead2")
    g.set_outputs(g.add("tanh", x, name="y"))
    out = check_contract(dce, g)
    assert [n.name for n in out.nodes] == ["x", "y"]
    assert "unused" not in out and "w" not in out
    check_same_values(g, out, assert_identical)


def mask_graph(seq: int) -> ir.Graph:
    g = ir.Graph("mask")
    grid = TensorType.of(I32, Sq=seq, Sk=seq)
    i = g.add("iota", name="i", type=grid, axis="Sq")
    j = g.add("iota", name="j", type=grid, axis="Sk")
    mask = g.add("le", j, i, name="causal")
    s = g.input("s", TensorType.of(F32, Sq=seq, Sk=seq))
    ninf = g.const(-math.inf, TensorType.of(F32), name="ninf")
    g.set_outputs(g.add("where", mask, s, ninf, name="y"))
    return g


def test_fold_constants_turns_a_small_mask_into_a_const() -> None:
    g = mask_graph(8)
    out = check_contract(fold_constants, g)
    assert out["causal"].kind == "const"
    expected = np.tril(np.ones((8, 8), dtype=bool)).ravel().tolist()
    assert list(out["causal"].attrs["values"]) == expected
    assert out["y"].kind == "where" and out["y"].operands == g["y"].operands
    check_same_values(g, out, assert_identical)
    assert [n.name for n in simplify(g).nodes] == ["causal", "s", "ninf", "y"]


def test_fold_constants_leaves_a_large_mask_alone() -> None:
    seq = math.isqrt(MAX_FOLD_ELEMENTS) * 2
    g = mask_graph(seq)
    out = check_contract(simplify, g)
    assert out["causal"].kind == "le" and {"i", "j"} <= {n.name for n in out.nodes}


def test_fold_constants_splats_and_computes_like_the_interpreter() -> None:
    g = ir.Graph("fold")
    third = g.const(1 / 3, TensorType.of(BF16, D=3), name="third")
    i = g.add("iota", name="i", type=TensorType.of(I32, D=3), axis="D")
    big = g.add("iota", name="big", type=TensorType.of(I32, D=3, E=MAX_FOLD_ELEMENTS), axis="D")
    picked = g.add("reduce", big, name="picked", op="max", axes=["E"])  # small, from a large iota
    summed = g.add("add", g.add("add", third, third, name="two_thirds"), third, name="one")
    exact = g.add("cast", g.add("eq", i, picked, name="same"), name="flag", type=TensorType.of(F32, D=3))
    x = g.input("x", TensorType.of(F32, D=3))
    g.set_outputs(summed, g.add("mul", x, exact, name="y"))
    out = check_contract(fold_constants, g)
    for name in ("two_thirds", "one", "picked", "same", "flag"):
        assert out[name].kind == "const", name
    assert out["flag"].attrs == {"value": 1.0}
    want = ir.interpret(g, {"x": np.ones(3, np.float32)})["one"]
    assert out["one"].attrs["value"] == float(want[0])  # bf16 rounding at every step, as interpreted
    assert out["y"].kind == "mul"
    check_same_values(g, out, assert_identical)


def test_fold_constants_never_touches_what_depends_on_inputs_or_params() -> None:
    g = ir.Graph("live")
    x = g.input("x", TensorType.of(F32, D=4))
    w = g.param("w", TensorType.of(F32, D=4))
    c = g.const(2.0, TensorType.of(F32, D=4), name="c")
    a = g.add("mul", x, c, name="a")
    b = g.add("exp", w, name="b")
    g.set_outputs(g.add("add", a, b, name="y"), g.add("cast", w, name="wc", type=TensorType.of(BF16, D=4)))
    out = check_contract(fold_constants, g)
    tainted = depends_on_inputs(g)
    for n in g.nodes:
        if n.name in tainted:
            assert out[n.name].kind == n.kind and out[n.name].operands == n.operands


def identity_graph() -> ir.Graph:
    """x combined with neutral constants: each named node but y0 is an identity of its operand."""
    g = ir.Graph("identities")
    t = TensorType.of(F32, A=2, B=3)
    x = g.input("x", t)
    n = g.input("n", TensorType.of(I32, A=2))
    one = g.const(1, TensorType.of(F32), name="one")
    one_b = g.const(1.0, TensorType.of(F32, B=3), name="one_b")
    pzero, mzero = (
        g.const(0.0, TensorType.of(F32), name="pzero"),
        g.const(-0.0, TensorType.of(F32), name="mzero"),
    )
    izero = g.const(0, TensorType.of(I32), name="izero")
    v = g.add("mul", one, x, name="m1")
    v = g.add("mul", v, one_b, name="m2")
    v = g.add("div", v, one, name="d1")
    v = g.add("add", v, mzero, name="a1")
    v = g.add("sub", v, pzero, name="s1")
    v = g.add("cast", v, name="c1", type=t)
    v = g.add("reshape", v, name="r1", type=t)
    v = g.add("transpose", v, name="t1", type=t)
    y0 = g.add("add", v, pzero, name="y0")  # x + 0.0 turns -0.0 into 0.0: stays
    k = g.add("add", g.add("sub", n, izero, name="ni"), izero, name="k")
    r = g.add("reshape", y0, name="r2", type=TensorType.of(F32, N=6))
    r = g.add("reshape", r, name="r3", type=TensorType.of(F32, B=3, A=2))
    ta = g.add("transpose", y0, name="tA", type=TensorType.of(F32, B=3, A=2))
    tt = g.add("transpose", ta, name="tB", type=t)
    g.set_outputs(y0, k, r, tt, g.add("reshape", x, name="out_identity", type=t))
    return g


def test_fold_constants_drops_exact_identities() -> None:
    g = identity_graph()
    out = check_contract(fold_constants, g)
    for name in ("m1", "m2", "d1", "a1", "s1", "c1", "r1", "t1", "ni"):
        assert name not in out, name
    assert out["y0"].operands == ("x", "pzero")
    assert out["k"].operands == ("n", "izero")  # an output: its name must survive
    assert out["r3"].operands == ("y0",)  # reshape of a reshape: one reshape
    assert out["tB"].operands == ("y0",)  # transpose back to y0's own order
    assert out["out_identity"].kind == "reshape"  # an output's name must survive
    x = np.array([[-0.0, 0.0, 1.5], [np.nan, -np.inf, 2.0]], np.float32)
    inputs = {"x": x, "n": np.array([5, -7], np.int32)}
    for name, want in ir.interpret(g, inputs).items():
        assert_identical(want, ir.interpret(out, inputs)[name])


def test_simplify_of_identities_keeps_values() -> None:
    g = identity_graph()
    out = check_contract(simplify, g)
    assert len(out) < len(g)
    check_same_values(g, out, assert_identical)


def test_identity_that_broadcasts_is_not_dropped() -> None:
    g = ir.Graph("bcast")
    x = g.input("x", TensorType.of(F32, A=2))
    g.set_outputs(g.add("mul", x, g.const(1.0, TensorType.of(F32, B=3), name="ones"), name="y"))
    out = fold_constants(g)
    assert out["y"].kind == "mul" and out["y"].type == TensorType.of(F32, A=2, B=3)


# -- a real model graph ------------------------------------------------------------------------------
TINY = {
    "llama": dict(model_type="llama", hidden_act="silu", rope_theta=10000.0),
    "gemma3": dict(
        model_type="gemma3_text",
        head_dim=4,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention"],
    ),
}
COMMON = dict(
    vocab_size=37,
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("family", sorted(TINY))
def test_pipeline_keeps_a_tiny_models_logits(family: str, precision: str) -> None:
    cfg = read_model_config(RawConfig({**COMMON, **TINY[family]}, f"tiny-{family}"), f"tiny-{family}")
    g = build_prefill(cfg, PRECISIONS[precision], 1, 5).graph
    out = check_contract(run_passes, g)
    assert dict(PIPELINE) == {"decompose": decompose, "simplify": simplify}
    assert not COMPOSITES & set(kinds(out))
    assert len(out.of_kind("iota")) < len(g.of_kind("iota"))  # the causal masks became constants
    originals = {n.name for n in g.nodes}
    for n in out.nodes:
        assert n.name in originals or any(n.name.startswith(f"{o}.") for o in originals), n.name
    inputs, params = feeds(g, seed=3, int_high=cfg.vocab)
    want = ir.interpret(g, inputs, params)
    got = ir.interpret(out, inputs, params)
    assert np.isfinite(want["logits"]).all()
    for name in g.outputs:
        assert_close(want[name], got[name])
