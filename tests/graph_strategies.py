"""Hypothesis strategies that build random well-typed graphs through Graph.add.

Each axis name has one fixed size, so operands drawn at random always agree on shared axes.
"""

from __future__ import annotations

import contextlib
import math

from hypothesis import strategies as st

import ir
from ir.ops.elementwise import BINARY, UNARY

AXIS_SIZES = {"A": 2, "B": 3, "C": 4, "D": 2, "E": 5, "s_q": 3}
FLOAT_DTYPES = [ir.F32, ir.BF16, ir.F16, ir.FP8E4M3]
FINITE = st.floats(allow_nan=False, allow_infinity=True, width=32)
NAMES = st.from_regex(r"[A-Za-z0-9_.]{1,12}", fullmatch=True)


def _axes(draw, min_size: int = 0):
    names = draw(st.lists(st.sampled_from(sorted(AXIS_SIZES)), min_size=min_size, max_size=4, unique=True))
    return tuple(ir.Axis(n, AXIS_SIZES[n]) for n in names)


def _pick(draw, g: ir.Graph, pred):
    candidates = [n for n in g.nodes if pred(n)]
    return draw(st.sampled_from(candidates)) if candidates else None


def _fits(*nodes) -> bool:
    """Shared axis names agree in size (slice and concat change sizes but keep names)."""
    sizes: dict[str, int] = {}
    return all(sizes.setdefault(a.name, a.size) == a.size for n in nodes for a in n.type.axes)


def _is_float(n):
    return n.type.dtype.is_float


def _step(draw, g: ir.Graph) -> None:
    """Adds one random op to g, or nothing when no operand fits the drawn op."""
    choice = draw(
        st.sampled_from(
            [
                "unary",
                "binary",
                "reduce",
                "einsum",
                "reshape",
                "transpose",
                "slice",
                "concat",
                "cast",
                "const",
                "iota",
                "gather",
                "where",
                "compare",
            ]
        )
    )
    if choice == "unary":
        x = _pick(draw, g, _is_float)
        names = [k for k, (_, kinds, _) in UNARY.items() if "float" in kinds]
        if x is not None:
            g.add(draw(st.sampled_from(names)), x)
    elif choice in ("binary", "compare"):
        x = _pick(draw, g, _is_float)
        if x is None:
            return
        y = _pick(draw, g, lambda n: n.type.dtype == x.type.dtype and _fits(x, n))
        kinds = [
            k
            for k, (_, ks, to_bool, _) in BINARY.items()
            if "float" in ks and to_bool == (choice == "compare")
        ]
        g.add(draw(st.sampled_from(kinds)), x, y)
    elif choice == "reduce":
        x = _pick(draw, g, lambda n: n.type.rank > 0 and n.type.dtype.kind != "bool")
        if x is not None:
            axes = draw(st.lists(st.sampled_from(x.type.names), min_size=1, unique=True))
            g.add("reduce", x, op=draw(st.sampled_from(["sum", "max", "min"])), axes=axes)
    elif choice == "einsum":
        x = _pick(draw, g, _is_float)
        if x is None:
            return
        y = _pick(draw, g, lambda n: n.type.dtype == x.type.dtype and _fits(x, n))
        union = list(dict.fromkeys(x.type.names + y.type.names))
        out = draw(st.permutations(union)) if union else []
        out = out[: draw(st.integers(0, len(out)))]
        eq = f"{' '.join(x.type.names)}, {' '.join(y.type.names)} -> {' '.join(out)}"
        g.add("einsum", x, y, eq=eq)
    elif choice == "reshape":
        x = _pick(draw, g, lambda n: True)
        g.add("reshape", x, type=ir.TensorType.of(x.type.dtype, N=x.type.numel))
    elif choice == "transpose":
        x = _pick(draw, g, lambda n: True)
        perm = draw(st.permutations(x.type.axes))
        g.add("transpose", x, type=x.type.with_axes(perm))
    elif choice == "slice":
        x = _pick(draw, g, lambda n: n.type.rank > 0)
        if x is not None:
            axis = draw(st.sampled_from(x.type.axes))
            start = draw(st.integers(0, axis.size - 1))
            stop = draw(st.integers(start + 1, axis.size))
            g.add("slice", x, axis=axis.name, start=start, stop=stop)
    elif choice == "concat":
        x = _pick(draw, g, lambda n: n.type.rank > 0)
        if x is not None:
            g.add("concat", x, x, axis=draw(st.sampled_from(x.type.names)))
    elif choice == "cast":
        x = _pick(draw, g, _is_float)
        if x is not None:
            g.add("cast", x, type=x.type.with_dtype(draw(st.sampled_from(FLOAT_DTYPES + [ir.I8, ir.I32]))))
    elif choice == "const":
        dtype = draw(st.sampled_from(FLOAT_DTYPES))
        axes = _axes(draw)
        if draw(st.booleans()):
            g.add("const", type=ir.TensorType(dtype, axes), value=draw(FINITE))
        else:
            n = math.prod(a.size for a in axes)
            values = draw(st.lists(FINITE | st.integers(-100, 100), min_size=n, max_size=n))
            g.add("const", type=ir.TensorType(dtype, axes), values=values)
    elif choice == "iota":
        axes = _axes(draw, min_size=1)
        g.add("iota", type=ir.TensorType(ir.I32, axes), axis=draw(st.sampled_from(axes)).name)
    elif choice == "gather":
        table = _pick(draw, g, lambda n: n.type.rank > 0)
        index = _pick(draw, g, lambda n: n.kind == "iota")
        if table is not None and index is not None:
            axis = draw(st.sampled_from(table.type.axes))
            if index.type.size(index.attrs["axis"]) <= axis.size:  # every index value in range
                # The index's axes may collide with the table's: not every pair fits.
                with contextlib.suppress(ir.VerifyError):
                    g.add("gather", table, index, axis=axis.name)
    elif choice == "where":
        cond = _pick(draw, g, lambda n: n.type.dtype == ir.BOOL)
        x = _pick(draw, g, lambda n: _is_float(n) and cond is not None and _fits(cond, n))
        if cond is not None and x is not None:
            y = _pick(draw, g, lambda n: n.type.dtype == x.type.dtype and _fits(cond, x, n))
            g.add("where", cond, x, y)


@st.composite
def graphs(draw, max_ops: int = 12) -> ir.Graph:
    g = ir.Graph(draw(st.sampled_from(["g", "layer0", "llama-3.1-8b.prefill", "my graph"])))
    for i in range(draw(st.integers(1, 3))):
        g.input(f"in{i}.{draw(NAMES)}", ir.TensorType(draw(st.sampled_from(FLOAT_DTYPES)), _axes(draw)))
    for _ in range(draw(st.integers(0, max_ops))):
        _step(draw, g)
    outs = draw(st.lists(st.sampled_from([n.name for n in g.nodes]), min_size=1, max_size=3, unique=True))
    g.set_outputs(*outs)
    return g
