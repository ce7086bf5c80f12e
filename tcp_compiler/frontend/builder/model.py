"""Prefill and decode graphs from a ModelConfig, in the einsum form of seed 001: the model's
layers (pre-norm, post-norm or parallel blocks of attention and feed-forward), the token
embedding and the LM head, over the blocks in this package.

Embedding is a gather; the LM head sees the last position only in prefill. Axis names: B batch,
S tokens, D hidden, V vocab (the blocks name their own). Tensor parallelism: see `core`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ir import F32, I32, Axis, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.attention import attention
from tcp_compiler.frontend.builder.core import Binding, GraphBuilder, ModelGraph, whole
from tcp_compiler.frontend.builder.ffn import feed_forward
from tcp_compiler.frontend.builder.masks import DecodeMasks, PrefillMasks
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.positions import absolute
from tcp_compiler.frontend.builder.rwkv import rwkv_block
from tcp_compiler.frontend.builder.shared_block import shared_block
from tcp_compiler.frontend.builder.ssm import check_ssm, gated_delta, mamba
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Layer, ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import Stage, whole_model


def build_prefill(
    cfg: ModelConfig,
    precision: Precision,
    batch: int,
    seq: int,
    padded: bool = False,
    chips: int = 1,
    documents: int = 0,
    stage: Stage | None = None,
    sequence_parallel: bool = True,
) -> ModelGraph:
    """Prompt processing: logits at each sequence's last real token, and every layer's KV cache.

    With `padded`, sequences are right-padded to `seq` and an input `lengths` [B] gives their
    real lengths; keys past a sequence's length are masked out. `chips`: tensor parallelism (see `core`).

    With `documents` = N, each row packs N documents one after another (seed 002's packed
    sequences): inputs `segment` [B, S] give each token's document id, `position` [B, S] its
    position within its document and `ends` [B, N] the index of each document's last token. A
    token attends causally within its own document only, and the logits are [B, N, V], one row
    per document's last token, as if each document had been run on its own.

    With a pipeline `stage` (tcp_compiler.frontend.stages), the graph holds that stage's layers
    only: after the first stage it takes the hidden state as an input `hidden`, and before the
    last it ends by sending its own (output `hidden.sent`) instead of computing logits.

    With `sequence_parallel` (Megatron-LM's, Korthikanti et al. 2022) and chips dividing the
    prompt, the residual stream between blocks is split over the chips by tokens (`splits`): each
    chip embeds, adds and normalises S / chips tokens, a block's input is all-gathered after its
    norm and its output reduce-scattered (GraphBuilder.join, gathered), and a stage sends its
    own tokens.
    """
    stage = stage or whole_model(cfg)
    _check_sizes(batch=batch, seq=seq, chips=chips)
    if documents and padded:
        raise FrontendError(
            "a packed prefill takes no padding: give trailing tokens a segment id of their own"
        )
    split = sequence_parallel and splits(cfg, chips, seq)
    name = _graph_name(cfg, "prefill", stage)
    b = GraphBuilder(cfg, precision, name, batch, seq, positions=seq, chips=chips, split=split)
    ids = b.g.input("ids", TensorType.of(I32, B=batch, S=seq)) if stage.first else None
    lengths = b.g.input("lengths", TensorType.of(I32, B=batch)) if padded else None
    segment = None
    if documents:
        b.packed = True
        segment = b.g.input("segment", TensorType.of(I32, B=batch, S=seq))
        pos = b.g.input("position", TensorType.of(I32, B=batch, S=seq))
        ends = b.g.input("ends", TensorType.of(I32, B=batch, N=documents)) if stage.last else None
    else:
        pos = b.g.add("iota", name="pos", type=TensorType.of(I32, S=seq), axis="S")
    check_ssm(b)
    masks = PrefillMasks(b.g, b.const, b.seq, lengths, segment, pos if documents else None)
    h = _enter(b, stage, lambda: _embed(b, ids, pos))
    b.embedded = h if stage.first else None
    outputs = []
    for i in stage.layers:
        h, caches = _layer(b, i, cfg.layers[i], h, pos, masks, past=None)
        outputs += caches
    if not stage.last:
        b.g.set_outputs(_leave(b, stage, h), *outputs)
        return b.done("prefill", padded, outputs)
    if documents:
        last = b.pick(h, ends, "h_last")
    elif lengths is None and not b.split:
        last = b.g.add("slice", h, name="h_last.s", axis="S", start=seq - 1, stop=seq)
        last = b.g.add("reshape", last, name="h_last", type=TensorType.of(F32, B=batch, D=cfg.hidden))
    elif lengths is None:
        last = b.pick(h, b.const(seq - 1, I32), "h_last")
    else:
        one = b.const(1, I32)
        index = b.g.add("sub", lengths, one, name="last_index")
        last = b.pick(h, index, "h_last")
    b.g.set_outputs(_head(b, last), *outputs)
    return b.done("prefill", padded, outputs)


def build_decode(
    cfg: ModelConfig, precision: Precision, batch: int, past: int, chips: int = 1, stage: Stage | None = None
) -> ModelGraph:
    """One new token per sequence at position `pos` [B] against caches of past + 1 slots.

    Each layer's cache comes in as `l{i}.k_cache_in` / `l{i}.v_cache_in` [B, Hkv, P, K] and goes out
    updated (a scatter at `pos`) as `l{i}.k_cache` / `l{i}.v_cache`; keys after `pos` are masked.
    A Mamba layer's cache is its state and convolution window instead (builder/ssm.py), of one
    size at every length.
    With `chips` > 1 the caches hold only this chip's KV heads; with a pipeline `stage`, only its
    layers' caches (see build_prefill).
    """
    stage = stage or whole_model(cfg)
    _check_sizes(batch=batch, past=past + 1, chips=chips)
    name = _graph_name(cfg, "decode", stage)
    b = GraphBuilder(cfg, precision, name, batch, 1, positions=past + 1, chips=chips)
    ids = b.g.input("ids", TensorType.of(I32, B=batch, S=1)) if stage.first else None
    pos = b.g.input("pos", TensorType.of(I32, B=batch))
    check_ssm(b)
    masks = DecodeMasks(b.g, b.const, b.positions, pos)
    h = _enter(b, stage, lambda: _embed(b, ids, pos))
    b.embedded = h if stage.first else None
    outputs = []
    for i in stage.layers:
        h, caches = _layer(b, i, cfg.layers[i], h, pos, masks, past=past + 1)
        outputs += caches
    if not stage.last:
        b.g.set_outputs(_leave(b, stage, h), *outputs)
        return b.done("decode", False, outputs)
    last = b.g.add("reshape", h, name="h_last", type=TensorType.of(F32, B=batch, D=cfg.hidden))
    b.g.set_outputs(_head(b, last), *outputs)
    return b.done("decode", False, outputs)


def splits(cfg: ModelConfig, chips: int, seq: int) -> bool:
    """Whether a prefill of `seq` tokens over `chips` can split its residual stream by tokens:
    tensor-parallel, the chips dividing the tokens, and no RWKV block (its token shift and norms
    live inside the block, on the stream itself)."""
    return chips > 1 and seq % chips == 0 and all(layer.mixer != "rwkv" for layer in cfg.layers)


def _graph_name(cfg: ModelConfig, phase: str, stage: Stage) -> str:
    return f"{cfg.name}.{phase}" if stage.count == 1 else f"{cfg.name}.{phase}.stage{stage.index}"


def _check_sizes(**sizes: int) -> None:
    for key, value in sizes.items():
        if value < 1:
            raise FrontendError(f"{key} must be at least 1, got {value}")


def _enter(b: GraphBuilder, stage: Stage, embed: Callable[[], Node]) -> Node:
    """The first stage embeds; a later one receives the hidden state [B, S, D], sent in the
    precision's collective dtype, and carries on in f32; with the stream split, this chip's tokens."""
    if stage.first:
        return embed()
    sent = TensorType.of(b.p.collective, B=b.batch, S=b.tokens, D=b.cfg.hidden)
    return b.to(b.receive("hidden", sent), F32)


def _leave(b: GraphBuilder, stage: Stage, h: Node) -> Node:
    """Hands the hidden state to the next stage: cast to the collective dtype, then sent."""
    return b.g.add("send", b.to(h, b.p.collective), name="hidden.sent", stage=stage.index + 1)


def _embed(b: GraphBuilder, ids: Node, pos: Node) -> Node:
    """Token embedding, plus absolute positions (learned or sinusoidal), then the embedding norm;
    of this chip's tokens when the stream is split (a vocab-parallel lookup scatters its join)."""
    cfg, g = b.cfg, b.g
    if b.sh.vocab != cfg.vocab:
        x = _lookup(b, ids)
    else:
        x = b.to(g.add("gather", _table(b), b.local(ids), name="embed", axis="V"), F32)
    if cfg.embedding.scale is not None:
        scale = np.float32(cfg.embedding.scale)
        if cfg.embedding.scale_in_table_dtype:
            scale = b.p.table.round(scale)
        x = g.add("mul", x, b.const(float(scale)), name="embed.scaled")
    if cfg.positions.kind in ("learned", "sinusoidal"):
        x = absolute(b, x, b.local(pos))
    if cfg.norms.embed:
        x = norm(b, x, "D", "model.embed_norm", "embed_norm")
    return x


def _table(b: GraphBuilder) -> Node:
    """The embedding table [V, D], or this chip's V / chips rows of it when the vocabulary is
    split (the LM head's rows when tied)."""
    sh, cfg = b.sh, b.cfg
    part = sh.column if sh.vocab != cfg.vocab else whole
    return b.tensor("model.embed_tokens.weight", b.p.table, {"V": sh.vocab, "D": cfg.hidden}, part)


def _lookup(b: GraphBuilder, ids: Node) -> Node:
    """Vocab-parallel embedding (Megatron's): each chip holds V / chips rows of the table, looks
    up the ids that fall in its rows (the others read row 0 and are zeroed), and an all_reduce
    sums the chips' rows: each token's row comes from the one chip that holds it, exactly."""
    g, rows = b.g, b.sh.vocab
    first = b.param("embed.first", I32, {}, Binding((), lambda get, rank: np.array(rank * rows, np.int32)))
    local = g.add("sub", ids, first, name="embed.local")
    zero = b.const(0, I32)
    above = g.add("ge", local, zero, name="embed.above")
    below = g.add("lt", local, b.const(rows, I32), name="embed.below")
    mine = g.add("and", above, below, name="embed.mine")
    index = g.add("where", mine, local, zero, name="embed.index")
    found = b.to(g.add("gather", _table(b), index, name="embed.rows", axis="V"), F32)
    kept = g.add("where", mine, found, b.const(0.0), name="embed.partial")
    return b.join(kept, "embed")


def _residual(b: GraphBuilder, x: Node, f: Node, label: str) -> Node:
    """x + f(x), with x scaled by DeepNet's alpha and f(x) by Granite's residual multiplier when
    the model sets them."""
    cfg, g = b.cfg, b.g
    if cfg.residual.scale != 1.0:
        x = g.add("mul", x, b.const(float(np.float32(cfg.residual.scale))), name=b.name(f"{label}.alpha"))
    if cfg.residual.branch_scale != 1.0:
        scale = b.const(float(np.float32(cfg.residual.branch_scale)))
        f = g.add("mul", f, scale, name=b.name(f"{label}.branch"))
    return g.add("add", x, f, name=b.name(label))


def _layer(b: GraphBuilder, i: int, layer: Layer, h: Node, pos: Node, masks, past: int | None):
    """Decoder layer i, its values named in the layer (GraphBuilder.layer): an RWKV block, or a
    mixer (attention, Mamba, DeltaNet; or Falcon-H1's attention and Mamba side by side) and a
    feed-forward block, pre-norm (optionally with Gemma's sandwich norms), post-norm or parallel.
    Returns (output, its caches: K and V, a Mamba or DeltaNet layer's state and convolution window
    (Falcon-H1's layers: all four), an RWKV block's sums and shifted inputs, or none where the
    layer skips or replaces its attention)."""
    standard = layer.mixers == ("attention",) and (layer.attention, layer.ffn) == ("standard", "standard")
    if not standard and layer.mixer != "rwkv" and b.cfg.residual.block != "pre":
        raise FrontendError(
            f"{b.cfg.name}: layer {i} skips or replaces a part or has a recurrent mixer, which only "
            f"pre-norm blocks do (this model's are {b.cfg.residual.block})"
        )
    with b.layer(i, layer):
        if layer.mixer == "rwkv":
            return rwkv_block(b, i, h, past is not None)
        return _block(b, i, layer, h, pos, masks, past)


def _block(
    b: GraphBuilder, i: int, layer: Layer, h: Node, pos: Node, masks, past: int | None
) -> tuple[Node, list[Node]]:
    """Layer i's mixer and feed-forward block, each present, skipped or (DeciLM) replaced by a
    linear; a layer without an MLP names its mixer's residual `out`, as every layer's last is. A
    Zamba2 layer runs its shared block first (shared_block), whose output joins the mixer's input,
    not the residual."""
    cfg, g = b.cfg, b.g
    pre = f"model.layers.{i}"
    attn_norm, mlp_norm = f"{pre}.input_layernorm", f"{pre}.post_attention_layernorm"
    if cfg.residual.block == "post":
        a, k_cache, v_cache = attention(b, i, layer, b.gathered(h), pos, masks, past)
        h = norm(b, _residual(b, h, a, "h_attn"), "D", attn_norm, "attn_norm")
        m = feed_forward(b, i, layer, b.gathered(h))
        return norm(b, _residual(b, h, m, "h_mlp"), "D", mlp_norm, "out"), [k_cache, v_cache]
    if cfg.residual.block == "parallel":
        n = norm(b, h, "D", attn_norm, "attn_norm") if cfg.norms.pre else h
        n = b.gathered(n)
        a, k_cache, v_cache = attention(b, i, layer, n, pos, masks, past, reduce=False)
        n2 = n if cfg.norms.parallel == 1 else b.gathered(norm(b, h, "D", mlp_norm, "mlp_norm"))
        m = feed_forward(b, i, layer, n2, reduce=False)
        both = b.join(g.add("add", a, m, name=b.name("parallel")), b.name("parallel.sum"))
        return _residual(b, h, both, "out"), [k_cache, v_cache]
    caches: list[Node] = []
    if layer.attention != "skip":
        x = h
        if layer.shared is not None:  # Zamba2: the shared block's output joins the mixer's input only
            t, caches = shared_block(b, i, layer, h, pos, masks, past)
            x = g.add("add", h, t, name=b.name("h_shared"))
        n = norm(b, x, "D", attn_norm, "attn_norm") if cfg.norms.pre else x
        a, more = _mixers(b, i, layer, n, pos, masks, past)
        caches = caches + more
        if cfg.norms.sandwich:
            a = norm(b, a, "D", f"{pre}.post_attention_layernorm", "attn_out_norm")
            mlp_norm = f"{pre}.pre_feedforward_layernorm"
        h = _residual(b, n if cfg.residual.from_norm else h, a, "h_attn" if layer.ffn != "skip" else "out")
    if layer.ffn != "skip":
        n = norm(b, h, "D", mlp_norm, "mlp_norm") if cfg.norms.pre else h
        if layer.ffn == "linear":
            m = _replacement(b, n, f"{pre}.mlp.linear_mlp.weight", "mlp_linear")
        else:
            m = feed_forward(b, i, layer, b.gathered(n))
        if cfg.norms.sandwich:
            m = norm(b, m, "D", f"{pre}.post_feedforward_layernorm", "mlp_out_norm")
        h = _residual(b, n if cfg.residual.from_norm else h, m, "out")
    return h, caches


def _mixers(
    b: GraphBuilder, i: int, layer: Layer, x: Node, pos: Node, masks, past: int | None
) -> tuple[Node, list[Node]]:
    """Layer i's mixer on the normed x, or its parallel mixers (Layer.beside) on the same x with
    their outputs summed before the one join over the chips; returns (output, every mixer's
    caches). They read x gathered (GraphBuilder.gathered) unless it is DeciLM's whole linear,
    which runs on this chip's tokens."""
    if layer.attention == "linear":
        return _mixer(b, i, layer, layer.mixer, x, pos, masks, past, reduce=True)
    x = b.gathered(x)
    if not layer.beside:
        return _mixer(b, i, layer, layer.mixer, x, pos, masks, past, reduce=True)
    outputs, caches = [], []
    for kind in layer.mixers:
        y, kept = _mixer(b, i, layer, kind, x, pos, masks, past, reduce=False)
        outputs.append(y)
        caches += kept
    total = outputs[0]
    for k, y in enumerate(outputs[1:], 1):
        total = b.g.add("add", total, y, name=b.name(f"mixers.{k}"))
    return b.join(total, b.name("mixers.sum")), caches


def _mixer(
    b: GraphBuilder, i: int, layer: Layer, kind: str, x: Node, pos: Node, masks, past: int | None,
    reduce: bool,
) -> tuple[Node, list[Node]]:  # fmt: skip
    """One mixer of layer i (attention, Mamba, DeltaNet, or DeciLM's linear stand-in for
    attention) on x, its input and output scaled by its part's multipliers (Falcon-H1's muP);
    partial sums over the chips left to the caller when `reduce` is False."""
    cfg, pre = b.cfg, f"model.layers.{i}"
    part = cfg.attention if kind == "attention" or cfg.ssm is None else cfg.ssm
    x = b.scaled(x, part.in_scale, f"{kind}_in")
    if kind == "mamba":
        a, caches = mamba(b, i, x, past is not None, reduce)
    elif kind == "deltanet":  # Qwen3-Next's gated DeltaNet
        a, caches = gated_delta(b, i, x, past is not None, reduce)
    elif layer.attention == "linear":
        a, caches = _replacement(b, x, f"{pre}.self_attn.linear_attn.weight", "attn_linear"), []
    else:
        a, *caches = attention(b, i, layer, x, pos, masks, past, reduce=reduce)
    return b.scaled(a, part.out_scale, f"{kind}_out"), caches


def _replacement(b: GraphBuilder, x: Node, weight: str, label: str) -> Node:
    """DeciLM's stand-in for a layer's attention or MLP: one bias-free [D, D] linear, whole on
    every chip (no collective), on x's tokens (this chip's when the stream is split)."""
    D = b.cfg.hidden
    y = linear(b, x, weight, {"Do": D, "D": D}, ["D"], ["B", "S", "Do"], f"{label}.o", whole)
    S = x.type.size("S")
    return b.g.add("reshape", y, name=b.name(label), type=TensorType.of(F32, B=b.batch, S=S, D=D))


def _head(b: GraphBuilder, x: Node) -> Node:
    """Final norm and LM head on [B, (N,) D]; tied models reuse the embedding table.

    Vocab-parallel over chips: each chip computes its V / chips rows (a tied head reads the
    chip's rows of the embedding table) and an all_gather joins them.
    """
    cfg, sh, g = b.cfg, b.sh, b.g
    if cfg.norms.final:
        x = norm(b, x, "D", "model.norm", "final_norm", eps=cfg.norms.final_eps)
    axes = {"V": sh.vocab, "D": cfg.hidden}
    parallel = sh.vocab != cfg.vocab
    part = sh.column if parallel else whole
    lead = [a for a in x.type.names if a != "D"]
    if cfg.embedding.tied:
        table = _table(b)  # the stage's own copy when it does not embed
        eq = f"{' '.join(lead)} D, V D -> {' '.join(lead)} V"
        logits = b.einsum(b.to(x, table.type.dtype), table, name="logits.raw", eq=eq)
    else:
        bias = part if cfg.embedding.head_bias else None
        logits = linear(b, x, "lm_head.weight", axes, ["D"], [*lead, "V"], "logits.raw", part, bias)
    logits = b.to(logits, F32)
    logits = b.scaled(logits, cfg.embedding.logits_scale, "logits.multiplied")
    if cfg.embedding.logits_divisor != 1.0:
        logits = g.add("div", logits, b.const(cfg.embedding.logits_divisor), name="logits.scaled")
    if cfg.embedding.logits_softcap is not None:
        logits = b.softcap(logits, cfg.embedding.logits_softcap, "logits.capped")
    if parallel:
        logits = g.add("all_gather", logits, name="logits.gather", axis="V", chips=sh.chips)
    full = [x.type.axis(a) for a in lead] + [Axis("V", cfg.vocab)]
    return g.add("reshape", logits, name="logits", type=TensorType(F32, tuple(full)))
