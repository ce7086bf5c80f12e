"""DeepSeek Sparse Attention's lightning indexer as IR (config.Dsa): which keys each query attends to.

Per layer: index queries [B, S, Hi, K] = q_resid W_q (q_resid: MLA's normed q LoRA), one index key
per token [B, S, K] = LayerNorm(x W_k), RoPE on their first qk_rope_head_dim dims; the score of key
t for query s is sum_h w[s, h] relu(q[s, h] . k[t] / sqrt(K)), w = x W_w / sqrt(Hi), computed for
every visible key (einsums over all of them: the indexer's cost grows with the context), masked as
attention is; the `topk` best keys (a `topk`, as MoE routing picks experts) are the only ones the
attention reads (mla.selected gathers their latent rows). A query with fewer visible keys than
`topk` also picks masked ones: `visible` says which picks attention keeps.

The index keys are cached ([B, P, K], output `l{i}.index_cache`) so decode scores the new token
against every earlier one. A `shared` layer (GLM-5) runs no indexer and reuses the selection of the
last layer before it that does. The indexer is whole on every chip (tensor parallelism splits the
attention's heads, not the indexer's).
"""

from __future__ import annotations

from ir import F32, Axis, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.core import GraphBuilder
from tcp_compiler.frontend.builder.kv_cache import cache_slot, prefill_cache
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.positions import rotate_shared
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Layer

K_NORM_EPS = 1e-6  # transformers builds the indexer's k_norm LayerNorm with eps 1e-6


def select(b: GraphBuilder, i: int, layer: Layer, x: Node, q_resid: Node, pos: Node, mask: Node,
           past: int | None) -> tuple[Node, Node, list[Node]]:  # fmt: skip
    """Layer i's picks: (key index [B, Sq, Sk=picked] into the cache axis P, whether each pick is
    visible [.., Sq, Sk], the index key cache as a list: empty on a shared layer)."""
    dsa = b.cfg.dsa
    assert dsa is not None
    if i in dsa.shared:
        return (*_reused(b, i), [])
    pre = f"model.layers.{i}.self_attn.indexer"
    Hi, K, D, R = dsa.heads, dsa.head_dim, b.cfg.hidden, b.cfg.rotary
    r = q_resid.type.size("Q")
    q = linear(b, q_resid, f"{pre}.wq_b.weight", {"Hi": Hi, "K": K, "Q": r}, ["Q"], ["B", "S", "Hi", "K"],
               "index_q")  # fmt: skip
    q = _rotated(b, q, layer, pos, "B S Hi", R, "index_q")
    k = linear(b, x, f"{pre}.wk.weight", {"K": K, "D": D}, ["D"], ["B", "S", "K"], "index_k")
    k = norm(b, k, "K", f"{pre}.k_norm", "index_k_norm", "layer", K_NORM_EPS)
    k = b.to(_rotated(b, k, layer, pos, "B S", R, "index_k"), b.p.kv)
    keys, cache = _keys(b, k, pos, past)
    g, B, S = b.g, b.batch, b.seq
    q = g.add(
        "reshape",
        b.to(q, b.p.kv),
        name=b.name("index_q_rows"),
        type=TensorType.of(b.p.kv, B=B, Sq=S, Hi=Hi, K=K),
    )
    scores = b.einsum(q, keys, name=b.name("index_scores"), eq="B Sq Hi K, B Sk K -> B Sq Hi Sk")
    scores = g.add("mul", scores, b.const(float(K) ** -0.5), name=b.name("index_scores.scaled"))
    scores = g.add("relu", scores, name=b.name("index_scores.relu"))
    w = linear(b, x, f"{pre}.weights_proj.weight", {"Hi": Hi, "D": D}, ["D"], ["B", "S", "Hi"], "index_w")
    w = g.add("reshape", w, name=b.name("index_w_rows"), type=TensorType.of(F32, B=B, Sq=S, Hi=Hi))
    w = g.add("mul", w, b.const(float(Hi) ** -0.5), name=b.name("index_w.scaled"))
    total = b.einsum(
        b.to(scores, b.p.kv), b.to(w, b.p.kv), name=b.name("index"), eq="B Sq Hi Sk, B Sq Hi -> B Sq Sk"
    )
    masked = g.add("where", mask, total, b.const(-float("inf")), name=b.name("index.masked"))
    if masked.type != total.type:  # a padded prefill's mask [Sk, B, Sq] leads the where's axis order
        masked = g.add("transpose", masked, name=b.name("index.masked_rows"), type=total.type)
    total = masked
    keys_seen = total.type.size("Sk")
    picked = g.add(
        "topk", total, name=b.name("index.topk"), axis="Sk", k=min(dsa.topk, keys_seen), new_axis="Sk"
    )
    return picked, _visible(b, mask, picked), [cache]


def _rotated(b: GraphBuilder, x: Node, layer: Layer, pos: Node, lead: str, rotary: int, label: str) -> Node:
    """x [lead..., K] with RoPE on its first `rotary` dims, in the indexer's pairing (Dsa.interleave)."""
    g, K = b.g, x.type.size("K")
    part = g.add("slice", x, name=b.name(f"{label}.rotary"), axis="K", start=0, stop=rotary)
    turned = rotate_shared(b, part, layer, pos, lead, label, interleave=b.cfg.dsa.interleave)
    if rotary == K:
        return turned
    rest = g.add("slice", x, name=b.name(f"{label}.pass"), axis="K", start=rotary, stop=K)
    return g.add("concat", turned, rest, name=b.name(f"{label}.positioned"), axis="K")


def _keys(b: GraphBuilder, k: Node, pos: Node, past: int | None) -> tuple[Node, Node]:
    """(every key the queries score, [B, Sk, K]; the index key cache decode continues from)."""
    g, B, K = b.g, b.batch, k.type.size("K")
    if past is None:
        cache = prefill_cache(b, k, "index_cache", None)
        keys = b.seq
    else:
        cache_in = g.input(b.name("index_cache_in"), TensorType.of(b.p.kv, B=B, P=past, K=K))
        cache = g.add("scatter", cache_in, cache_slot(b, pos, None), k, name=b.name("index_cache"), axis="P")
        keys = past
    rows = g.add("reshape", cache, name=b.name("index_keys"), type=TensorType.of(b.p.kv, B=B, Sk=keys, K=K))
    return rows, cache


def _visible(b: GraphBuilder, mask: Node, picked: Node) -> Node:
    """The mask at each pick: [.., Sq, Sk=picked] from the mask over [.., Sq, Sk=every key]."""
    g = b.g
    rows = mask.type.with_axes(Axis("P", a.size) if a.name == "Sk" else a for a in mask.type.axes)
    table = g.add("reshape", mask, name=b.name("index.mask_rows"), type=rows)
    return g.add("gather", table, picked, name=b.name("index.visible"), axis="P")


def _reused(b: GraphBuilder, i: int) -> tuple[Node, Node]:
    """A shared layer's picks: those of the last layer before it that runs its indexer."""
    dsa = b.cfg.dsa
    source = max(j for j in range(i) if j not in dsa.shared)
    name = f"l{source}.index.topk"
    if name not in b.g:
        raise FrontendError(
            f"layer {i} reuses layer {source}'s sparse-attention selection, which this graph (a pipeline "
            "stage) does not compute"
        )
    return b.g[name], b.g[f"l{source}.index.visible"]
