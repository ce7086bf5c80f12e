"""Attention masks as IR: causal, sliding-window and key-padding, built once per window size."""

from __future__ import annotations

from collections.abc import Callable

from ir import I32, DType, Graph, Node, TensorType

Const = Callable[[float | int, DType], Node]


class PrefillMasks:
    """Causal (and sliding-window, and key-padding) masks over [Sq, Sk], built once per window."""

    def __init__(self, g: Graph, const: Const, seq: int, lengths: Node | None) -> None:
        self.g, self.const, self.seq, self.lengths = g, const, seq, lengths
        self.cache: dict[int | None, Node] = {}

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

    def __call__(self, window: int | None) -> Node:
        if window in self.cache:
            return self.cache[window]
        g, s = self.g, self.seq
        grid = TensorType.of(I32, Sq=s, Sk=s)
        if not self.cache:
            g.add("iota", name="mask.i", type=grid, axis="Sq")
            g.add("iota", name="mask.j", type=grid, axis="Sk")
        mask = g.add("le", "mask.j", "mask.i", name=f"mask.causal{_suffix(window)}")
        if window is not None:
            start = g.add("sub", "mask.i", self.const(window, I32), name=f"mask.start{_suffix(window)}")
            inside = g.add("gt", "mask.j", start, name=f"mask.window{_suffix(window)}")
            mask = g.add("and", mask, inside, name=f"mask.sliding{_suffix(window)}")
        if self.lengths is not None:
            mask = g.add("and", mask, self.valid(), name=f"mask{_suffix(window)}")
        self.cache[window] = mask
        return mask


class DecodeMasks:
    """Key j is visible to the new token at position pos[b] when j <= pos[b] (and pos[b] - j < W)."""

    def __init__(self, g: Graph, const: Const, positions: int, pos: Node) -> None:
        self.g, self.const, self.positions, self.pos = g, const, positions, pos
        self.cache: dict[int | None, Node] = {}

    def __call__(self, window: int | None) -> Node:
        if window in self.cache:
            return self.cache[window]
        g = self.g
        if not self.cache:
            g.add("iota", name="mask.j", type=TensorType.of(I32, Sk=self.positions), axis="Sk")
        mask = g.add("le", "mask.j", self.pos, name=f"mask.causal{_suffix(window)}")
        if window is not None:
            start = g.add("sub", self.pos, self.const(window, I32), name=f"mask.start{_suffix(window)}")
            inside = g.add("gt", "mask.j", start, name=f"mask.window{_suffix(window)}")
            mask = g.add("and", mask, inside, name=f"mask.sliding{_suffix(window)}")
        self.cache[window] = mask
        return mask


def _suffix(window: int | None) -> str:
    return "" if window is None else f".w{window}"
