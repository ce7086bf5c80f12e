"""Zamba2's shared transformer blocks (ModelConfig.shared) as IR.

A layer with `Layer.shared` = n runs block n mod blocks before its Mamba mixer: RMSNorm of the
hidden state joined to the embeddings [B, S, 2D], attention (heads of 2D / heads, RoPE where the
layer has it) to D, RMSNorm, the gated MLP, then the layer's own [D, D] linear. The block's
weights are params of one name whatever layer reads them, so the graph holds (and counts, and a
checkpoint binds) them once; each use is its own einsums, which fetch them again as any
projection fetches its weight. The use's low-rank adapters (its own) join the shared MLP's
gate and up and, with `attention_adapters`, q, k and v (weights.linear).

Tensor parallelism: the attention and MLP split as any layer's (heads, MLP width); an adapter's
A is whole on every chip and its B cut as its projection's rows; the per-layer linear is whole on
every chip after the MLP's all-reduce, so the block adds no collective of its own. With the
residual stream split by tokens, the norms and the linear run on this chip's tokens and the
attention and MLP gather their normed inputs, as a layer's own blocks do.
"""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.attention import attention
from tcp_compiler.frontend.builder.core import Adapter, GraphBuilder, whole
from tcp_compiler.frontend.builder.ffn import mlp
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Layer


def shared_block(
    b: GraphBuilder, i: int, layer: Layer, h: Node, pos: Node, masks, past: int | None
) -> tuple[Node, list[Node]]:
    """Layer i's use of its shared block on h [B, S, D]: (the linear's output [B, S, D], K and V)."""
    cfg, g, shared = b.cfg, b.g, b.cfg.shared
    assert shared is not None and layer.shared is not None
    if b.embedded is None:
        raise FrontendError(f"{cfg.name}: Zamba2's shared blocks read the embeddings: no pipeline stages yet")
    pre = shared.prefix(layer.shared)
    D = cfg.hidden
    joined = g.add("concat", h, b.embedded, name=b.name("shared_in"), axis="D")
    x = norm(b, joined, "D", f"{pre}.input_layernorm", "shared_norm")
    uses = shared.adapters(layer.shared).items()
    adapters = {w: Adapter(down, up, shared.rank, label) for w, (down, up, label) in uses}
    with b.adapted(adapters):
        a, k_cache, v_cache = attention(b, i, layer, b.gathered(x), pos, masks, past, pre=f"{pre}.self_attn")
        m = norm(b, a, "D", f"{pre}.pre_ff_layernorm", "shared_ff_norm")
        m = mlp(b, i, b.gathered(m), pre=f"{pre}.feed_forward")
    out = linear(b, m, f"model.layers.{i}.linear.weight", {"Do": D, "D": D}, ["D"], ["B", "S", "Do"],
                 "shared_linear", whole)  # fmt: skip
    S = h.type.size("S")  # this chip's tokens when the stream is split
    out = g.add("reshape", out, name=b.name("shared_out"), type=TensorType.of(F32, B=b.batch, S=S, D=D))
    return out, [k_cache, v_cache]
