"""Attention as IR: this chip's heads of one layer, with its KV cache.

GQA is an einsum that broadcasts the group axis G (no repeated K/V); masks are `where`; softmax is
reduce-max, sub, exp, reduce-sum, div (the form the online-softmax rewrite recognises). Axis
names: H query heads = Hkv x G, K head dim, P cache positions, Sq / Sk query and key positions.
DeepSeek's latent attention is in `mla`.
"""

from __future__ import annotations

import numpy as np

from ir import F32, I32, Axis, Node, TensorType
from tcp_compiler.frontend.builder import mla
from tcp_compiler.frontend.builder.core import Binding, GraphBuilder
from tcp_compiler.frontend.builder.kv_cache import cache_slot, prefill_cache
from tcp_compiler.frontend.builder.norms import heads_norm, norm
from tcp_compiler.frontend.builder.positions import alibi, position_heads, temperature
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Layer


def attention(
    b: GraphBuilder, i: int, layer: Layer, x: Node, pos: Node, masks, past: int | None, reduce: bool = True,
    pre: str | None = None,
):
    """This chip's heads: column-parallel Q/K/V, row-parallel o_proj summed over the chips
    (by the caller when `reduce` is False, as a parallel block sums attention and MLP first);
    returns (output, K cache, V cache). DeepSeek's latent attention in `mla` (per-head K/V
    expanded from the latent in prefill, kv_b_proj absorbed into the query and output in decode)
    returns (output, latent cache, rope key cache), then with sparse attention its index key cache.
    Weights under `pre` (default layer i's self_attn: Zamba2's shared blocks name their own); Q/K/V
    read x's whole width (Zamba2's is 2 x hidden), o_proj gives the hidden width."""
    if b.cfg.mla is not None:
        o, *caches = mla.attention(b, i, layer, x, pos, masks, past)
        return (b.join(o, b.name("o.sum")) if reduce else o), *caches
    cfg, g, p, sh = b.cfg, b.g, b.p, b.sh
    pre = pre or f"model.layers.{i}.self_attn"
    D, H, Hkv, K, G = cfg.hidden, sh.heads, sh.kv_heads, cfg.head_dim, sh.groups
    width = x.type.size("D")
    B, S = b.batch, b.seq
    # Q and K come out as RoPE's rotation reads them; otherwise heads-first, as attention reads them.
    qk = "B S {} K" if cfg.rotary == K and layer.rope is not None else "B {} S K"
    heads = {
        "q": ("H", H, sh.column, qk),
        "k": ("Hkv", Hkv, sh.kv, qk),
        "v": ("Hkv", Hkv, sh.kv, "B {} S K"),
    }
    q, k, v = (
        linear(
            b,
            x,
            f"{pre}.{n}_proj.weight",
            {axis: size, "K": 2 * K if n == "q" and cfg.attention.output_gate else K, "D": width},
            ["D"],
            order.format(axis).split(),
            n,
            part,
            part if cfg.attention.qkv_bias else None,
        )
        for n, (axis, size, part, order) in heads.items()
    )
    k = b.scaled(k, cfg.attention.key_scale, "k_scaled")  # Falcon-H1's key_multiplier: the cache holds it
    gate = None
    if cfg.attention.output_gate:  # Qwen3-Next: each head's q_proj rows are its query, then its gate
        q, gate = _halves(b, q, "q_only"), _halves(b, q, "o_gate", second=True)
    if cfg.attention.qk_norm == "all_heads":
        q = heads_norm(b, q, "H", f"{pre}.q_norm", "q_norm", sh.column)
        k = heads_norm(b, k, "Hkv", f"{pre}.k_norm", "k_norm", sh.kv)
    elif cfg.attention.qk_norm == "per_head":
        q = norm(b, q, "K", f"{pre}.q_norm", "q_norm", kind="rms")
        k = norm(b, k, "K", f"{pre}.k_norm", "k_norm", kind="rms")
    elif cfg.attention.qk_norm == "each_head":
        q = norm(b, q, "K", f"{pre}.q_norm", "q_norm", kind="layer", per=("H", sh.column))
        k = norm(b, k, "K", f"{pre}.k_norm", "k_norm", kind="layer", per=("Hkv", sh.kv))
    q_pos = position_heads(b, q, "H", layer, pos, "q")
    k_pos = position_heads(b, k, "Hkv", layer, pos, "k")
    if cfg.attention.qk_norm in ("l2", "rotated") and layer.qk_norm:
        weighted = cfg.attention.qk_norm == "rotated"
        q_pos = _rotated_norm(b, q_pos, "H", f"{pre}.q_norm" if weighted else None, "q_norm")
        k_pos = _rotated_norm(b, k_pos, "Hkv", f"{pre}.k_norm" if weighted else None, "k_norm")
    if layer.temperature is not None:
        q_pos = g.add("mul", q_pos, temperature(b, layer, pos), name=b.name("q_tuned"))
    q5 = g.add(
        "reshape", q_pos, name=b.name("q_heads"), type=TensorType.of(F32, B=B, Hkv=Hkv, G=G, Sq=S, K=K)
    )
    k_new = b.to(
        g.add("reshape", k_pos, name=b.name("k_new"), type=TensorType.of(F32, B=B, Hkv=Hkv, S=S, K=K)), p.kv
    )
    v_new = b.to(v, p.kv)
    window = layer.window  # a sliding window or a chunk: either way a ring of its size
    ring = None if window is None else window.size
    cache_axis, key_axis = b.kv_axis_names(ring)
    if past is None:  # prefill: every key just computed; the cache keeps what decode will read
        keys_type = TensorType.of(p.kv, B=B, Hkv=Hkv, Sk=S, K=K)
        keys = g.add("reshape", k_new, name=b.name("keys"), type=keys_type)
        values = g.add("reshape", v_new, name=b.name("values"), type=keys_type)
        k_cache = prefill_cache(b, k_new, "k_cache", ring)
        v_cache = prefill_cache(b, v_new, "v_cache", ring)
    else:  # decode: write the new position into the cache that came in
        slots = past if ring is None else min(past, ring)
        cache_type = TensorType.of(p.kv, B=B, Hkv=Hkv, K=K).with_axes(
            [Axis("B", B), Axis("Hkv", Hkv), Axis(cache_axis, slots), Axis("K", K)]
        )
        slot = cache_slot(b, pos, ring)
        k_in = g.input(b.name("k_cache_in"), cache_type)
        v_in = g.input(b.name("v_cache_in"), cache_type)
        k_cache = g.add("scatter", k_in, slot, k_new, name=b.name("k_cache"), axis=cache_axis)
        v_cache = g.add("scatter", v_in, slot, v_new, name=b.name("v_cache"), axis=cache_axis)
        keys_type = cache_type.with_axes(
            [Axis("B", B), Axis("Hkv", Hkv), Axis(key_axis, slots), Axis("K", K)]
        )
        keys = g.add("reshape", k_cache, name=b.name("keys"), type=keys_type)
        values = g.add("reshape", v_cache, name=b.name("values"), type=keys_type)
    sparse = layer.block_sparse
    mask = masks(window) if sparse is None else masks.sparse(sparse, _stripes(b, layer))
    out = _attend(b, i, b.to(q5, p.kv), keys, values, mask, pos)
    if gate is not None:
        gate = g.add("sigmoid", gate, name=b.name("o_gate_act"))
        out = g.add("mul", out, gate, name=b.name("gated"))
    o = linear(b, out, f"{pre}.o_proj.weight", {"D": D, "H": H, "K": K}, ["H", "K"], ["B", "S", "D"], "o",
               sh.row, sh.row_bias if cfg.attention.out_bias else None)  # fmt: skip
    return (b.join(o, b.name("o.sum")) if reduce else o), k_cache, v_cache


def _halves(b: GraphBuilder, q: Node, label: str, second: bool = False) -> Node:
    """The first (or second) half of each head's 2 x head_dim q_proj outputs, as [.., K]."""
    K = b.cfg.head_dim
    start = K if second else 0
    return b.g.add("slice", q, name=b.name(label), axis="K", start=start, stop=start + K)


def _rotated_norm(b: GraphBuilder, x: Node, heads: str, prefix: str | None, label: str) -> Node:
    """A q/k RMSNorm over each head's K after RoPE, on the rotated heads viewed as [B, heads, S, K]:
    Llama 4's without a weight (`prefix` None; its RoPE's evens-then-odds order leaves a weightless
    norm as it is), HunYuan's with the weight `{prefix}.weight` (rotate_half keeps K in order)."""
    sizes = x.type.sizes
    whole = TensorType.of(F32, B=b.batch, **{heads: sizes[heads]}, S=b.seq, K=b.cfg.head_dim)
    x = b.g.add("reshape", b.to(x, F32), name=b.name(f"{label}.heads"), type=whole)
    return norm(b, x, "K", prefix, label, kind="rms")


def _attend(b: GraphBuilder, i: int, q: Node, keys: Node, values: Node, mask: Node, pos: Node) -> Node:
    """Softmax(q k^T * scale [+ ALiBi], masked [, beside gpt-oss's sink]) v with K/V broadcast
    over the group axis G.
    The key axis is the keys' third (Sk, or a sliding window's ring of slots)."""
    cfg, g, p = b.cfg, b.g, b.p
    sk = keys.type.names[2]
    s = b.einsum(q, keys, name=b.name("scores"), eq=f"B Hkv G Sq K, B Hkv {sk} K -> B Hkv G Sq {sk}")
    s = g.add("mul", b.to(s, F32), b.const(cfg.scale), name=b.name("scaled"))
    if cfg.positions.kind == "alibi":
        s = g.add("add", s, alibi(b, keys.type.size(sk), pos), name=b.name("biased"))
    if cfg.attention.softcap is not None:
        s = b.softcap(s, cfg.attention.softcap, "capped")
    s = g.add("where", mask, s, b.const(-float("inf")), name=b.name("masked"))
    top = g.add("reduce", s, name=b.name("max"), op="max", axes=[sk])
    sink = _sink(b, i) if cfg.attention.sinks else None
    if sink is not None:  # gpt-oss: one more logit per head, with no value (see _sink)
        top = g.add("max", top, sink, name=b.name("max_sink"))
    e = g.add("exp", g.add("sub", s, top, name=b.name("shifted")), name=b.name("exp"))
    total = g.add("reduce", e, name=b.name("sum"), op="sum", axes=[sk])
    if sink is not None:
        sink_e = g.add("exp", g.add("sub", sink, top, name=b.name("sink_shifted")), name=b.name("sink_exp"))
        total = g.add("add", total, sink_e, name=b.name("sum_sink"))
    probs = g.add("div", e, total, name=b.name("probs"))
    out = b.einsum(
        b.to(probs, p.kv), values, name=b.name("attn"), eq=f"B Hkv G Sq {sk}, B Hkv {sk} K -> B Hkv G Sq K"
    )
    B, S, H, K = b.batch, b.seq, b.sh.heads, cfg.head_dim
    return g.add(
        "reshape", b.to(out, F32), name=b.name("attn_heads"), type=TensorType.of(F32, B=B, H=H, S=S, K=K)
    )


def _stripes(b: GraphBuilder, layer: Layer) -> Node:
    """[Hkv, G] int32: each of this chip's query heads' (offset + 1) x block, where its vertical
    stripes of a block-sparse pattern fall (masks.block_sparse). A chip holds query heads
    rank x H / chips on, Hkv x G in order."""
    pattern, sh = layer.block_sparse, b.sh
    assert pattern is not None

    def make(get, rank: int) -> np.ndarray:
        heads = rank * sh.heads + np.arange(sh.heads)
        shifts = [(pattern.offset(int(h)) + 1) * pattern.block for h in heads]
        return np.array(shifts, np.int32).reshape(sh.kv_heads, sh.groups)

    axes = {"Hkv": sh.kv_heads, "G": sh.groups}
    return b.param(f"stripes.b{pattern.block}.v{pattern.vert_stride}", I32, axes, Binding((), make))


def _sink(b: GraphBuilder, i: int) -> Node:
    """[Hkv, G] f32: layer i's learned sink logit per head (this chip's heads). It joins the
    softmax's max and sum as a key with no value, so each row's weights sum to less than 1."""
    sh = b.sh
    axes = {"Hkv": sh.kv_heads, "G": sh.groups}
    w = b.tensor(f"model.layers.{i}.self_attn.sinks", b.p.table, axes, sh.column)
    return b.to(w, F32)
