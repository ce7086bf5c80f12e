"""The shape each checkpoint tensor must have, as the model's config implies, checked from the
safetensors headers alone when a checkpoint is opened.

Binding a weight is a reshape, which checks only the element count: a q_proj stored [16, 64] where
the config implies [32, 32], or a gate stored transposed, would load and run with scrambled values.
So every tensor the config names is compared, by its header, with the shape the config implies,
and a mismatch is a one-line error naming the tensor, its file and the config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from tcp_compiler.frontend.checkpoint import Checkpoint, CheckpointError
from tcp_compiler.frontend.config import Layer, ModelConfig, SharedExpert, Ssm

Shape = tuple[int, ...]
# What a weight is for, so readers of the shapes never classify names: a table (embedding,
# positions, LM head), a projection each token multiplies by (attention, MLP, router, shared
# expert), one routed expert's projection, or a vector (norms, biases, sinks).
Kind = Literal["table", "projection", "expert", "vector"]


class WeightShape(NamedTuple):
    name: str  # canonical name
    shape: Shape  # whole and unsharded, in the canonical [out, in] layout
    kind: Kind


_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


def canonical_shapes(cfg: ModelConfig) -> Iterator[WeightShape]:
    """Every weight the config can ask for, with its whole shape and kind; a checkpoint need not
    hold all of them (biases, untied heads). Weights generation does not run are not among them
    (`unrun_shapes`)."""
    for name, shape, kind in _shapes(cfg):
        yield WeightShape(name, shape, kind)


def unrun_shapes(cfg: ModelConfig) -> Iterator[WeightShape]:
    """The weights a checkpoint holds that generation neither runs nor loads, exactly: MiMo's
    multi-token-prediction layers (`mtp_layers`), each a decoder layer of the model's own attention
    and gated MLP, plus norms of the token's embedding and of the previous hidden state, a
    [D, 2D] projection of the two, and a final norm (modeling_mimo.py's MiMoMTPLayers)."""
    D, F, H, Hkv, K = cfg.hidden, cfg.intermediate, cfg.heads, cfg.kv_heads, cfg.head_dim
    for j in range(cfg.mtp_layers):
        pre = f"model.mtp_layers.{j}"
        for norm in ("input_layernorm", "post_attention_layernorm", "token_layernorm", "hidden_layernorm",
                     "final_layernorm"):  # fmt: skip
            yield WeightShape(f"{pre}.{norm}.weight", (D,), "vector")
        yield WeightShape(f"{pre}.input_proj.weight", (D, 2 * D), "projection")
        for proj, rows in (("q_proj", H * K), ("k_proj", Hkv * K), ("v_proj", Hkv * K)):
            yield WeightShape(f"{pre}.self_attn.{proj}.weight", (rows, D), "projection")
            if cfg.attention.qkv_bias:
                yield WeightShape(f"{pre}.self_attn.{proj}.bias", (rows,), "vector")
        yield WeightShape(f"{pre}.self_attn.o_proj.weight", (D, H * K), "projection")
        for proj, shape in (("gate_proj", (F, D)), ("up_proj", (F, D)), ("down_proj", (D, F))):
            yield WeightShape(f"{pre}.mlp.{proj}.weight", shape, "projection")


def _shapes(cfg: ModelConfig) -> Iterator[tuple[str, Shape, Kind]]:
    V, D = cfg.vocab, cfg.hidden
    yield "model.embed_tokens.weight", (V, D), "table"
    yield "lm_head.weight", (V, D), "table"
    yield "lm_head.bias", (V,), "vector"
    if cfg.positions.kind == "learned":
        yield "model.embed_positions.weight", (cfg.max_positions, D), "table"
    for part in ("weight", "bias"):
        yield f"model.embed_norm.{part}", (D,), "vector"
        yield f"model.norm.{part}", (D,), "vector"
    for i, layer in enumerate(cfg.layers):
        pre = f"model.layers.{i}"
        if layer.mixer == "rwkv":
            assert cfg.ssm is not None
            yield from _rwkv_shapes(cfg, cfg.ssm, pre)
            continue
        for norm in _NORMS:
            yield f"{pre}.{norm}.weight", (D,), "vector"
            yield f"{pre}.{norm}.bias", (D,), "vector"
        if layer.shared is not None:
            yield from _shared_block_shapes(cfg, i, layer.shared)
        for mixer in layer.mixers:  # Falcon-H1's layers run attention and a Mamba mixer side by side
            yield from _mixer_shapes(cfg, layer, mixer, pre)
        if cfg.dsa is not None and i not in cfg.dsa.shared:
            yield from _indexer_shapes(cfg, f"{pre}.self_attn.indexer")
        if layer.ffn != "standard":
            if layer.ffn == "linear":  # DeciLM's stand-in for the MLP
                yield f"{pre}.mlp.linear_mlp.weight", (D, D), "projection"
            continue
        F = cfg.intermediate_of(layer)
        if layer.moe and cfg.moe is not None:
            moe = cfg.moe
            yield moe.router_name.format(i=i), (moe.experts, D), "projection"
            yield moe.router_name.removesuffix(".weight") + ".bias", (moe.experts,), "vector"
            if moe.correction_bias_name is not None:
                yield moe.correction_bias_name.format(i=i), (moe.experts,), "vector"
            if moe.shared is not None:
                yield from _shared_shapes(moe.shared, moe.gated, i, D)
            width = D if moe.latent is None else moe.latent  # the experts' input and output
            if moe.latent is not None:
                into, back = (n.format(i=i) for n in moe.latent_names)
                yield into, (moe.latent, D), "projection"
                yield back, (D, moe.latent), "projection"
            gate, up, down = moe.expert_names
            ins = (gate, up) if moe.gated else (up,)
            for e in range(moe.experts):
                for name in ins:
                    yield name.format(i=i, e=e), (moe.intermediate, width), "expert"
                yield down.format(i=i, e=e), (width, moe.intermediate), "expert"
                for name, size in (*((n, moe.intermediate) for n in ins), (down, width)):
                    yield name.format(i=i, e=e).removesuffix(".weight") + ".bias", (size,), "vector"
            continue
        for proj in ("gate_proj", "up_proj") if cfg.mlp.kind == "gated" else ("up_proj",):  # plain: no gate
            yield f"{pre}.mlp.{proj}.weight", (F, D), "projection"
            yield f"{pre}.mlp.{proj}.bias", (F,), "vector"
        yield f"{pre}.mlp.down_proj.weight", (D, F), "projection"
        yield f"{pre}.mlp.down_proj.bias", (D,), "vector"
        if cfg.mlp.activation == "xielu":  # its trainable scalars, stored as [1]
            yield f"{pre}.mlp.act_fn.alpha_p", (1,), "vector"
            yield f"{pre}.mlp.act_fn.alpha_n", (1,), "vector"


def _mixer_shapes(cfg: ModelConfig, layer: Layer, mixer: str, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """One mixer's tensors in layer `pre`: a Mamba or DeltaNet mixer's, or attention's (none where
    the layer skips it, DeciLM's linear where it replaces it)."""
    D = cfg.hidden
    if mixer == "mamba":
        assert cfg.ssm is not None
        yield from _ssm_shapes(cfg.ssm, D, f"{pre}.mixer")
    elif mixer == "deltanet":
        assert cfg.ssm is not None
        yield from _deltanet_shapes(cfg.ssm, D, f"{pre}.linear_attn")
    elif layer.attention == "linear":  # DeciLM's stand-in for attention
        yield f"{pre}.self_attn.linear_attn.weight", (D, D), "projection"
    elif layer.attention == "skip":
        pass
    elif cfg.mla is not None:
        yield from _mla_shapes(cfg, f"{pre}.self_attn")
    else:
        yield from _attention_shapes(cfg, pre, cfg.kv_heads_of(layer))


def _ssm_shapes(ssm: Ssm, D: int, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """A Mamba mixer's tensors as transformers stores them: in_proj (Mamba-2: z, x B C and dt in
    one), the depthwise conv [channels, 1, kernel], Mamba-1's x_proj and dt_proj, A_log, D, Mamba-2's
    dt_bias and gated norm, out_proj."""
    E, N, C = ssm.inner, ssm.state, ssm.conv_channels
    projected = 2 * E if ssm.kind == "mamba" else E + C + ssm.heads
    yield f"{pre}.in_proj.weight", (projected, D), "projection"
    yield f"{pre}.in_proj.bias", (projected,), "vector"
    yield f"{pre}.conv1d.weight", (C, 1, ssm.conv_kernel), "vector"
    yield f"{pre}.conv1d.bias", (C,), "vector"
    if ssm.kind == "mamba":
        yield f"{pre}.x_proj.weight", (ssm.dt_rank + 2 * N, E), "projection"
        yield f"{pre}.dt_proj.weight", (E, ssm.dt_rank), "projection"
        yield f"{pre}.dt_proj.bias", (E,), "vector"
        yield f"{pre}.A_log", (E, N), "vector"
        yield f"{pre}.D", (E,), "vector"
    else:
        for name in ("dt_bias", "A_log", "D"):
            yield f"{pre}.{name}", (ssm.heads,), "vector"
        if ssm.gated_norm != "none":
            yield f"{pre}.norm.weight", (E,), "vector"
    yield f"{pre}.out_proj.weight", (D, E), "projection"
    yield f"{pre}.out_proj.bias", (D,), "vector"


def _shared_block_shapes(cfg: ModelConfig, i: int, use: int) -> Iterator[tuple[str, Shape, Kind]]:
    """Zamba2's layer i, the shared blocks' use `use`: its own [D, D] linear and adapters, and on a
    block's first use the block itself (`_block_shapes`), once."""
    shared, D, F = cfg.shared, cfg.hidden, cfg.intermediate
    assert shared is not None
    yield f"model.layers.{i}.linear.weight", (D, D), "projection"
    downs = set()  # the MLP's gate and up share one
    for projection, (down, up, _) in shared.adapters(use).items():
        attention = ".self_attn." in projection
        if down not in downs:
            downs.add(down)
            yield down, (shared.rank, 2 * D if attention else D), "projection"
        yield up, (2 * D if attention else F, shared.rank), "projection"
    if use < shared.blocks:
        yield from _block_shapes(cfg, shared.prefix(use))


def _block_shapes(cfg: ModelConfig, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """One Zamba2 shared block: attention from 2 x hidden to hidden, its two norms, the gated MLP."""
    D, F = cfg.hidden, cfg.intermediate
    for name, shape, kind in _attention_shapes(dataclasses.replace(cfg, hidden=2 * D), pre, cfg.kv_heads):
        if name.endswith("o_proj.weight"):
            shape = (D, shape[1])
        elif name.endswith("o_proj.bias"):
            shape = (D,)
        yield name, shape, kind
    yield f"{pre}.input_layernorm.weight", (2 * D,), "vector"
    yield f"{pre}.pre_ff_layernorm.weight", (D,), "vector"
    mlp = f"{pre}.feed_forward"
    for proj in ("gate_proj", "up_proj"):
        yield f"{mlp}.{proj}.weight", (F, D), "projection"
        yield f"{mlp}.{proj}.bias", (F,), "vector"
    yield f"{mlp}.down_proj.weight", (D, F), "projection"
    yield f"{mlp}.down_proj.bias", (D,), "vector"


def uses(cfg: ModelConfig) -> dict[str, int]:
    """The weights a forward multiplies each token by more than once, with how many times: each of
    Zamba2's shared blocks, by the layers that use it (stored, counted and bound once)."""
    shared = cfg.shared
    if shared is None:
        return {}
    each = [layer.shared for layer in cfg.layers if layer.shared is not None]
    found: dict[str, int] = {}
    for first in each[: shared.blocks]:
        count = sum(use % shared.blocks == first for use in each)
        found.update({name: count for name, _, _ in _block_shapes(cfg, shared.prefix(first))})
    return found


def _rwkv_shapes(cfg: ModelConfig, ssm: Ssm, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """An RWKV-4 block as transformers stores it: ln1, ln2, time mixing (per-channel decay, bonus
    and three token-shift mixes; key, value, receptance, output) and channel mixing (two mixes;
    key, receptance, value). RWKV-5's time mixing adds a gate (its mix and projection) and ln_x,
    its decay and bonus (time_faaaa) per head and channel; RWKV-6's mixes (time_maa_*) and decay
    take LoRAs (its LoRA matrices are "vector" here: small tables read whole, as the norms)."""
    D, A, F = cfg.hidden, ssm.inner, cfg.intermediate
    for norm in ("ln1", "ln2"):
        for part in ("weight", "bias"):
            yield f"{pre}.{norm}.{part}", (D,), "vector"
    att, ffn = f"{pre}.attention", f"{pre}.feed_forward"
    finch = ssm.kind == "rwkv6"
    if ssm.kind in ("rwkv5", "rwkv6"):  # per head: decay and bonus; a gate; the GroupNorm ln_x
        yield f"{att}.time_decay", ((1, 1, A) if finch else (ssm.heads, ssm.head_dim)), "vector"
        yield f"{att}.time_faaaa", (ssm.heads, ssm.head_dim), "vector"
        for part in ("weight", "bias"):
            yield f"{att}.ln_x.{part}", (D,), "vector"
    else:
        for name in ("time_decay", "time_first"):
            yield f"{att}.{name}", (A,), "vector"
    if finch:  # data-dependent mixes and decay through LoRAs
        for name in ("x", "w", "k", "v", "r", "g"):
            yield f"{att}.time_maa_{name}", (1, 1, D), "vector"
        yield f"{att}.time_maa_w1", (D, 5 * ssm.mix_rank), "vector"
        yield f"{att}.time_maa_w2", (5, ssm.mix_rank, D), "vector"
        yield f"{att}.time_decay_w1", (D, ssm.decay_rank), "vector"
        yield f"{att}.time_decay_w2", (ssm.decay_rank, A), "vector"
    projections = ("key", "value", "receptance") + (("gate",) if ssm.kind != "rwkv4" else ())
    for name in projections:
        if not finch:
            yield f"{att}.time_mix_{name}", (1, 1, D), "vector"
        yield f"{att}.{name}.weight", (A, D), "projection"
    yield f"{att}.output.weight", (D, A), "projection"
    for name in ("key", "receptance"):
        yield f"{ffn}.time_maa_{name[0]}" if finch else f"{ffn}.time_mix_{name}", (1, 1, D), "vector"
    yield f"{ffn}.key.weight", (F, D), "projection"
    yield f"{ffn}.receptance.weight", (D, D), "projection"
    yield f"{ffn}.value.weight", (D, F), "projection"


def _deltanet_shapes(ssm: Ssm, D: int, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """The gated DeltaNet as transformers stores it: Qwen3-Next's in_proj_qkvz (q, k, v and the
    gate z) and in_proj_ba (beta and the decay input a), or Qwen3.5's in_proj_qkv, in_proj_z,
    in_proj_b and in_proj_a; the conv over q, k and v [channels, 1, kernel], dt_bias and A_log per
    value head, the gated norm over a head's channels, out_proj."""
    E, C = ssm.inner, ssm.conv_channels
    if ssm.fused_projections:
        yield f"{pre}.in_proj_qkvz.weight", (C + E, D), "projection"
        yield f"{pre}.in_proj_ba.weight", (2 * ssm.heads, D), "projection"
    else:
        for name, rows in (("qkv", C), ("z", E), ("b", ssm.heads), ("a", ssm.heads)):
            yield f"{pre}.in_proj_{name}.weight", (rows, D), "projection"
    yield f"{pre}.conv1d.weight", (C, 1, ssm.conv_kernel), "vector"
    for name in ("dt_bias", "A_log"):
        yield f"{pre}.{name}", (ssm.heads,), "vector"
    yield f"{pre}.norm.weight", (ssm.head_dim,), "vector"
    yield f"{pre}.out_proj.weight", (D, E), "projection"


def _attention_shapes(cfg: ModelConfig, pre: str, Hkv: int) -> Iterator[tuple[str, Shape, Kind]]:
    """Per-head attention with `Hkv` KV heads: q/k/v/o projections, biases, sinks, q/k norms."""
    D, H, K = cfg.hidden, cfg.heads, cfg.head_dim
    q_rows = H * K * (2 if cfg.attention.output_gate else 1)  # Qwen3-Next: each head's gate too
    for proj, rows in (("q_proj", q_rows), ("k_proj", Hkv * K), ("v_proj", Hkv * K)):
        yield f"{pre}.self_attn.{proj}.weight", (rows, D), "projection"
        yield f"{pre}.self_attn.{proj}.bias", (rows,), "vector"
    yield f"{pre}.self_attn.o_proj.weight", (D, H * K), "projection"
    yield f"{pre}.self_attn.o_proj.bias", (D,), "vector"
    yield f"{pre}.self_attn.sinks", (H,), "vector"
    qk_norm = cfg.attention.qk_norm  # OLMo 2 norms all heads at once, Cohere each with its own weight
    q_shape = {"all_heads": (H * K,), "each_head": (H, K)}.get(qk_norm, (K,))
    k_shape = {"all_heads": (Hkv * K,), "each_head": (Hkv, K)}.get(qk_norm, (K,))
    yield f"{pre}.self_attn.q_norm.weight", q_shape, "vector"
    yield f"{pre}.self_attn.k_norm.weight", k_shape, "vector"


def _mla_shapes(cfg: ModelConfig, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """DeepSeek's latent attention: low-rank q (or q_proj), kv_a to latent + rope key, kv_b to
    per-head nope keys and values; its o_proj reads heads x v_head_dim."""
    mla, D, H = cfg.mla, cfg.hidden, cfg.heads
    assert mla is not None
    qk = mla.nope_dim + mla.rope_dim
    if mla.q_lora_rank is None:
        yield f"{pre}.q_proj.weight", (H * qk, D), "projection"
    else:
        yield f"{pre}.q_a_proj.weight", (mla.q_lora_rank, D), "projection"
        yield f"{pre}.q_a_layernorm.weight", (mla.q_lora_rank,), "vector"
        yield f"{pre}.q_b_proj.weight", (H * qk, mla.q_lora_rank), "projection"
    yield f"{pre}.kv_a_proj_with_mqa.weight", (mla.kv_lora_rank + mla.rope_dim, D), "projection"
    yield f"{pre}.kv_a_layernorm.weight", (mla.kv_lora_rank,), "vector"
    yield f"{pre}.kv_b_proj.weight", (H * (mla.nope_dim + mla.v_dim), mla.kv_lora_rank), "projection"
    yield f"{pre}.o_proj.weight", (D, H * mla.v_dim), "projection"


def _indexer_shapes(cfg: ModelConfig, pre: str) -> Iterator[tuple[str, Shape, Kind]]:
    """DeepSeek Sparse Attention's indexer (config.Dsa): index queries from the q LoRA, one
    LayerNorm'd index key per token, a weight per index head."""
    dsa, mla = cfg.dsa, cfg.mla
    assert dsa is not None and mla is not None and mla.q_lora_rank is not None
    yield f"{pre}.wq_b.weight", (dsa.heads * dsa.head_dim, mla.q_lora_rank), "projection"
    yield f"{pre}.wk.weight", (dsa.head_dim, cfg.hidden), "projection"
    yield f"{pre}.k_norm.weight", (dsa.head_dim,), "vector"
    yield f"{pre}.k_norm.bias", (dsa.head_dim,), "vector"
    yield f"{pre}.weights_proj.weight", (dsa.heads, cfg.hidden), "projection"


def _shared_shapes(shared: SharedExpert, gated: bool, i: int, D: int) -> Iterator[tuple[str, Shape, Kind]]:
    gate, up, down = (n.format(i=i) for n in shared.names)
    if gated:
        yield gate, (shared.intermediate, D), "projection"
    yield up, (shared.intermediate, D), "projection"
    yield down, (D, shared.intermediate), "projection"
    if shared.gate_name is not None:
        yield shared.gate_name.format(i=i), (1, D), "projection"


def check_shapes(cfg: ModelConfig, checkpoint: Checkpoint, config_path: Path) -> None:
    """Raises CheckpointError for the first tensor whose header shape is not the one `cfg` implies,
    the weights generation does not run included."""
    for name, shape, _ in (*canonical_shapes(cfg), *unrun_shapes(cfg)):
        source = cfg.tensors.source(name)
        want = source.stored(shape)
        for stored in source.tensors:
            info = checkpoint.find(stored)  # absent: the builder reports it if the graph needs it
            if info is not None and info.shape != want:
                raise CheckpointError(
                    f"{info.file}: tensor {stored!r} has shape {list(info.shape)}, but {config_path} "
                    f"implies {list(want)} for {name}"
                )
