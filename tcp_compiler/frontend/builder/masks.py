"""Attention masks as IR: causal, sliding-window, chunked and key-padding, built once per window,
and Phi-3-small's block-sparse pattern over the causal one (per query head).

A window (config.Window) is the last W positions (sliding) or the query's own chunk of W
positions from a multiple of W (Llama 4's chunked attention); both keep a ring of W cache slots.
"""

from __future__ import annotations

from collections.abc import Callable

from ir import I32, DType, Graph, Node, TensorType
from tcp_compiler.frontend.config import BlockSparse, Window

Const = Callable[[float | int, DType], Node]


class PrefillMasks:
    """Causal (and windowed, key-padding, same-document) masks over [Sq, Sk], one per window.
    Packed rows (`segment`) give each token's `position` within its document: chunks start at
    multiples of the chunk there, as if each document ran alone."""

    def __init__(
        self,
        g: Graph,
        const: Const,
        seq: int,
        lengths: Node | None,
        segment: Node | None = None,
        position: Node | None = None,
    ) -> None:
        self.g, self.const, self.seq, self.lengths, self.segment = g, const, seq, lengths, segment
        self.position = position
        self.cache: dict[Window | None, Node] = {}

    def same_document(self) -> Node:
        """[B, Sq, Sk]: query and key belong to the same packed document (segment id)."""
        g, seg = self.g, self.segment
        assert seg is not None
        if "mask.document" not in g:
            b = seg.type.axis("B")
            rows = g.add(
                "reshape", seg, name="mask.segment_q", type=TensorType.of(I32, B=b.size, Sq=self.seq)
            )
            cols = g.add(
                "reshape", seg, name="mask.segment_k", type=TensorType.of(I32, B=b.size, Sk=self.seq)
            )
            g.add("eq", rows, cols, name="mask.document")
        return g["mask.document"]

    def valid(self) -> Node:
        """Keys inside each sequence's length, plus the query's own position.

        A padded query row sees itself, so no row is fully masked: that keeps padded positions
        finite (a NaN there would reach real tokens through 0 x NaN in the value einsum).
        """
        g = self.g
        if "mask.valid" not in g:
            keys = g.add("iota", name="mask.k", type=TensorType.of(I32, Sk=self.seq), axis="Sk")
            inside = g.add("lt", keys, self.lengths, name="mask.inside")
            own = g.add("eq", "mask.j", "mask.i", name="mask.own")
            g.add("or", inside, own, name="mask.valid")
        return g["mask.valid"]

    def __call__(self, window: Window | None) -> Node:
        if window in self.cache:
            return self.cache[window]
        g, s, tag = self.g, self.seq, _suffix(window)
        grid = TensorType.of(I32, Sq=s, Sk=s)
        if not self.cache:
            g.add("iota", name="mask.i", type=grid, axis="Sq")
            g.add("iota", name="mask.j", type=grid, axis="Sk")
        mask = g.add("le", "mask.j", "mask.i", name=f"mask.causal{tag}")
        if window is not None and window.chunked:
            mask = g.add("and", mask, self._same_chunk(window.size, tag), name=f"mask.chunked{tag}")
        elif window is not None:
            start = g.add("sub", "mask.i", self.const(window.size, I32), name=f"mask.start{tag}")
            inside = g.add("gt", "mask.j", start, name=f"mask.window{tag}")
            mask = g.add("and", mask, inside, name=f"mask.sliding{tag}")
        if self.lengths is not None:
            mask = g.add("and", mask, self.valid(), name=f"mask{_suffix(window)}")
        if self.segment is not None:
            mask = g.add("and", mask, self.same_document(), name=f"mask.packed{tag}")
        self.cache[window] = mask
        return mask

    def sparse(self, pattern: BlockSparse, heads: Node) -> Node:
        """[Hkv, G, Sq, Sk]: the causal mask cut to `pattern` for each query head (`heads`, see
        `block_sparse`)."""
        causal = self(None)
        return block_sparse(self.g, self.const, causal, self.g["mask.i"], self.g["mask.j"], pattern, heads)

    def _same_chunk(self, size: int, tag: str) -> Node:
        """Key at or after the start of the query's chunk (the last multiple of `size` at or
        before its position): with causality, the keys of its own chunk."""
        g, i, j = self.g, "mask.i", "mask.j"
        if self.position is not None:
            b, pos = self.position.type.size("B"), self.position
            i = g.add("reshape", pos, name=f"mask.position_q{tag}", type=TensorType.of(I32, B=b, Sq=self.seq))
            j = g.add("reshape", pos, name=f"mask.position_k{tag}", type=TensorType.of(I32, B=b, Sk=self.seq))
        into = g.add("mod", i, self.const(size, I32), name=f"mask.into{tag}")
        start = g.add("sub", i, into, name=f"mask.start{tag}")
        return g.add("ge", j, start, name=f"mask.chunk{tag}")


class DecodeMasks:
    """Key j is visible to the new token at position pos[b] when j <= pos[b].

    A sliding window of W tokens keeps its keys in a ring of min(positions, W) slots (axis
    Skw{W}), position p in slot p mod W: slot j holds pos - ((pos - j) mod W), the latest position
    at or before pos that maps to it, which is in the window by construction; it is visible
    unless no position has reached it yet (that position would be negative)."""

    def __init__(self, g: Graph, const: Const, positions: int, pos: Node) -> None:
        self.g, self.const, self.positions, self.pos = g, const, positions, pos
        self.cache: dict[Window | None, Node] = {}

    def __call__(self, window: Window | None) -> Node:
        """A chunk of W keeps its positions in the same ring: the current chunk's positions
        c .. pos (c a multiple of W) sit in slots 0 .. pos mod W, so slot j is visible when
        it is back at most pos mod W positions (the others hold the chunk before)."""
        if window in self.cache:
            return self.cache[window]
        g = self.g
        if window is None:
            g.add("iota", name="mask.j", type=TensorType.of(I32, Sk=self.positions), axis="Sk")
            mask = g.add("le", "mask.j", self.pos, name="mask.causal")
        else:
            axis, tag, size = f"Skw{window.size}", _suffix(window), self.const(window.size, I32)
            slots = TensorType.of(I32, **{axis: min(self.positions, window.size)})
            j = g.add("iota", name=f"mask.j{tag}", type=slots, axis=axis)
            behind = g.add("sub", self.pos, j, name=f"mask.behind{tag}")
            back = g.add("mod", behind, size, name=f"mask.back{tag}")
            reach = g.add("mod", self.pos, size, name=f"mask.into{tag}") if window.chunked else self.pos
            mask = g.add("le", back, reach, name=f"mask.ring{tag}")
        self.cache[window] = mask
        return mask

    def sparse(self, pattern: BlockSparse, heads: Node) -> Node:
        """[B, Hkv, G, Sk]: the new token's causal mask cut to `pattern` for each query head."""
        return block_sparse(self.g, self.const, self(None), self.pos, self.g["mask.j"], pattern, heads)


def block_sparse(g: Graph, const: Const, causal: Node, query: Node, key: Node, pattern: BlockSparse,
                 heads: Node) -> Node:  # fmt: skip
    """`causal` and, per query head, the blocks `pattern` keeps, from the query and key positions.
    In block starts (p - p mod block), never dividing: a key block is near when the query's block
    start is less than `local` blocks past its own, and a vertical stripe when its start plus the
    head's `heads` entry ((offset + 1) x block, [Hkv, G]) is a multiple of vert_stride blocks."""
    name = f"mask.sparse.b{pattern.block}.l{pattern.local}.v{pattern.vert_stride}"
    if name in g:
        return g[name]
    block = const(pattern.block, I32)
    q0 = g.add("sub", query, g.add("mod", query, block, name=f"{name}.q_in"), name=f"{name}.q_block")
    k0 = g.add("sub", key, g.add("mod", key, block, name=f"{name}.k_in"), name=f"{name}.k_block")
    behind = g.add("sub", q0, k0, name=f"{name}.behind")
    near = g.add("lt", behind, const(pattern.local * pattern.block, I32), name=f"{name}.near")
    shifted = g.add("add", k0, heads, name=f"{name}.shifted")
    stripe = g.add("mod", shifted, const(pattern.vert_stride * pattern.block, I32), name=f"{name}.stripe_at")
    vertical = g.add("eq", stripe, const(0, I32), name=f"{name}.vertical")
    kept = g.add("or", near, vertical, name=f"{name}.kept")
    return g.add("and", causal, kept, name=name)


def _suffix(window: Window | None) -> str:
    if window is None:
        return ""
    return f".c{window.size}" if window.chunked else f".w{window.size}"
