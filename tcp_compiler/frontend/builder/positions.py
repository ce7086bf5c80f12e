"""Positions as IR: RoPE (rotate_half, partial and interleaved), learned and sinusoidal absolute
embeddings, ALiBi's bias and Llama 4's per-position query temperature.

RoPE is a gather from a [P, Kp, R, T] table of 2x2 rotations plus an einsum (the table's values
come from `config.Rope`); absolute tables are gathered by position; ALiBi's slopes and the
sinusoidal table are computed here.
"""

from __future__ import annotations

import math

import numpy as np

from ir import F32, I32, Axis, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.core import Binding, GraphBuilder
from tcp_compiler.frontend.config import Layer, ModelConfig


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's per-head slopes (Press et al.): a geometric sequence from 2^(-8/n) for the largest
    power of two n <= heads, then every other term of the sequence for 2n for the heads left over."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    extra = [2.0 ** (-8.0 * (i + 1) / (2 * n)) for i in range(0, 2 * (heads - n), 2)]
    return np.array(slopes + extra, dtype=np.float32)


def sinusoidal_table(positions: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al.'s [positions, dim] embedding: sin in even columns, cos in odd, wavelengths
    from 2 pi to base * 2 pi."""
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even width, got {dim}")
    angle = np.arange(positions, dtype=np.float64)[:, None] / base ** (np.arange(0, dim, 2) / dim)[None, :]
    table = np.empty((positions, dim), dtype=np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def check_positions(cfg: ModelConfig, positions: int) -> None:
    """The one position limit, for every command: a model with learned positions has a table of
    max_position_embeddings rows and cannot run past it (transformers fails indexing it). Every
    other scheme is computed for any position, as transformers computes it (RoPE of any type,
    ALiBi, sinusoidal, none); `past_context` says when that passes the context it was made for."""
    if cfg.positions.kind == "learned" and positions > cfg.max_positions:
        raise FrontendError(
            f"{cfg.name}: {positions} positions exceed its {cfg.max_positions} learned position "
            f"embeddings (max_position_embeddings)"
        )


def past_context(cfg: ModelConfig, positions: int) -> str | None:
    """A one-line note when `positions` pass the context the model's positions are made for, else
    None. RoPE (default, linear, llama3, longrope) and sinusoidal tables are made for
    max_position_embeddings, yarn for its original context times its factor when that is longer;
    dynamic NTK rescales itself for any length, and ALiBi and models without positions are meant to
    extrapolate: no note. Learned positions never get here (`check_positions` refuses them)."""
    if not cfg.max_positions or cfg.positions.kind in ("alibi", "none", "learned"):
        return None
    ropes = [layer.rope for layer in cfg.layers if layer.rope is not None]
    if any(rope.kind == "dynamic" for rope in ropes):
        return None
    yarn = [int(rope.original_max_positions * rope.factor) for rope in ropes if rope.kind == "yarn"]
    context = max([cfg.max_positions, *yarn])
    if positions <= context:
        return None
    return (
        f"note: {cfg.name} uses {positions:,} positions, past the {context:,} its {cfg.positions.kind} "
        f"positions are made for (max_position_embeddings); run as transformers runs them"
    )


def absolute(b: GraphBuilder, x: Node, pos: Node) -> Node:
    """x plus the absolute position embedding (learned or sinusoidal) of each position."""
    table = _position_table(b)
    where = b.g.add("gather", table, pos, name="embed.position", axis=table.type.names[0])
    return b.g.add("add", x, b.to(where, F32), name="embed.positioned")


def _position_table(b: GraphBuilder) -> Node:
    """[P, D] absolute position embeddings: the checkpoint's (learned) or computed (sinusoidal)."""
    cfg, positions = b.cfg, b.positions
    if cfg.positions.kind == "sinusoidal":
        axes = {"P": positions, "D": cfg.hidden}
        dim = cfg.hidden
        return b.param(
            "sinusoidal.table",
            b.p.table,
            axes,
            Binding((), lambda get, rank: sinusoidal_table(positions, dim)),
        )
    check_positions(cfg, positions)
    axes = {"Pos": cfg.max_positions, "D": cfg.hidden}  # not P: that is the KV length
    return b.tensor("model.embed_positions.weight", b.p.table, axes)


def rope_table(b: GraphBuilder, layer: Layer, pos: Node) -> Node:
    """The rotations for this graph's positions, gathered once per RoPE variant."""
    name = f"{layer.rope_name}.rot"
    if name not in b.g:
        k = b.cfg.rotary
        rope, positions = layer.rope, b.positions
        assert rope is not None
        axes = {"P": positions, "Kp": k // 2, "R": 2, "T": 2}
        table = b.param(
            f"{layer.rope_name}.table", b.p.kv, axes, Binding((), lambda get, rank: rope.table(k, positions))
        )
        b.g.add("gather", table, pos, name=name, axis="P")
    return b.g[name]


def temperature(b: GraphBuilder, layer: Layer, pos: Node) -> Node:
    """Llama 4's query scale at each position (config.Temperature), gathered once per graph from a
    table computed as transformers computes it."""
    name = "attn_temperature"
    if name not in b.g:
        tuning, positions = layer.temperature, b.positions
        assert tuning is not None
        table = b.param(
            f"{name}.table", F32, {"P": positions}, Binding((), lambda get, rank: tuning.table(positions))
        )
        b.g.add("gather", table, pos, name=name, axis="P")
    return b.g[name]


def position_heads(b: GraphBuilder, x: Node, heads: str, layer: Layer, pos: Node, label: str) -> Node:
    """Q or K with RoPE on its first `rotary` dims -> [B, heads, S, ...]. x comes as [B, S, heads, K]
    when RoPE rotates whole heads, else already as [B, heads, S, K] (see attention)."""
    cfg, g = b.cfg, b.g
    rd, k = cfg.rotary, cfg.head_dim
    if rd == 0 or layer.rope is None:
        return x
    rot = rope_table(b, layer, pos)
    if rd == k:
        return _rotate(b, x, heads, rot, label)
    part = g.add("slice", x, name=b.name(f"{label}.rotary"), axis="K", start=0, stop=rd)
    rest = g.add("slice", x, name=b.name(f"{label}.pass"), axis="K", start=rd, stop=k)
    rotated = g.add(
        "reshape", _rotate(b, part, heads, rot, label), name=b.name(f"{label}.rot_heads"), type=part.type
    )
    return g.add("concat", rotated, rest, name=b.name(f"{label}.positioned"), axis="K")


def _rotate(b: GraphBuilder, x: Node, heads: str, rot: Node, label: str) -> Node:
    """x [B, S, heads, K] (any order) -> [B, heads, S, T, Kp] rotated (T, Kp: the halves of K again).
    Interleaved pairs come out as the rotated evens then the rotated odds: the same permutation of
    queries and keys leaves their scores as they are."""
    kp = x.type.size("K") // 2
    pairs = [Axis("Kp", kp), Axis("R", 2)] if b.cfg.positions.interleave else [Axis("R", 2), Axis("Kp", kp)]
    axes = [a for a in x.type.axes if a.name != "K"] + pairs
    pairs = b.g.add("reshape", x, name=b.name(f"{label}.pairs"), type=x.type.with_axes(axes))
    pairs = b.to(pairs, rot.type.dtype)  # the contraction engine takes bf16, not f32
    eq = f"{' '.join(pairs.type.names)}, {' '.join(rot.type.names)} -> B {heads} S T Kp"
    return b.einsum(pairs, rot, name=b.name(f"{label}.rot"), eq=eq)


def rotate_shared(
    b: GraphBuilder, x: Node, layer: Layer, pos: Node, lead: str, label: str, interleave: bool | None = None
) -> Node:
    """RoPE on x's K axis -> [lead..., K] (MLA's rope dims). DeepSeek's rope_interleave pairs
    (x0, x1), (x2, x3), ... and, as transformers does, writes the rotated evens then the rotated
    odds; otherwise x_k pairs with x_k+K/2 (rotate_half). The same permutation on queries and keys
    leaves scores as they are. `interleave`: the pairing where it is not the model's (DeepSeek-V3.2's
    indexer pairs rotate-half)."""
    g = b.g
    rot = rope_table(b, layer, pos)
    kp = x.type.size("K") // 2
    interleave = b.cfg.positions.interleave if interleave is None else interleave
    pairs = [("Kp", kp), ("R", 2)] if interleave else [("R", 2), ("Kp", kp)]
    axes = [a for a in x.type.axes if a.name != "K"]
    split = TensorType.from_pairs(x.type.dtype, [(a.name, a.size) for a in axes] + pairs)
    x = b.to(g.add("reshape", x, name=b.name(f"{label}.pairs"), type=split), rot.type.dtype)
    eq = f"{' '.join(x.type.names)}, {' '.join(rot.type.names)} -> {lead} T Kp"
    y = b.einsum(x, rot, name=b.name(f"{label}.rot"), eq=eq)
    sizes = {**x.type.sizes, "K": 2 * kp}
    return g.add("reshape", y, name=b.name(f"{label}.rotated"),
                 type=TensorType.from_pairs(F32, [(n, sizes[n]) for n in (*lead.split(), "K")]))  # fmt: skip


def alibi(b: GraphBuilder, keys: int, pos: Node) -> Node:
    """ALiBi's bias slope[h] * position of key k, [Hkv, G, Sk] (or [B, Hkv, G, Sk] for packed
    rows, whose positions restart per document); built once, shared by every layer. The
    query's own position would only shift each softmax row by a constant, so it is left out."""
    g = b.g
    if "alibi.bias" in g:
        return g["alibi.bias"]
    sh, heads, scale = b.sh, b.cfg.heads, np.float32(b.cfg.positions.alibi_scale)
    axes = {"Hkv": sh.kv_heads, "G": sh.groups}
    column = sh.column
    slopes = b.param(
        "alibi.slopes",
        F32,
        axes,
        Binding(
            (), lambda get, rank: column(alibi_slopes(heads) * scale, rank).reshape(tuple(axes.values()))
        ),
    )
    if b.packed:
        where = g.add("reshape", pos, name="alibi.k", type=TensorType.of(I32, B=b.batch, Sk=keys))
        where = g.add("cast", where, name="alibi.k.f32", type=where.type.with_dtype(F32))
    else:  # an f32 iota, which stays an iota (a cast of it would fold into a const of fixed length)
        where = g.add("iota", name="alibi.k", type=TensorType.of(F32, Sk=keys), axis="Sk")
    return g.add("mul", slopes, where, name="alibi.bias")
