"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, `where` and `cast`.

Each unary or binary op is one row of a table below; operands broadcast by axis name
(see ir.ops.broadcast) and must share one dtype, so every precision change is an explicit cast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ir.dtypes import BOOL
from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require
from ir.ops.broadcast import align, broadcast_axes
from ir.types import TensorType

_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), so the IR needs no scipy."""
    z = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + _ERF_P * z)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    return (np.sign(x) * (1.0 - poly * np.exp(-z * z))).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


_GELU_C = np.float32(np.sqrt(2.0 / np.pi))

# name -> (function, operand kinds, what it computes)
UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], tuple[str, ...], str]] = {
    "exp": (np.exp, ("float",), "e^x"),
    "log": (np.log, ("float",), "natural logarithm"),
    "sqrt": (np.sqrt, ("float",), "square root"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), ("float",), "1 / sqrt(x)"),
    "recip": (lambda x: 1.0 / x, ("float",), "1 / x"),
    "tanh": (np.tanh, ("float",), "hyperbolic tangent"),
    "sigmoid": (_sigmoid, ("float",), "1 / (1 + e^-x)"),
    "silu": (lambda x: x * _sigmoid(x), ("float",), "x * sigmoid(x)"),
    "gelu_tanh": (
        lambda x: 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + np.float32(0.044715) * x * x * x))),
        ("float",),
        "GELU, tanh approximation",
    ),
    "gelu": (lambda x: 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0)))), ("float",), "GELU, exact (erf)"),
    "erf": (_erf, ("float",), "error function"),
    "sin": (np.sin, ("float",), "sine"),
    "cos": (np.cos, ("float",), "cosine"),
    "neg": (np.negative, ("float", "int"), "-x"),
    "abs": (np.abs, ("float", "int"), "|x|"),
    "relu": (lambda x: np.maximum(x, 0), ("float", "int"), "max(x, 0)"),
    "not": (np.logical_not, ("bool",), "logical not"),
}

# name -> (function, operand kinds, result is bool, what it computes)
BINARY: dict[str, tuple[Callable, tuple[str, ...], bool, str]] = {
    "add": (np.add, ("float", "int"), False, "a + b"),
    "sub": (np.subtract, ("float", "int"), False, "a - b"),
    "mul": (np.multiply, ("float", "int"), False, "a * b"),
    "div": (np.divide, ("float",), False, "a / b"),
    "max": (np.maximum, ("float", "int"), False, "larger of a and b"),
    "min": (np.minimum, ("float", "int"), False, "smaller of a and b"),
    "mod": (np.mod, ("float", "int"), False, "a mod b, with the sign of b (Python's %): a ring slot"),
    "pow": (np.power, ("float",), False, "a ^ b"),
    "eq": (np.equal, ("float", "int", "bool"), True, "a == b"),
    "ne": (np.not_equal, ("float", "int", "bool"), True, "a != b"),
    "lt": (np.less, ("float", "int"), True, "a < b"),
    "le": (np.less_equal, ("float", "int"), True, "a <= b"),
    "gt": (np.greater, ("float", "int"), True, "a > b"),
    "ge": (np.greater_equal, ("float", "int"), True, "a >= b"),
    "and": (np.logical_and, ("bool",), True, "logical and"),
    "or": (np.logical_or, ("bool",), True, "logical or"),
}


def _work(array: np.ndarray) -> np.ndarray:
    """Integers compute in int64 so the result's rounding, not numpy, decides overflow."""
    return array.astype(np.int64) if array.dtype.kind == "i" else array


def _broadcast_args(args, call: OpCall) -> list[np.ndarray]:
    out_names = call.out.names
    return [_work(align(a, t.names, out_names)) for a, t in zip(args, call.operands, strict=True)]


def _same_dtype(call: OpCall, operands: range) -> None:
    dtypes = {call.operands[i].dtype for i in operands}
    require(
        len(dtypes) == 1,
        "operands must share one dtype (insert a cast), got "
        + ", ".join(f"{call.label(i)}: {call.operands[i].dtype}" for i in operands),
    )


class _Elementwise(OpDef):
    def cost(self, call):
        return OpCost(call.out.numel, sum(t.nbytes for t in call.operands), call.out.nbytes)


def _make_unary(name: str, fn: Callable, kinds: tuple[str, ...], what: str) -> None:
    class Unary(_Elementwise):
        kind = name
        min_operands = max_operands = 1
        summary = f"Elementwise {what}."
        example = f"%y = {name}(%x) : {'bool' if kinds == ('bool',) else 'f32'}[B=1, D=64]"

        def infer(self, call):
            (x,) = call.operands
            require(x.dtype.kind in kinds, f"{name} needs a {' or '.join(kinds)} operand, got {x.dtype}")
            return x

        def evaluate(self, args, call, ctx):
            return fn(_work(args[0]))

    Unary.__name__ = Unary.__qualname__ = f"Unary_{name}"
    register(Unary)


def _make_binary(name: str, fn: Callable, kinds: tuple[str, ...], to_bool: bool, what: str) -> None:
    class Binary(_Elementwise):
        kind = name
        min_operands = max_operands = 2
        summary = f"Elementwise {what}, broadcasting by axis name" + (", giving bool." if to_bool else ".")
        example = f"%y = {name}(%a, %b) : {'bool' if to_bool else 'f32'}[B=1, D=64]"

        def infer(self, call):
            _same_dtype(call, range(2))
            dtype = call.operands[0].dtype
            require(dtype.kind in kinds, f"{name} needs {' or '.join(kinds)} operands, got {dtype}")
            return TensorType(BOOL if to_bool else dtype, broadcast_axes(call))

        def evaluate(self, args, call, ctx):
            return fn(*_broadcast_args(args, call))

    Binary.__name__ = Binary.__qualname__ = f"Binary_{name}"
    register(Binary)


for _name, (_fn, _kinds, _what) in UNARY.items():
    _make_unary(_name, _fn, _kinds, _what)
for _name, (_fn, _kinds, _to_bool, _what) in BINARY.items():
    _make_binary(_name, _fn, _kinds, _to_bool, _what)


@register
class Where(_Elementwise):
    kind = "where"
    min_operands = max_operands = 3
    summary = "Pick from the second operand where the bool condition holds, else the third (masks)."
    example = "%m = where(%causal, %s, %neg_inf) : f32[B=1, H=8, Sq=8, Sk=8]"

    def infer(self, call):
        cond = call.operands[0]
        require(cond.dtype == BOOL, f"condition {call.label(0)} must be bool, got {cond.dtype}")
        _same_dtype(call, range(1, 3))
        return TensorType(call.operands[1].dtype, broadcast_axes(call))

    def evaluate(self, args, call, ctx):
        return np.where(*_broadcast_args(args, call))


def _softplus(a: np.ndarray) -> np.ndarray:
    """log(1 + e^a), without overflow for large a."""
    return np.logaddexp(a.dtype.type(0), a)


@register
class Xielu(_Elementwise):
    """xIELU (arXiv 2411.13010; transformers' XIELUActivation, Apertus's MLP activation), with
    trainable alpha_p and alpha_n stored before their softplus, as checkpoints hold them."""

    kind = "xielu"
    min_operands = max_operands = 3
    attrs = {
        "beta": AttrSpec("number", doc="the slope of the linear term on both sides"),
        "eps": AttrSpec("number", doc="the negative side's inputs are clipped to at most eps"),
    }
    summary = (
        "xIELU activation of x with trainable (pre-softplus) ap and an: x > 0 gives "
        "softplus(ap) x^2 + beta x, else (expm1(min(x, eps)) - x) (beta + softplus(an)) + beta x."
    )
    example = "%y = xielu(%x, %ap, %an) {beta = 0.5, eps = -1e-06} : f32[B=1, S=8, F=64]"

    def infer(self, call):
        _same_dtype(call, range(3))
        dtype = call.operands[0].dtype
        require(dtype.kind == "float", f"xielu needs float operands, got {dtype}")
        return TensorType(dtype, broadcast_axes(call))

    def evaluate(self, args, call, ctx):
        x, ap, an = _broadcast_args(args, call)
        beta, eps = (x.dtype.type(call.attrs[k]) for k in ("beta", "eps"))
        positive = _softplus(ap) * x * x + beta * x
        negative = (np.expm1(np.minimum(x, eps)) - x) * (beta + _softplus(an)) + beta * x
        return np.where(x > 0, positive, negative)


@register
class Cast(OpDef):
    kind = "cast"
    min_operands = max_operands = 1
    needs_result_type = True
    summary = "Convert to the result's dtype, rounding to nearest even; fp8 and integer casts saturate."
    example = "%y = cast(%x) : bf16[B=1, D=64]"

    def infer(self, call):
        (x,) = call.operands
        require(
            call.out.axes == x.axes,
            f"cast keeps the axes: {call.label(0)} : {x} but the result is {call.out}",
        )
        return call.out

    def evaluate(self, args, call, ctx):
        return args[0]  # the interpreter's rounding onto the result dtype is the conversion

    def cost(self, call):
        """A conversion, not arithmetic: no FLOPs; reads the operand, writes the result."""
        return OpCost(0, call.operands[0].nbytes, call.out.nbytes)
