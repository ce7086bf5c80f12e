"""RWKV's token shift as IR: each mixing reads its input and the input one position before (the
window a decode step carries), mixed per channel, shifted + mix * (x - shifted). RWKV-4 and
RWKV-5 (builder/rwkv.py, builder/rwkv5.py) shift their mixings' inputs and lag their
recurrences' inputs with it."""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder


def shift(b: GraphBuilder, x: Node, label: str, decode: bool) -> tuple[Node, Node]:
    """x one position later along S (the carried window, or zeros, first) and the window the next
    step reads (x's last position, in the KV dtype)."""
    g, seq = b.g, x.type.size("S")
    axes = {n: x.type.size(n) for n in x.type.names if n not in ("B", "S")}
    window_type = TensorType.of(b.p.kv, B=b.batch, S=1, **axes)
    if decode:
        window = b.to(g.input(b.name(f"{label}_in"), window_type), F32)
    else:
        window = g.add("const", name=b.name(f"{label}_zero"), type=window_type.with_dtype(F32), value=0.0)
    joined = g.add("concat", window, x, name=b.name(f"{label}.joined"), axis="S")
    shifted = g.add("slice", joined, name=b.name(f"{label}.prev"), axis="S", start=0, stop=seq)
    last = g.add("slice", joined, name=b.name(f"{label}.last"), axis="S", start=seq, stop=seq + 1)
    return shifted, g.add("cast", last, name=b.name(label), type=last.type.with_dtype(b.p.kv))


def mix(b: GraphBuilder, x: Node, shifted: Node, name: str, label: str, previous: bool = False) -> Node:
    """x * m + shifted * (1 - m) with m the tensor `name`, as shifted + m * (x - shifted); with
    `previous` m weighs the previous token instead (RWKV-6's time_maa_*): x + m * (shifted - x)."""
    g = b.g
    rate = b.to(b.tensor(name, b.p.table, {"D": x.type.size("D")}), F32)
    base, other = (x, shifted) if previous else (shifted, x)
    return blend(b, base, g.add("sub", other, base, name=b.name(f"{label}.step")), rate, label)


def blend(b: GraphBuilder, base: Node, step: Node, rate: Node, label: str) -> Node:
    """base + rate * step: a token-shift mix from its two ends' difference `step`."""
    g = b.g
    return g.add("add", base, g.add("mul", step, rate, name=b.name(f"{label}.mixed")), name=b.name(label))
