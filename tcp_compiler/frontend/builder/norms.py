"""Norms as IR: RMSNorm and LayerNorm over one axis, and OLMo 2's RMSNorm over all heads at once."""

from __future__ import annotations

from ir import F32, Node
from tcp_compiler.frontend.builder.core import Cut, GraphBuilder, whole


def norm(
    b: GraphBuilder,
    x: Node,
    axis: str,
    prefix: str | None,
    label: str,
    kind: str | None = None,
    eps: float | None = None,
    per: tuple[str, Cut] | None = None,
    offset: bool = True,
) -> Node:
    """The model's norm (or `kind`) over `axis`, with weight `{prefix}.weight` (and `.bias` when
    the model's LayerNorms have one; neither when `prefix` is None: Llama 4's L2 norm), into the
    value of role `label`; `eps` where a norm has its
    own (DeepSeek's low-rank norms). `per` = (axis, cut): a weight row of its own for each entry of
    that axis (Cohere's q/k norm, one per head; RWKV-5's GroupNorm, its bias too), cut over the
    chips like that axis. `offset` False: a plain weight where the model's norms scale by (1 + w)
    (Qwen3-Next's gated norm)."""
    cfg, g = b.cfg, b.g
    n = x.type.size(axis)
    kind = kind or cfg.norms.kind
    if kind == "layer":
        total = g.add("reduce", x, name=b.name(f"{label}.total"), op="sum", axes=[axis])
        mean = g.add("mul", total, b.const(1.0 / n), name=b.name(f"{label}.avg"))
        x = g.add("sub", x, mean, name=b.name(f"{label}.centred"))
    sq = g.add("mul", x, x, name=b.name(f"{label}.sq"))
    total = g.add("reduce", sq, name=b.name(f"{label}.sum"), op="sum", axes=[axis])
    mean = g.add("mul", total, b.const(1.0 / n), name=b.name(f"{label}.mean"))
    epsilon = b.const(cfg.norms.eps if eps is None else eps)
    var = g.add("add", mean, epsilon, name=b.name(f"{label}.var"))
    rstd = g.add("rsqrt", var, name=b.name(f"{label}.rstd"))
    if prefix is None:
        return g.add("mul", x, rstd, name=b.name(label))
    unit = g.add("mul", x, rstd, name=b.name(f"{label}.unit"))
    axes, part = {axis: n}, whole
    if per is not None:
        rows, part = per
        axes = {rows: x.type.size(rows), axis: n}
    w = b.to(b.tensor(f"{prefix}.weight", b.p.table, axes, part), F32)
    if cfg.norms.offset and offset:
        w = g.add("add", w, b.const(cfg.norms.offset), name=f"{prefix}.weight.plus1")
    if kind != "layer" or not cfg.norms.bias:
        return g.add("mul", unit, w, name=b.name(label))
    bias = b.to(b.tensor(f"{prefix}.bias", b.p.table, axes, part), F32)
    return g.add("add", g.add("mul", unit, w, name=b.name(f"{label}.scaled")), bias, name=b.name(label))


def heads_norm(b: GraphBuilder, x: Node, heads: str, prefix: str, label: str, part: Cut) -> Node:
    """RMSNorm over all heads x K at once (OLMo 2's q/k norm), weight [heads * K] cut like the
    projection. This chip holds some of the heads, so the sum of squares over its heads joins
    the other chips' (an all_reduce in f32) before the mean; a KV head held by several chips
    is summed once per holder, so the mean divides by every chip's element count."""
    cfg, g, sh = b.cfg, b.g, b.sh
    sq = g.add("mul", x, x, name=b.name(f"{label}.sq"))
    total = g.add("reduce", sq, name=b.name(f"{label}.sum"), op="sum", axes=[heads, "K"])
    if sh.chips > 1:
        total = g.add("all_reduce", total, name=b.name(f"{label}.sum.all"), op="sum", chips=sh.chips)
    count = x.type.size(heads) * cfg.head_dim * sh.chips
    mean = g.add("mul", total, b.const(1.0 / count), name=b.name(f"{label}.mean"))
    var = g.add("add", mean, b.const(cfg.norms.eps), name=b.name(f"{label}.var"))
    rstd = g.add("rsqrt", var, name=b.name(f"{label}.rstd"))
    unit = g.add("mul", x, rstd, name=b.name(f"{label}.unit"))
    axes = {heads: x.type.size(heads), "K": cfg.head_dim}
    w = b.to(b.tensor(f"{prefix}.weight", b.p.table, axes, part), F32)
    return g.add("mul", unit, w, name=b.name(label))
