"""Every op kind, run through ir.interpret on random inputs and checked against numpy written here.

Each test declares the op kinds it exercises with @covers; the last test checks that together they
cover ir.ops.REGISTRY, so a new op kind without an interpreter test fails.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ir
from ir import BF16, BOOL, F16, F32, FP8E4M3, FP8E5M2, I4, I8, I32, TensorType
from ir.ops.elementwise import BINARY, UNARY
from tests.test_scan_ops import (
    conv_reference,
    delta_case,
    delta_reference,
    mamba1_case,
    mamba1_reference,
    run_mamba1,
)

T = TensorType.of
COVERED: set[str] = set()


def covers(*kinds: str):
    """Records, at import time, the op kinds a test exercises."""
    COVERED.update(kinds)
    return lambda test: test


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def unit(kind: str, *operand_types: TensorType, type: TensorType | None = None, **attrs) -> ir.Graph:
    """A graph with inputs %x0, %x1, ... feeding one `kind` op %y, which it returns."""
    g = ir.Graph(kind)
    xs = [g.input(f"x{i}", t) for i, t in enumerate(operand_types)]
    g.add(kind, *xs, name="y", type=type, **attrs)
    g.set_outputs("y")
    return g


def run(g: ir.Graph, *arrays: np.ndarray) -> np.ndarray:
    out = ir.interpret(g, {f"x{i}": a for i, a in enumerate(arrays)})["y"]
    assert out.shape == g["y"].type.shape
    assert out.dtype == g["y"].type.dtype.storage
    return out


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def small_ints(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    """Integer-valued data, so equal elements occur and float sums are exact."""
    return rng.integers(-3, 4, size=shape).astype(dtype)


# -- sources ---------------------------------------------------------------------------------------


@covers("input")
def test_input_passes_its_feed_through(rng) -> None:
    g = ir.Graph("g")
    g.input("x", T(F32, A=2, B=3))
    g.set_outputs("x")
    x = f32(rng, 2, 3)
    np.testing.assert_array_equal(ir.interpret(g, {"x": x})["x"], x)


@covers("param")
def test_param_reads_graph_values_and_explicit_params(rng) -> None:
    g = ir.Graph("g")
    w = f32(rng, 3, 2)
    g.param("w", T(F32, K=3, N=2), value=w)
    g.set_outputs("w")
    np.testing.assert_array_equal(ir.interpret(g)["w"], w)
    other = f32(rng, 3, 2)
    np.testing.assert_array_equal(ir.interpret(g, params={"w": other})["w"], other)


@covers("const")
@pytest.mark.parametrize(
    ("t", "attrs", "expected"),
    [
        (T(F32, A=2, B=3), {"value": 0.125}, np.full((2, 3), 0.125, np.float32)),
        (T(F32), {"value": -2.5}, np.array(-2.5, np.float32)),
        (T(I32, A=2, B=3), {"values": [1, 2, 3, 4, 5, 6]}, np.arange(1, 7, dtype=np.int32).reshape(2, 3)),
        (T(BOOL, A=3), {"values": [True, False, True]}, np.array([True, False, True])),
        (T(BOOL, A=2), {"value": True}, np.array([True, True])),
        (T(BF16, A=2), {"values": [0.1, -3.3]}, np.array([0.1, -3.3], ml_dtypes.bfloat16).astype(np.float32)),
    ],
)
def test_const(t, attrs, expected) -> None:
    g = ir.Graph("g")
    g.add("const", name="c", type=t, **attrs)
    g.set_outputs("c")
    out = ir.interpret(g)["c"]
    assert out.dtype == t.dtype.storage
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        ({"value": -1.5}, [-2, -2]),
        ({"values": [2.5, -1.5]}, [2, -2]),
        ({"value": 3e9}, [127, 127]),
    ],
)
def test_const_float_values_for_int_dtype_round_like_cast(attrs, expected) -> None:
    # IR BUG (ir/ops/sources.py Const.evaluate): the value is truncated toward zero by
    # np.full / astype(int32) before the i8 rounder runs, instead of rounding half to even and
    # saturating like every other float -> int conversion (ir/dtypes.py _int_rounder, cast).
    g = ir.Graph("g")
    g.add("const", name="c", type=T(I8, A=2), **attrs)
    g.set_outputs("c")
    out = ir.interpret(g)["c"]
    assert out.tolist() == expected, f"const {attrs} : i8[A=2] gave {out.tolist()}, expected {expected}"


@covers("iota")
@pytest.mark.parametrize(("dtype", "axis"), [(I32, "Sk"), (I32, "Sq"), (F32, "Sq"), (BF16, "Sk")])
def test_iota(dtype, axis) -> None:
    g = ir.Graph("g")
    g.add("iota", name="i", type=T(dtype, Sq=3, Sk=4), axis=axis)
    g.set_outputs("i")
    out = ir.interpret(g)["i"]
    expected = np.indices((3, 4))[0 if axis == "Sq" else 1]
    assert out.dtype == dtype.storage
    np.testing.assert_array_equal(out, expected)


# -- unary -----------------------------------------------------------------------------------------


def _positive(rng, *shape):
    return (np.abs(f32(rng, *shape)) + 0.1).astype(np.float32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])
_GELU_C = math.sqrt(2.0 / math.pi)

# name -> (operand sampler, numpy reference on float64, tolerance)
UNARY_CASES = {
    "exp": (f32, np.exp, 1e-6),
    "log": (_positive, np.log, 1e-6),
    "sqrt": (_positive, np.sqrt, 1e-6),
    "rsqrt": (_positive, lambda x: 1.0 / np.sqrt(x), 1e-6),
    "recip": (_positive, lambda x: 1.0 / x, 1e-6),
    "tanh": (f32, np.tanh, 1e-6),
    "sigmoid": (f32, _sigmoid, 1e-6),
    "silu": (f32, lambda x: x * _sigmoid(x), 1e-6),
    "gelu_tanh": (f32, lambda x: 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x**3))), 1e-6),
    "gelu": (f32, lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), 1e-6),
    "erf": (f32, _erf, 1e-6),
    "sin": (f32, np.sin, 1e-6),
    "cos": (f32, np.cos, 1e-6),
    "neg": (f32, np.negative, 0),
    "abs": (f32, np.abs, 0),
    "relu": (f32, lambda x: np.maximum(x, 0.0), 0),
    "not": (lambda rng, *s: rng.integers(0, 2, size=s).astype(bool), np.logical_not, 0),
}


@covers(*UNARY)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, rng) -> None:
    sample, reference, tol = UNARY_CASES[name]
    x = sample(rng, 3, 5)
    if name in ("gelu", "gelu_tanh", "erf"):
        x = (x * 2).astype(np.float32)  # reach the tails too
    dtype = BOOL if x.dtype == np.bool_ else F32
    out = run(unit(name, T(dtype, A=3, B=5)), x)
    expected = reference(x.astype(np.float64) if dtype == F32 else x)
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)


def test_unary_table_has_a_case_for_every_op() -> None:
    assert set(UNARY_CASES) == set(UNARY)


@pytest.mark.parametrize(
    ("name", "reference"),
    [("neg", np.negative), ("abs", np.abs), ("relu", lambda x: np.maximum(x, 0))],
)
def test_unary_on_integers(name, reference, rng) -> None:
    x = rng.integers(-100, 100, size=(4, 3)).astype(np.int32)
    out = run(unit(name, T(I32, A=4, B=3)), x)
    np.testing.assert_array_equal(out, reference(x))


def test_erf_and_gelu_at_special_points() -> None:
    x = np.array([0.0, 1e-4, -1e-4, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0], np.float32)
    np.testing.assert_allclose(run(unit("erf", T(F32, A=9)), x), _erf(x), rtol=0, atol=1e-6)
    gelu = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    np.testing.assert_allclose(run(unit("gelu", T(F32, A=9)), x), gelu, rtol=0, atol=1e-6)


@covers("xielu")
def test_xielu_with_its_trainable_scalars_broadcast(rng) -> None:
    """softplus(ap) x^2 + beta x above zero; below, (e^min(x, eps) - 1 - x)(beta + softplus(an)) + beta x,
    the scalars (rank 0) broadcast over x; the negative side's exponent clipped at eps."""
    x = np.concatenate([f32(rng, 12) * 3, np.array([0.0, -1e-9, 1e-9, -20.0], np.float32)]).reshape(4, 4)
    ap, an = np.float32(-0.3), np.float32(0.7)
    g = unit("xielu", T(F32, A=4, B=4), T(F32), T(F32), beta=0.5, eps=-1e-6)
    w = x.astype(np.float64)
    softplus = lambda a: math.log1p(math.exp(float(a)))  # noqa: E731
    below = (np.expm1(np.minimum(w, -1e-6)) - w) * (0.5 + softplus(an)) + 0.5 * w
    expected = np.where(w > 0, softplus(ap) * w * w + 0.5 * w, below)
    np.testing.assert_allclose(run(g, x, ap, an), expected, rtol=1e-6, atol=1e-7)


# -- binary, comparisons, logic, where ------------------------------------------------------------


def _binary_operands(name, rng, shape):
    kinds = BINARY[name][1]
    if kinds == ("bool",):
        return tuple(rng.integers(0, 2, size=shape).astype(bool) for _ in range(2))
    a, b = small_ints(rng, *shape), small_ints(rng, *shape)
    if name in ("div", "mod"):
        b[b == 0] = 5
    if name == "pow":
        a = np.abs(a) + 0.5
    return a, b


_NUMPY_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "mod": np.mod,
    "pow": np.power,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


def test_binary_table_has_a_case_for_every_op() -> None:
    assert set(_NUMPY_BINARY) == set(BINARY)


@covers(*BINARY)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_same_axes(name, rng) -> None:
    a, b = _binary_operands(name, rng, (3, 4))
    dtype = BOOL if a.dtype == np.bool_ else F32
    g = unit(name, T(dtype, A=3, B=4), T(dtype, A=3, B=4))
    out = run(g, a, b)
    expected = _NUMPY_BINARY[name](a, b)
    to_bool = BINARY[name][2]
    assert g["y"].type.dtype == (BOOL if to_bool else dtype)
    assert out.dtype == (np.bool_ if to_bool else np.float32)
    if to_bool:
        assert expected.any() and not expected.all(), "want both outcomes in the data"
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(k for k, v in BINARY.items() if "int" in v[1]))
def test_binary_on_integers(name, rng) -> None:
    a = rng.integers(-50, 50, size=(3, 4)).astype(np.int32)
    b = rng.integers(-50, 50, size=(3, 4)).astype(np.int32)
    if name == "mod":
        b[b == 0] = 7
    out = run(unit(name, T(I32, A=3, B=4), T(I32, A=3, B=4)), a, b)
    np.testing.assert_array_equal(out, _NUMPY_BINARY[name](a, b))


def test_integer_add_saturates_to_the_declared_dtype() -> None:
    a = np.array([100, -100, 5], np.int32)
    out = run(unit("add", T(I8, A=3), T(I8, A=3)), a, a)
    np.testing.assert_array_equal(out, [127, -128, 10])


# (a's type, b's type, result axes, numpy reference given a and b in their own axis orders)
BROADCAST_CASES = {
    "b reordered and missing an axis": (
        T(F32, A=2, B=3, C=4),
        T(F32, C=4, A=2),
        ("A", "B", "C"),
        lambda a, b: a - b.T[:, None, :],
    ),
    "scalar b": (T(F32, A=2, B=3), T(F32), ("A", "B"), lambda a, b: a - b),
    "scalar a": (T(F32), T(F32, A=2, B=3), ("A", "B"), lambda a, b: a - b),
    "disjoint axes appended": (
        T(F32, A=2, B=3),
        T(F32, B=3, C=4),
        ("A", "B", "C"),
        lambda a, b: a[:, :, None] - b[None, :, :],
    ),
    "b wider gives the order": (
        T(F32, B=3),
        T(F32, C=4, B=3, A=2),
        ("C", "B", "A"),
        lambda a, b: a[None, :, None] - b,
    ),
}


@pytest.mark.parametrize("case", sorted(BROADCAST_CASES))
def test_binary_broadcasts_by_axis_name(case, rng) -> None:
    ta, tb, names, reference = BROADCAST_CASES[case]
    a, b = f32(rng, *ta.shape), f32(rng, *tb.shape)
    g = unit("sub", ta, tb)
    assert g["y"].type.names == names
    np.testing.assert_allclose(run(g, a, b), reference(a, b), rtol=1e-6)


def test_comparison_broadcasts_and_returns_bool(rng) -> None:
    a, b = small_ints(rng, 2, 5), small_ints(rng, 5)
    g = unit("lt", T(F32, A=2, S=5), T(F32, S=5))
    assert g["y"].type == T(BOOL, A=2, S=5)
    np.testing.assert_array_equal(run(g, a, b), a < b[None, :])


@covers("where")
def test_where_same_axes(rng) -> None:
    c = rng.integers(0, 2, size=(3, 4)).astype(bool)
    x, y = f32(rng, 3, 4), f32(rng, 3, 4)
    out = run(unit("where", T(BOOL, A=3, B=4), T(F32, A=3, B=4), T(F32, A=3, B=4)), c, x, y)
    np.testing.assert_array_equal(out, np.where(c, x, y))


def test_where_broadcasts_condition_operands_and_scalar(rng) -> None:
    # causal-mask shape: condition [Sq, Sk], scores [B, Sq, Sk] with axes reordered, fill f32[]
    c = np.tril(np.ones((4, 5), bool))
    s = f32(rng, 5, 2, 4)  # [Sk, B, Sq]
    fill = np.float32(-1e9)
    g = unit("where", T(BOOL, Sq=4, Sk=5), T(F32, Sk=5, B=2, Sq=4), T(F32))
    assert g["y"].type == T(F32, Sk=5, B=2, Sq=4)
    expected = np.where(c.T[:, None, :], s, fill)
    np.testing.assert_array_equal(run(g, c, s, fill), expected)


def test_where_with_condition_missing_axes(rng) -> None:
    c = np.array([True, False, True])
    x, y = f32(rng, 2, 3), f32(rng, 3, 2)  # x [A, S], y [S, A]
    g = unit("where", T(BOOL, S=3), T(F32, A=2, S=3), T(F32, S=3, A=2))
    assert g["y"].type.names == ("A", "S")
    np.testing.assert_array_equal(run(g, c, x, y), np.where(c[None, :], x, y.T))


# -- cast ------------------------------------------------------------------------------------------


def _via(narrow):
    return lambda x: x.astype(narrow).astype(np.float32)


@covers("cast")
@pytest.mark.parametrize(
    ("dtype", "reference"),
    [
        (BF16, _via(ml_dtypes.bfloat16)),
        (F16, _via(np.float16)),
        (FP8E4M3, _via(ml_dtypes.float8_e4m3fn)),
        (FP8E5M2, _via(ml_dtypes.float8_e5m2)),
        (F32, lambda x: x),
    ],
)
def test_cast_float_rounds_to_nearest_even(dtype, reference, rng) -> None:
    x = (f32(rng, 4, 8) * 10).astype(np.float32)
    out = run(unit("cast", T(F32, A=4, B=8), type=T(dtype, A=4, B=8)), x)
    np.testing.assert_array_equal(out, reference(x))
    np.testing.assert_array_equal(dtype.round(out), out)


@pytest.mark.parametrize(
    ("dtype", "x", "expected"),
    [
        (FP8E4M3, [1000.0, -1000.0, 448.0, 460.0, 1e30, -np.inf], [448, -448, 448, 448, 448, -448]),
        (FP8E5M2, [1e6, -1e6, 57344.0, 60000.0], [57344, -57344, 57344, 57344]),
        (BF16, [1.0 + 2**-8, 1.0 + 3 * 2**-8, 256.0 + 1.0, 256.0 + 3.0], [1.0, 1.0 + 2**-6, 256.0, 260.0]),
        (F16, [2049.0, 2051.0, 1e5], [2048.0, 2052.0, np.inf]),
        (
            I8,
            [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.7, 126.5, 127.5, 200.0, -128.5, -200.0],
            [0, 2, 2, 0, -2, -2, 4, 126, 127, 127, -128, -128],
        ),
        (I4, [0.5, 6.5, 7.4, 7.5, 100.0, -7.5, -8.5, -9.0], [0, 6, 7, 7, 7, -8, -8, -8]),
        (I32, [2.5, -3.5, 1e9], [2, -4, 1_000_000_000]),
        (BOOL, [0.0, -0.0, 1.5, -2.0, 1e-30], [False, False, True, True, True]),
    ],
)
def test_cast_edge_values(dtype, x, expected) -> None:
    x = np.array(x, np.float32)
    out = run(unit("cast", T(F32, A=len(x)), type=T(dtype, A=len(x))), x)
    assert out.dtype == dtype.storage
    np.testing.assert_array_equal(out, np.array(expected, dtype=dtype.storage))


def test_cast_to_i32_saturates() -> None:
    # IR BUG (ir/dtypes.py _int_rounder): np.clip(float32, -2**31, 2**31 - 1) keeps float32, where
    # 2**31 - 1 rounds up to 2**31, so astype(int32) overflows and +3e9 / +inf come out as -2**31.
    x = np.array([3e9, np.inf, -3e9, -np.inf], np.float32)
    out = run(unit("cast", T(F32, A=4), type=T(I32, A=4)), x)
    expected = [2**31 - 1, 2**31 - 1, -(2**31), -(2**31)]
    assert out.tolist() == expected, f"cast f32 {x.tolist()} -> i32 gave {out.tolist()}"


@pytest.mark.parametrize(
    ("src", "x", "dst", "expected"),
    [
        (I32, np.array([-3, 0, 300], np.int32), F32, [-3.0, 0.0, 300.0]),
        (I32, np.array([-3, 0, 300], np.int32), I8, [-3, 0, 127]),
        (I32, np.array([257, 1, 0], np.int32), BF16, [256.0, 1.0, 0.0]),
        (BOOL, np.array([True, False, True]), F32, [1.0, 0.0, 1.0]),
        (I32, np.array([2, 0, -1]), BOOL, [True, False, True]),
    ],
)
def test_cast_from_int_and_bool(src, x, dst, expected) -> None:
    out = run(unit("cast", T(src, A=3), type=T(dst, A=3)), x)
    np.testing.assert_array_equal(out, np.array(expected, dtype=dst.storage))


# -- einsum ----------------------------------------------------------------------------------------

# (equation, operand types, numpy einsum spec)
EINSUM_CASES = {
    "1 operand sum": ("A B -> B", [T(F32, A=3, B=4)], "ab->b"),
    "1 operand transpose": ("A B -> B A", [T(F32, A=3, B=4)], "ab->ba"),
    "gemm": ("M K, K N -> M N", [T(F32, M=4, K=5), T(F32, K=5, N=3)], "mk,kn->mn"),
    "batched projection": (
        "B S D, D F -> B S F",
        [T(F32, B=2, S=3, D=4), T(F32, D=4, F=5)],
        "bsd,df->bsf",
    ),
    "outer product": ("A, B -> B A", [T(F32, A=3), T(F32, B=2)], "a,b->ba"),
    "3 operands chain": (
        "A B, B C, C D -> A D",
        [T(F32, A=2, B=3), T(F32, B=3, C=4), T(F32, C=4, D=5)],
        "ab,bc,cd->ad",
    ),
    "3 operands gated": (
        "S D, D F, D F -> S F",
        [T(F32, S=3, D=4), T(F32, D=4, F=2), T(F32, D=4, F=2)],
        "sd,df,df->sf",
    ),
    "GQA scores (k broadcast over groups G)": (
        "B Hkv G S K, B Hkv T K -> B Hkv G S T",
        [T(F32, B=1, Hkv=2, G=3, S=4, K=8), T(F32, B=1, Hkv=2, T=5, K=8)],
        "bhgsk,bhtk->bhgst",
    ),
    "GQA values": (
        "B Hkv G S T, B Hkv T K -> B S Hkv G K",
        [T(F32, B=1, Hkv=2, G=3, S=4, T=5), T(F32, B=1, Hkv=2, T=5, K=8)],
        "bhgst,bhtk->bshgk",
    ),
}


@covers("einsum")
@pytest.mark.parametrize("case", sorted(EINSUM_CASES))
def test_einsum(case, rng) -> None:
    eq, types, spec = EINSUM_CASES[case]
    arrays = [f32(rng, *t.shape) for t in types]
    g = unit("einsum", *types, eq=eq)
    out = run(g, *arrays)
    expected = np.einsum(spec, *[a.astype(np.float64) for a in arrays])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_einsum_i8_operands_accumulate_into_i32(rng) -> None:
    a = rng.integers(-128, 128, size=(4, 64)).astype(np.int32)
    b = rng.integers(-128, 128, size=(64, 3)).astype(np.int32)
    g = unit("einsum", T(I8, M=4, K=64), T(I8, K=64, N=3), type=T(I32, M=4, N=3), eq="M K, K N -> M N")
    out = run(g, a, b)
    expected = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(expected).max() > 127, "the sums must leave the i8 range"
    np.testing.assert_array_equal(out, expected)


def test_einsum_declared_bf16_result_is_on_the_bf16_grid(rng) -> None:
    # Integer operands keep the f32 accumulation exact, so the only rounding is f32 -> bf16.
    a = rng.integers(-16, 17, size=(8, 32)).astype(np.float32)
    b = rng.integers(-16, 17, size=(32, 8)).astype(np.float32)
    g = unit("einsum", T(F32, M=8, K=32), T(F32, K=32, N=8), type=T(BF16, M=8, N=8), eq="M K, K N -> M N")
    out = run(g, a, b)
    exact = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
    assert not np.array_equal(exact.astype(ml_dtypes.bfloat16).astype(np.float32), exact), "want rounding"
    np.testing.assert_array_equal(out, exact.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_bf16_inputs_are_rounded_onto_the_grid(rng) -> None:
    g = ir.Graph("g")
    g.input("x", T(BF16, A=16))
    g.set_outputs("x")
    x = f32(rng, 16)
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(ir.interpret(g, {"x": x})["x"], expected)


# -- gather / scatter ------------------------------------------------------------------------------


@covers("gather")
def test_gather_embedding(rng) -> None:
    table = f32(rng, 10, 4)
    ids = rng.integers(0, 10, size=(2, 3)).astype(np.int32)
    g = unit("gather", T(F32, V=10, D=4), T(I32, B=2, S=3), axis="V")
    assert g["y"].type == T(F32, B=2, S=3, D=4)
    np.testing.assert_array_equal(run(g, table, ids), table[ids])


def test_gather_with_shared_batch_axis(rng) -> None:
    # index [B] picks one S position per batch row: table[b, idx[b], :]
    table = f32(rng, 3, 5, 4)
    idx = np.array([4, 0, 2], np.int32)
    g = unit("gather", T(F32, B=3, S=5, D=4), T(I32, B=3), axis="S")
    assert g["y"].type == T(F32, B=3, D=4)
    np.testing.assert_array_equal(run(g, table, idx), table[np.arange(3), idx])


def test_gather_take_along_axis_with_new_axis(rng) -> None:
    # index [T, B]: B is shared with the table, T replaces S -> [B, T, D]
    table = f32(rng, 3, 5, 4)
    idx = rng.integers(0, 5, size=(2, 3)).astype(np.int32)
    g = unit("gather", T(F32, B=3, S=5, D=4), T(I32, T=2, B=3), axis="S")
    assert g["y"].type == T(F32, B=3, T=2, D=4)
    expected = np.take_along_axis(table, idx.T[:, :, None], axis=1)
    np.testing.assert_array_equal(run(g, table, idx), expected)


@pytest.mark.parametrize("bad", [10, -1])
def test_gather_out_of_range_index_raises(bad, rng) -> None:
    g = unit("gather", T(F32, V=10, D=4), T(I32, S=3), axis="V")
    with pytest.raises(ir.InterpretError, match=r"%y = gather: index %x1 .* axis 'V' has size 10"):
        run(g, f32(rng, 10, 4), np.array([0, bad, 2], np.int32))


@covers("scatter")
@pytest.mark.parametrize("steps", [1, 2])
def test_scatter_kv_cache_write(steps, rng) -> None:
    cache = f32(rng, 2, 3, 6, 4)  # [B, H, P, K]
    pos = np.array([[4, 5], [1, 2]], np.int32)[:, :steps]  # per-batch positions [B, T]
    new = f32(rng, 2, 3, steps, 4)  # [B, H, T, K]
    g = unit(
        "scatter",
        T(F32, B=2, H=3, P=6, K=4),
        T(I32, B=2, T=steps),
        T(F32, B=2, H=3, T=steps, K=4),
        axis="P",
    )
    expected = cache.copy()
    for b in range(2):
        for t in range(steps):
            expected[b, :, pos[b, t], :] = new[b, :, t, :]
    out = run(g, cache, pos, new)
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, cache)


def test_scatter_out_of_range_index_raises(rng) -> None:
    g = unit("scatter", T(F32, P=4, K=2), T(I32, T=1), T(F32, T=1, K=2), axis="P")
    with pytest.raises(ir.InterpretError, match="index"):
        run(g, f32(rng, 4, 2), np.array([4], np.int32), f32(rng, 1, 2))


# -- reduce ----------------------------------------------------------------------------------------

_NUMPY_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


@covers("reduce")
@pytest.mark.parametrize("op", sorted(_NUMPY_REDUCE))
@pytest.mark.parametrize("axes", [("B",), ("A", "C"), ("C", "A"), ("A", "B", "C")])
def test_reduce(op, axes, rng) -> None:
    x = f32(rng, 2, 3, 4)
    g = unit("reduce", T(F32, A=2, B=3, C=4), op=op, axes=axes)
    assert g["y"].type.names == tuple(n for n in "ABC" if n not in axes)
    dims = tuple("ABC".index(n) for n in axes)
    np.testing.assert_allclose(run(g, x), _NUMPY_REDUCE[op](x, axis=dims), rtol=1e-6)


@covers("topk")
@pytest.mark.parametrize("k", [1, 2, 5])
def test_topk_matches_argsort_and_gathers_values(k, rng) -> None:
    x = f32(rng, 3, 5, 2)
    g = ir.Graph("topk")
    xs = g.input("x0", T(F32, T=3, E=5, B=2))
    idx = g.add("topk", xs, name="y", axis="E", k=k, new_axis="Kk")
    g.add("gather", xs, idx, name="v", axis="E")
    g.set_outputs("y", "v")
    out = ir.interpret(g, {"x0": x})
    expected = np.argsort(-x, axis=1, kind="stable")[:, :k, :]
    np.testing.assert_array_equal(out["y"], expected)
    assert g["v"].type == T(F32, T=3, Kk=k, B=2)
    np.testing.assert_array_equal(out["v"], np.take_along_axis(x, expected, axis=1))


def test_topk_prefers_the_lower_index_on_ties() -> None:
    g = unit("topk", T(F32, E=4), axis="E", k=2, new_axis="Kk")
    np.testing.assert_array_equal(run(g, np.array([1.0, 3.0, 3.0, 3.0], np.float32)), [1, 2])


def _moe_graph(b: int, s: int, k: int, e: int, d: int, f: int) -> ir.Graph:
    """x [B, S, D] through top-k routing, dispatch, a grouped einsum and combine."""
    g = ir.Graph("moe")
    x = g.input("x0", T(F32, B=b, S=s, D=d))
    idx = g.input("x1", T(I32, B=b, S=s, Kk=k))
    w = g.input("x2", T(F32, E=e, F=f, D=d))
    gates = g.input("x3", T(F32, B=b, S=s, Kk=k))
    counts = g.add("bincount", idx, name="counts", type=T(I32, E=e))
    rows = g.add("dispatch", x, idx, name="rows", axis="R")
    y = g.add("grouped_einsum", rows, w, counts, name="h", eq="R D, E F D -> R F", group="E", top_k=k)
    g.add("combine", y, idx, gates, name="y", axis="R", slots=["Kk"])
    g.set_outputs("y", "rows", "counts")
    return g


@covers("dispatch", "bincount", "grouped_einsum", "combine")
@pytest.mark.parametrize(("b", "s", "k", "e"), [(1, 1, 2, 4), (2, 5, 2, 6), (3, 4, 3, 3)])
def test_moe_ops_equal_a_plain_numpy_moe(b, s, k, e, rng) -> None:
    d, f = 8, 5
    x, w, gates = f32(rng, b, s, d), f32(rng, e, f, d), f32(rng, b, s, k)
    # distinct experts per token, some experts unused when E > k and tokens are few
    idx = np.argsort(rng.random((b, s, e)), axis=-1)[..., :k].astype(np.int32)
    out = ir.interpret(_moe_graph(b, s, k, e, d, f), {"x0": x, "x1": idx, "x2": w, "x3": gates})
    expected = np.zeros((b, s, f), np.float32)
    for bi, si, j in np.ndindex(b, s, k):
        expected[bi, si] += gates[bi, si, j] * (w[idx[bi, si, j]] @ x[bi, si])
    np.testing.assert_allclose(out["y"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["counts"], np.bincount(idx.ravel(), minlength=e))
    # rows are grouped by expert, each expert's in token order
    slots = np.argsort(idx.ravel(), kind="stable")
    np.testing.assert_array_equal(out["rows"], x.reshape(b * s, d)[slots // k])
    assert list(np.sort(idx.ravel())) == list(idx.ravel()[slots])


def test_dispatch_of_the_index_itself_gives_each_rows_expert() -> None:
    """With every index axis in x, each slot reads its own element: dispatch(idx, idx) is the
    expert of each sorted row (gpt-oss gathers its experts' biases by it)."""
    idx = np.array([[2, 0], [0, 1], [2, 1]], np.int32)
    g = unit("dispatch", T(I32, T=3, Kk=2), T(I32, T=3, Kk=2), axis="R")
    np.testing.assert_array_equal(run(g, idx, idx), [0, 0, 1, 1, 2, 2])


def test_grouped_einsum_refuses_counts_that_miss_rows(rng) -> None:
    g = unit("grouped_einsum", T(F32, R=4, D=3), T(F32, E=2, F=2, D=3), T(I32, E=2),
             eq="R D, E F D -> R F", group="E", top_k=1)  # fmt: skip
    with pytest.raises(ir.InterpretError, match=r"counts %x2 sum to 3 \(min 1\) but there are 4 rows"):
        run(g, f32(rng, 4, 3), f32(rng, 2, 2, 3), np.array([1, 2], np.int32))


def test_bincount_refuses_values_outside_its_range() -> None:
    g = unit("bincount", T(I32, T=3), type=T(I32, E=2))
    np.testing.assert_array_equal(run(g, np.array([1, 1, 0], np.int32)), [1, 2])
    with pytest.raises(ir.InterpretError, match=r"holds values in \[0, 2\] but the result counts 2"):
        run(g, np.array([0, 2, 1], np.int32))


def test_reduce_integers_saturate_to_dtype() -> None:
    x = np.full((2, 3), 100, np.int32)
    out = run(unit("reduce", T(I8, A=2, B=3), op="sum", axes=["B"]), x)
    np.testing.assert_array_equal(out, [127, 127])


# -- layout ----------------------------------------------------------------------------------------


@covers("reshape")
def test_reshape(rng) -> None:
    x = f32(rng, 2, 6)
    g = unit("reshape", T(F32, A=2, B=6), type=T(F32, C=3, G=2, D=2))
    np.testing.assert_array_equal(run(g, x), x.reshape(3, 2, 2))


@covers("transpose")
def test_transpose(rng) -> None:
    x = f32(rng, 2, 3, 4)
    g = unit("transpose", T(F32, A=2, B=3, C=4), type=T(F32, C=4, A=2, B=3))
    np.testing.assert_array_equal(run(g, x), x.transpose(2, 0, 1))


@covers("slice")
@pytest.mark.parametrize(("start", "stop"), [(2, 5), (0, 8), (7, 8)])
def test_slice(start, stop, rng) -> None:
    x = f32(rng, 2, 8, 3)
    g = unit("slice", T(F32, A=2, S=8, D=3), axis="S", start=start, stop=stop)
    assert g["y"].type == T(F32, A=2, S=stop - start, D=3)
    np.testing.assert_array_equal(run(g, x), x[:, start:stop])


@covers("concat")
def test_concat_three_operands(rng) -> None:
    parts = [f32(rng, 2, s, 4) for s in (1, 3, 2)]
    g = unit("concat", *[T(F32, A=2, S=s, D=4) for s in (1, 3, 2)], axis="S")
    assert g["y"].type == T(F32, A=2, S=6, D=4)
    np.testing.assert_array_equal(run(g, *parts), np.concatenate(parts, axis=1))


# -- collectives -----------------------------------------------------------------------------------


def spmd(g: ir.Graph, per_rank: list[np.ndarray]) -> list[np.ndarray]:
    outs = ir.interpret_spmd(g, [{"x0": x} for x in per_rank])
    assert len(outs) == len(per_rank)
    return [o["y"] for o in outs]


@covers("all_reduce")
@pytest.mark.parametrize("chips", [2, 3])
@pytest.mark.parametrize("op", sorted(_NUMPY_REDUCE))
def test_all_reduce(op, chips, rng) -> None:
    xs = [f32(rng, 2, 6) for _ in range(chips)]
    g = unit("all_reduce", T(F32, S=2, D=6), op=op, chips=chips)
    expected = _NUMPY_REDUCE[op](np.stack(xs), axis=0)
    for out in spmd(g, xs):
        np.testing.assert_allclose(out, expected, rtol=1e-6)


@covers("reduce_scatter")
@pytest.mark.parametrize("chips", [2, 3])
@pytest.mark.parametrize("op", sorted(_NUMPY_REDUCE))
def test_reduce_scatter(op, chips, rng) -> None:
    xs = [f32(rng, 2, 6) for _ in range(chips)]
    g = unit("reduce_scatter", T(F32, S=2, D=6), op=op, axis="D", chips=chips)
    assert g["y"].type == T(F32, S=2, D=6 // chips)
    total = _NUMPY_REDUCE[op](np.stack(xs), axis=0)
    width = 6 // chips
    for r, out in enumerate(spmd(g, xs)):
        np.testing.assert_allclose(out, total[:, r * width : (r + 1) * width], rtol=1e-6)


@covers("all_gather")
@pytest.mark.parametrize("chips", [2, 3])
def test_all_gather(chips, rng) -> None:
    xs = [f32(rng, 2, 3) for _ in range(chips)]
    g = unit("all_gather", T(F32, S=2, D=3), axis="D", chips=chips)
    assert g["y"].type == T(F32, S=2, D=3 * chips)
    for out in spmd(g, xs):
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))


@covers("send")
def test_send_hands_the_value_on_unchanged(rng) -> None:
    """A pipeline stage's send: the next stage's graph takes the same tensor as its input."""
    x = f32(rng, 2, 3)
    g = unit("send", T(F32, S=2, D=3), stage=1)
    out = spmd(g, [x])[0]
    np.testing.assert_array_equal(out, x)
    assert g["y"].type == T(F32, S=2, D=3)


def test_collective_on_wrong_rank_count_raises(rng) -> None:
    g = unit("all_reduce", T(F32, D=4), op="sum", chips=2)
    with pytest.raises(ir.InterpretError, match="spans 2 chips but the graph runs on 3 ranks"):
        spmd(g, [f32(rng, 4) for _ in range(3)])


# -- interpreter errors ----------------------------------------------------------------------------


def test_missing_input_raises_naming_it() -> None:
    g = ir.Graph("g")
    g.input("tokens", T(I32, B=1, S=4))
    g.set_outputs("tokens")
    with pytest.raises(ir.InterpretError, match=r"no value given for input %tokens : i32\[B=1, S=4\]"):
        ir.interpret(g, {})


def test_wrong_input_shape_raises(rng) -> None:
    g = unit("exp", T(F32, A=2, B=3))
    with pytest.raises(ir.InterpretError, match=r"input %x0 expects shape \[2, 3\]"):
        run(g, f32(rng, 3, 2))


def test_missing_param_raises_naming_it() -> None:
    g = ir.Graph("g")
    g.param("w", T(F32, K=2))
    g.set_outputs("w")
    with pytest.raises(ir.InterpretError, match="param %w"):
        ir.interpret(g)


# -- recurrences along a sequence (their full checks: tests/test_scan_ops.py) ---------------------


@covers("scan", "scan_state")
def test_selective_scan_against_the_sequential_recurrence(rng) -> None:
    arrays = mamba1_case(rng, batch=1, steps=5, dims=3, n=2)
    y, h = run_mamba1(arrays)
    want_y, want_h = mamba1_reference(*arrays)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)


@covers("recurrence")
def test_recurrence_returns_every_state(rng) -> None:
    a, u, h0 = f32(rng, 3, 4), f32(rng, 2, 4, 3), f32(rng, 2, 3)  # a [H, C] onto u [P, C, H]
    g = unit("recurrence", T(F32, H=3, C=4), T(F32, P=2, C=4, H=3), T(F32, P=2, H=3), axis="C")
    h, want = h0, np.empty_like(u)
    for c in range(4):
        h = a[:, c] * h + u[:, c]
        want[:, c] = h
    np.testing.assert_allclose(run(g, a, u, h0), want, rtol=1e-6)
    # a matrix transition over the state axis H (column axis J): h_c = a_c @ h_(c-1) + u_c
    m = f32(rng, 4, 3, 3)  # [C, H, J]
    types = T(F32, C=4, H=3, J=3), T(F32, P=2, C=4, H=3), T(F32, P=2, H=3)
    g = unit("recurrence", *types, axis="C", mix=["H", "J"])
    h, want = h0, np.empty_like(u)
    for c in range(4):
        h = h @ m[c].T + u[:, c]  # h [P, H]: h_new[p, i] = sum_j m[c, i, j] h[p, j]
        want[:, c] = h
    np.testing.assert_allclose(run(g, m, u, h0), want, rtol=1e-5, atol=1e-6)


@covers("delta_scan", "delta_scan_state", "conv1d")
def test_delta_rule_and_short_convolution_against_loops(rng) -> None:
    arrays, types = delta_case(rng, batch=1, steps=4)
    g = ir.Graph("d")
    xs = [g.input(n, t) for n, t in types.items()]
    g.add("delta_scan", *xs, name="y", axis="S")
    g.add("delta_scan_state", *xs, name="h", axis="S")
    w = g.input("w", T(F32, H=2, V=3, Kc=2))
    win = g.input("win", T(F32, B=1, S=1, H=2, V=3))
    g.add("conv1d", "v", w, win, name="c", axis="S")
    g.set_outputs("y", "h", "c")
    wv, winv = f32(rng, 2, 3, 2), f32(rng, 1, 1, 2, 3)
    out = ir.interpret(g, {**dict(zip(types, arrays, strict=True)), "w": wv, "win": winv})
    want_y, want_h = delta_reference(*arrays)
    np.testing.assert_allclose(out["y"], want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["h"], want_h, rtol=1e-5, atol=1e-5)
    v = arrays[2].reshape(1, 4, 6)
    want_c = conv_reference(v, wv.reshape(6, 2), winv.reshape(1, 1, 6))
    np.testing.assert_allclose(out["c"].reshape(1, 4, 6), want_c, rtol=1e-5, atol=1e-5)


# -- coverage --------------------------------------------------------------------------------------


def test_every_registered_op_kind_is_covered() -> None:
    assert set(ir.ops.REGISTRY) == COVERED, (
        f"no interpreter test for {sorted(set(ir.ops.REGISTRY) - COVERED)}; "
        f"stale: {sorted(COVERED - set(ir.ops.REGISTRY))}"
    )
