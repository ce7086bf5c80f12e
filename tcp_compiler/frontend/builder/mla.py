"""Multi-head latent attention (DeepSeek-V2/V3) as IR: one chip's heads of it.

Per token the cache keeps the compressed latent c = RMSNorm(x W_dkv) [C = kv_lora_rank] and one
rotary key k_r = RoPE(x W_kr) [qk_rope_head_dim] that every head shares: graph outputs
`l{i}.latent_cache` [B, P, C] and `l{i}.rope_cache` [B, P, K], not per-head K and V. That is
MLA's point, and what capacity, KV bytes per token and serving blocks count (they read the graph's
KV outputs). Head h's key is [c W_uk[h]; k_r] and its value c W_uv[h], W_uk and W_uv being the key
and value rows of kv_b_proj.

One form per phase, both equal to transformers' DeepseekV3Attention (which always expands):
- prefill expands, as real prefill kernels do: per-head keys and values from the latent, and the
  scores one einsum over each head's [nope; rope] dims (the shared rope key broadcast over heads);
- decode absorbs W_uk into the query (q_nope W_uk[h]: a C-wide query per head) and W_uv after
  attention, so attention reads only the latent cache: scores = q_abs . c + q_rope . k_r, a
  multi-query attention whose one KV "head" all heads read (Hkv = 1, G = heads).

Tensor parallel: heads split over chips (q_b_proj / q_proj and kv_b_proj rows, o_proj columns);
the low-rank down projections, their norms and the latent cache are whole on every chip, as in
real MLA tensor parallelism.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ir import F32, Node, TensorType
from tcp_compiler.frontend.builder import dsa
from tcp_compiler.frontend.builder.core import Cut, GraphBuilder, Weight
from tcp_compiler.frontend.builder.kv_cache import cache_slot, prefill_cache
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.positions import rotate_shared
from tcp_compiler.frontend.builder.weights import apply, linear, weight
from tcp_compiler.frontend.config import Layer, Mla

LOW_RANK_EPS = 1e-6  # transformers builds q_a_layernorm and kv_a_layernorm with its default eps


def attention(b: GraphBuilder, i: int, layer: Layer, x: Node, pos: Node, masks, past: int | None):
    """(o_proj's partial sums [B, S, D] over this chip's heads, latent cache, rope cache, and with
    sparse attention (config.Dsa) the index key cache where the layer runs its indexer)."""
    cfg, sh = b.cfg, b.sh
    mla = cfg.mla
    assert mla is not None
    pre = f"model.layers.{i}.self_attn"
    q_nope, q_rope, q_resid = _queries(b, layer, x, pos, pre, mla)
    kv_a, C, R, D = f"{pre}.kv_a_proj_with_mqa.weight", mla.kv_lora_rank, mla.rope_dim, ("D", cfg.hidden)
    latent = _rows(b, x, kv_a, "latent", None, (0, C), C + R, D, ["B", "S", "C"], "kv_a")
    latent = norm(b, latent, "C", f"{pre}.kv_a_layernorm", "kv_a_norm", "rms", LOW_RANK_EPS)
    latent = b.to(latent, b.p.kv)
    k_rope = _rows(b, x, kv_a, "rope", None, (C, C + R), C + R, D, ["B", "S", "K"], "k_r")
    k_rope = b.to(rotate_shared(b, k_rope, layer, pos, "B S", "k"), b.p.kv)
    mask = masks(None)
    index_cache: list[Node] = []
    if cfg.dsa is not None:
        picked, visible, index_cache = dsa.select(b, i, layer, x, q_resid, pos, mask, past)
        out, latent_cache, rope_cache = _selected(b, q_nope, q_rope, latent, k_rope, picked, visible, pos,
                                                  past, pre, mla)  # fmt: skip
    elif past is None:
        out = _expanded(b, q_nope, q_rope, latent, k_rope, mask, pre, mla)
        latent_cache, rope_cache = _caches(b, latent, k_rope, pos, None, mla)
    else:
        absorbed = _absorbed(b, q_nope, q_rope, latent, k_rope, mask, pos, past, pre, mla)
        out, latent_cache, rope_cache = absorbed
    o = linear(b, out, f"{pre}.o_proj.weight", {"D": cfg.hidden, "H": sh.heads, "K": mla.v_dim}, ["H", "K"],
                 ["B", "S", "D"], "o", sh.row)  # fmt: skip
    return (o, latent_cache, rope_cache, *index_cache)


def _queries(
    b: GraphBuilder, layer: Layer, x: Node, pos: Node, pre: str, mla: Mla
) -> tuple[Node, Node, Node]:
    """This chip's heads' queries: nope part [B, H, S, K] and rotated rope part [B, H, S, K]; and
    what q_b_proj (or q_proj) reads: the normed q LoRA [B, S, Q] (or x)."""
    cfg, sh = b.cfg, b.sh
    if mla.q_lora_rank is None:
        source, inner = f"{pre}.q_proj.weight", ("D", cfg.hidden)
    else:
        r = mla.q_lora_rank
        a = linear(b, x, f"{pre}.q_a_proj.weight", {"Q": r, "D": cfg.hidden}, ["D"], ["B", "S", "Q"],
                     "q_a")  # fmt: skip
        x = norm(b, a, "Q", f"{pre}.q_a_layernorm", "q_a_norm", "rms", LOW_RANK_EPS)
        source, inner = f"{pre}.q_b_proj.weight", ("Q", r)
    per = mla.nope_dim + mla.rope_dim
    nope = _rows(b, x, source, "nope", sh.heads, (0, mla.nope_dim), per, inner, ["B", "H", "S", "K"],
                 "q_nope", sh.column)  # fmt: skip
    rope = _rows(b, x, source, "rope", sh.heads, (mla.nope_dim, per), per, inner, ["B", "S", "H", "K"],
                 "q_r", sh.column)  # fmt: skip
    return nope, rotate_shared(b, rope, layer, pos, "B H S", "q"), x


def _expanded(b: GraphBuilder, q_nope, q_rope, latent, k_rope, mask, pre: str, mla: Mla) -> Node:
    """Prefill: per-head keys [c W_uk; k_r] and values c W_uv; [B, H, S, K=v_dim]."""
    g, sh, p = b.g, b.sh, b.p
    B, S, H = b.batch, b.seq, sh.heads
    kv_b, per, C = f"{pre}.kv_b_proj.weight", mla.nope_dim + mla.v_dim, mla.kv_lora_rank
    k_nope = _rows(b, latent, kv_b, "key", H, (0, mla.nope_dim), per, ("C", C), ["B", "H", "S", "K"],
                   "k_nope", sh.column)  # fmt: skip
    v = _rows(b, latent, kv_b, "value", H, (mla.nope_dim, per), per, ("C", C), ["B", "H", "S", "K"],
              "v", sh.column)  # fmt: skip
    heads = "mla.heads"  # a free splat: broadcasts the shared rope key over this chip's heads
    if heads not in g:
        g.add("const", name=heads, type=TensorType.of(F32, B=B, H=H, S=S), value=0.0)
    k_rope = g.add("add", g[heads], b.to(k_rope, F32), name=b.name("k_r_heads"))
    keys = g.add("concat", k_nope, k_rope, name=b.name("k_cat"), axis="K")
    q = g.add("concat", q_nope, q_rope, name=b.name("q_cat"), axis="K")
    K = keys.type.size("K")
    q = g.add("reshape", q, name=b.name("q_heads"), type=TensorType.of(F32, B=B, Hkv=H, G=1, Sq=S, K=K))
    keys = g.add("reshape", b.to(keys, p.kv), name=b.name("keys"),
                 type=TensorType.of(p.kv, B=B, Hkv=H, Sk=S, K=K))  # fmt: skip
    values = g.add("reshape", b.to(v, p.kv), name=b.name("values"),
                   type=TensorType.of(p.kv, B=B, Hkv=H, Sk=S, K=mla.v_dim))  # fmt: skip
    s = b.einsum(b.to(q, p.kv), keys, name=b.name("scores"), eq="B Hkv G Sq K, B Hkv Sk K -> B Hkv G Sq Sk")
    out = _softmax_values(b, s, values, mask)
    return g.add("reshape", b.to(out, F32), name=b.name("attn_heads"),
                 type=TensorType.of(F32, B=B, H=H, S=S, K=mla.v_dim))  # fmt: skip


def _caches(
    b: GraphBuilder, latent: Node, k_rope: Node, pos: Node, past: int | None, mla: Mla
) -> tuple[Node, Node]:
    """The latent and rope key caches [B, P, ..]: the prompt's (prefill), or the caches in with
    this token written at its slot (decode)."""
    if past is None:
        return prefill_cache(b, latent, "latent_cache", None), prefill_cache(b, k_rope, "rope_cache", None)
    g, p, B = b.g, b.p, b.batch
    slot = cache_slot(b, pos, None)
    latent_in = g.input(b.name("latent_cache_in"), TensorType.of(p.kv, B=B, P=past, C=mla.kv_lora_rank))
    rope_in = g.input(b.name("rope_cache_in"), TensorType.of(p.kv, B=B, P=past, K=mla.rope_dim))
    latent_cache = g.add("scatter", latent_in, slot, latent, name=b.name("latent_cache"), axis="P")
    return latent_cache, g.add("scatter", rope_in, slot, k_rope, name=b.name("rope_cache"), axis="P")


def _selected(
    b: GraphBuilder,
    q_nope,
    q_rope,
    latent,
    k_rope,
    picked,
    visible,
    pos,
    past: int | None,
    pre: str,
    mla: Mla,
):
    """Sparse attention (both phases): the absorbed form of decode over only the latent and rope
    rows each query picked (dsa.select): each query's own [Sk=picked] keys are a gather from the
    caches, so attention reads and multiplies picked x C per query and head, not the context."""
    g = b.g
    latent_cache, rope_cache = _caches(b, latent, k_rope, pos, past, mla)
    kv_b = f"{pre}.kv_b_proj.weight"
    q_abs, q_r = _absorbed_queries(b, q_nope, q_rope, kv_b, mla)
    # [B, Sq, Sk, ..]: no KV head axis, so a query tile's keys are the gather of its rows' picks
    # (online_softmax cuts the index, not a copy of every query's keys)
    keys = g.add("gather", latent_cache, picked, name=b.name("keys"), axis="P")
    k_r = g.add("gather", rope_cache, picked, name=b.name("k_r_keys"), axis="P")
    return _latent_attention(b, q_abs, q_r, keys, k_r, visible, kv_b, mla), latent_cache, rope_cache


def _absorbed(b: GraphBuilder, q_nope, q_rope, latent, k_rope, mask, pos, past: int, pre: str, mla: Mla):
    """Decode: W_uk folded into the query, W_uv applied after attention over the latent cache."""
    g, p = b.g, b.p
    latent_cache, rope_cache = _caches(b, latent, k_rope, pos, past, mla)
    kv_b = f"{pre}.kv_b_proj.weight"
    q_abs, q_r = _absorbed_queries(b, q_nope, q_rope, kv_b, mla)
    cached = {"B": b.batch, "Hkv": 1, "Sk": past}
    keys = g.add(
        "reshape", latent_cache, name=b.name("keys"), type=TensorType.of(p.kv, **cached, C=mla.kv_lora_rank)
    )
    k_r = g.add(
        "reshape", rope_cache, name=b.name("k_r_keys"), type=TensorType.of(p.kv, **cached, K=mla.rope_dim)
    )
    return _latent_attention(b, q_abs, q_r, keys, k_r, mask, kv_b, mla), latent_cache, rope_cache


def _absorbed_queries(b: GraphBuilder, q_nope: Node, q_rope: Node, kv_b: str, mla: Mla) -> tuple[Node, Node]:
    """The queries as one KV head's G = heads query heads: q_nope W_uk [B, 1, H, Sq, C] and the
    rotated rope part [B, 1, H, Sq, K]."""
    g, p = b.g, b.p
    q_abs = apply(b, q_nope, _absorbed_key(b, kv_b, mla), ["B", "H", "S", "C"], "q_abs")
    one_head = {"B": b.batch, "Hkv": 1, "G": b.sh.heads, "Sq": b.seq}
    q_abs = g.add("reshape", b.to(q_abs, p.kv), name=b.name("q_heads"),
                  type=TensorType.of(p.kv, **one_head, C=mla.kv_lora_rank))  # fmt: skip
    q_r = g.add("reshape", b.to(q_rope, p.kv), name=b.name("q_r_heads"),
                type=TensorType.of(p.kv, **one_head, K=mla.rope_dim))  # fmt: skip
    return q_abs, q_r


def _latent_attention(b: GraphBuilder, q_abs, q_r, keys, k_r, mask, kv_b: str, mla: Mla) -> Node:
    """Attention of the absorbed queries over latent keys [B, 1, Sk, C] (every query's the same
    cache) or [B, Sq, Sk, C] (each query's own picks) and their rope keys, then W_uv: [B, H, S, K=v_dim]."""
    g, sh = b.g, b.sh
    H, C, per = sh.heads, mla.kv_lora_rank, mla.nope_dim + mla.v_dim
    rows = " ".join(keys.type.names[:-1])
    s = g.add(
        "add",
        b.einsum(q_abs, keys, name=b.name("scores"), eq=f"B Hkv G Sq C, {rows} C -> B Hkv G Sq Sk"),
        b.einsum(q_r, k_r, name=b.name("scores_r"), eq=f"B Hkv G Sq K, {rows} K -> B Hkv G Sq Sk"),
        name=b.name("scores_sum"),
    )
    out = g.add("reshape", b.to(_softmax_values(b, s, keys, mask), F32), name=b.name("attn_latent"),
                type=TensorType.of(F32, B=b.batch, H=H, S=b.seq, C=C))  # fmt: skip
    return _rows(b, out, kv_b, "value", H, (mla.nope_dim, per), per, ("C", C), ["B", "H", "S", "K"],
                 "v_up", sh.column)  # fmt: skip


def _softmax_values(b: GraphBuilder, scores: Node, values: Node, mask: Node) -> Node:
    """softmax(scores * scale, masked over Sk) . values, in the decomposed form the online-softmax
    rewrite recognises (tcp_compiler.passes.online_softmax)."""
    g = b.g
    s = g.add("mul", b.to(scores, F32), b.const(b.cfg.scale), name=b.name("scaled"))
    s = g.add("where", mask, s, b.const(-float("inf")), name=b.name("masked"))
    top = g.add("reduce", s, name=b.name("max"), op="max", axes=["Sk"])
    e = g.add("exp", g.add("sub", s, top, name=b.name("shifted")), name=b.name("exp"))
    probs = g.add(
        "div", e, g.add("reduce", e, name=b.name("sum"), op="sum", axes=["Sk"]), name=b.name("probs")
    )
    last = values.type.names[-1]
    eq = f"B Hkv G Sq Sk, {' '.join(values.type.names)} -> B Hkv G Sq {last}"
    return b.einsum(b.to(probs, values.type.dtype), values, name=b.name("attn"), eq=eq)


def _rows(
    b: GraphBuilder,
    x: Node,
    source: str,
    part: str,
    heads: int | None,
    rows: tuple[int, int],
    per: int,
    inner: tuple[str, int],
    out: Sequence[str],
    label: str,
    cut: Cut | None = None,
) -> Node:
    """x times rows [start, stop) of every `per`-row block of the [out, in] weight `source` (each
    head's block when `heads`, cut for this rank, else the one block): one part of a fused
    projection (q's nope and rope dims, kv_b's keys and values, kv_a's latent and rope key)."""
    start, stop = rows
    axes = {**({"H": heads} if heads else {}), out[-1]: stop - start, inner[0]: inner[1]}
    shape = tuple(axes.values())

    def make(get, rank: int) -> np.ndarray:
        w = get(source) if cut is None else cut(get(source), rank)
        return w.reshape(-1, per, inner[1])[:, start:stop].reshape(shape)

    name = f"{source.removesuffix('.weight')}.{part}.weight"
    return apply(b, x, weight(b, name, axes, [inner[0]], (source,), make), out, label)


def _absorbed_key(b: GraphBuilder, source: str, mla: Mla) -> Weight:
    """W_uk as decode's absorption reads it, [H, C, K]: the key rows of kv_b_proj per head,
    transposed so the contracted nope dims are the trailing (quantisation group) axis."""
    H, C, Kn, per = b.sh.heads, mla.kv_lora_rank, mla.nope_dim, mla.nope_dim + mla.v_dim
    cut = b.sh.column

    def make(get, rank: int) -> np.ndarray:
        w = cut(get(source), rank).reshape(H, per, C)[:, :Kn]
        return np.ascontiguousarray(w.transpose(0, 2, 1))

    name = f"{source.removesuffix('.weight')}.key_absorbed.weight"
    return weight(b, name, {"H": H, "C": C, "K": Kn}, ["K"], (source,), make)
