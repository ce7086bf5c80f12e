"""The KV cache as IR: where decode writes a position, and what cache a prefill hands to decode.

A layer's cache axis is P (keys Sk); a sliding window of W tokens keeps a ring of at most W slots
on its own axes (Pw{W}, Skw{W}) so it stops growing with the context (GraphBuilder.kv_axis_names).
"""

from __future__ import annotations

from ir import I32, Axis, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder


def cache_slot(b: GraphBuilder, pos: Node, window: int | None) -> Node:
    """[B, S=1]: where decode writes position `pos`: its own slot, or pos mod W in a ring."""
    g = b.g
    name = "slot" if window is None else f"slot.w{window}"
    if name not in g:
        where = pos if window is None else g.add("mod", pos, b.const(window, I32), name=f"{name}.ring")
        g.add("reshape", where, name=name, type=TensorType.of(I32, B=b.batch, S=1))
    return g[name]


def prefill_cache(b: GraphBuilder, x: Node, label: str, window: int | None) -> Node:
    """The cache a prefill hands to decode (the value of role `label`): every position, or for a
    window of W < S tokens the ring decode continues: slot s holds the last position p < length
    with p = s mod W."""
    g, S = b.g, b.seq
    if b.packed:  # each document's cache position by position: no decode continues a packed row
        window = None
    axis, _ = b.kv_axis_names(window)
    if window is None or window >= S:
        return g.add("reshape", x, name=b.name(label), type=x.type.with_axes(
            Axis(axis, a.size) if a.name == "S" else a for a in x.type.axes))  # fmt: skip
    return g.add("gather", x, _ring_positions(b, window), name=b.name(label), axis="S")


def _ring_positions(b: GraphBuilder, window: int) -> Node:
    """[(B,) Pw]: the position each ring slot holds after the prompt: the last position p
    before the sequence's length with p mod W = slot (0 for a slot no position reached)."""
    g, tag = b.g, f"ring.w{window}"
    if tag not in g:
        last = (g.add("sub", "lengths", b.const(1, I32), name=f"{tag}.last") if "lengths" in g
                else b.const(b.seq - 1, I32))  # fmt: skip
        slots = g.add("iota", name=f"{tag}.slot", type=TensorType.of(I32, **{f"Pw{window}": window}),
                      axis=f"Pw{window}")  # fmt: skip
        back = g.add("mod", g.add("sub", last, slots, name=f"{tag}.behind"), b.const(window, I32),
                     name=f"{tag}.back")  # fmt: skip
        at = g.add("sub", last, back, name=f"{tag}.at")
        g.add("max", at, b.const(0, I32), name=tag)
    return g[tag]
