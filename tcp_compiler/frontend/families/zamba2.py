"""Zamba2 (Zyphra): a stack of pre-norm Mamba-2 layers (x + mixer(norm(x))); at each "hybrid" layer
of `layers_block_type`, one of `num_mem_blocks` shared transformer blocks, used in turn, runs
first on the hidden state joined to the embeddings, and its output, through the layer's own
[hidden, hidden] linear, joins the mixer's input only: x + mixer(norm(x + linear(block(x, e)))).

A shared block (builder/shared_block.py) is RMSNorm over 2 x hidden, attention with heads of
2 x hidden / num_attention_heads scaled by (head_dim / 2)^-0.5 (RoPE over the whole head with
`use_mem_rope`), RMSNorm, then a gated MLP (gate_up_proj, hidden_act gelu) with no residual of its
own. Each use has its own rank-`adapter_rank` adapters on the MLP's gate and up, and on q, k and v
with `use_shared_attention_adapter` (transformers 5.23.0 builds the MLP's always, whatever
`use_shared_mlp_adapter` a published config sets). The Mamba-2 mixer: heads `n_mamba_heads` of
mamba_expand x hidden / heads channels, `mamba_ngroups` groups, a conv bias always, silu after
the conv, a gated norm with eps 1e-5, dt clamped to [time_step_min, inf) in the chunked prefill
only. Tied embeddings by default. Checkpoint names: transformers' (`mamba.*`, and for hybrid
layers `mamba_decoder.*`, `linear`, `shared_transformer.*` under the first layer of each block).
"""

from __future__ import annotations

import dataclasses

from tcp_compiler.frontend.config import (
    Attention,
    Layer,
    Mlp,
    ModelConfig,
    Positions,
    RawConfig,
    SharedBlocks,
    read_rope,
)
from tcp_compiler.frontend.families.common import activation, dense, listed_layer_types
from tcp_compiler.frontend.families.mamba2 import Mamba2Keys, mamba2_mixer
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, Rename, TensorMap

# Zamba2Config's class defaults (transformers 5.23.0), for the fields a config may leave out;
# intermediate_size (4 x hidden), num_key_value_heads (the heads) and the layer pattern (PATTERN)
# follow from others, as its __post_init__ sets them.
DEFAULTS = dict(
    vocab_size=32000, max_position_embeddings=4096, hidden_size=2560, num_hidden_layers=54, mamba_d_state=64,
    mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, time_step_min=0.001, n_mamba_heads=8,
    use_conv_bias=True, chunk_size=256, add_bias_linear=False, hidden_act="gelu", num_attention_heads=32,
    num_mem_blocks=1, use_shared_attention_adapter=False, adapter_rank=128, use_mem_rope=False,
    rms_norm_eps=1e-5, tie_word_embeddings=True,
)  # fmt: skip

# transformers' default stack (Zamba2-2.7B's): a shared block at every sixth layer, then closer
PATTERN = (["linear_attention"] + (["linear_attention"] * 5 + ["hybrid"]) * 7 + ["linear_attention"] * 4
           + ["hybrid"] + ["linear_attention"] * 3 + ["hybrid"] + ["linear_attention"] * 2)  # fmt: skip
TYPES = ("linear_attention", "hybrid")

MAMBA_KEYS = Mamba2Keys(
    heads="n_mamba_heads", head_dim="mamba_headdim", groups="mamba_ngroups", state="mamba_d_state",
    conv_kernel="mamba_d_conv", expand="mamba_expand", proj_bias="add_bias_linear", norm_eps="rms_norm_eps",
    dt_floor="time_step_min",
)  # fmt: skip

SHARED = r"(model\.layers\.\d+\.shared_transformer\.feed_forward)\."


def block_types(raw: RawConfig) -> list[str]:
    """Each layer's type: `layers_block_type` (or its alias `layer_types`, legacy "mamba" read as
    "linear_attention"), else transformers' default stack."""
    key = "layers_block_type" if raw.has("layers_block_type") or not raw.has("layer_types") else "layer_types"
    types = listed_layer_types(raw, key, TYPES, PATTERN)
    layers = raw.require("num_hidden_layers")
    if len(types) != layers:  # transformers' validate_layer_type
        raise raw.fail(f"{raw.path(key)} has {len(types)} entries but num_hidden_layers is {layers}")
    return types


def tensor_map(hybrid: list[int], bias: bool) -> TensorMap:
    """transformers' checkpoint names: a hybrid layer's mixer and its norm under `mamba_decoder`,
    the shared MLP's gate and up (and their adapters' B) as halves of one fused tensor."""
    rules = []
    if hybrid:
        ids = "|".join(map(str, hybrid))
        rules += [
            (rf"model\.layers\.({ids})\.mixer\.(.+)", Rename(r"model.layers.\1.mamba_decoder.mamba.\2")),
            (rf"model\.layers\.({ids})\.input_layernorm\.(.+)",
             Rename(r"model.layers.\1.mamba_decoder.input_layernorm.\2")),
        ]  # fmt: skip
    for index, part in enumerate(("gate", "up")):
        rules.append((SHARED + rf"{part}_proj\.weight", Chunk(r"\1.gate_up_proj.weight", str(index), 2)))
        if bias:
            rules.append((SHARED + rf"{part}_proj\.bias", Chunk(r"\1.gate_up_proj.bias", str(index), 2)))
        rules.append((rf"(.+\.gate_up_proj_adapter_list\.\d+\.1)\.{part}\.weight",
                      Chunk(r"\1.weight", str(index), 2)))  # fmt: skip
    rules += [
        (r"model\.layers\.(\d+)\.mixer\.(.+)", Rename(r"model.layers.\1.mamba.\2")),
        (r"model\.norm\.(.+)", Rename(r"model.final_layernorm.\1")),
    ]
    return TensorMap(tuple(rules))


@family("zamba2", defaults=DEFAULTS, architectures=("Zamba2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    data = dict(raw.data)
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    if (2 * hidden) % heads:
        raise raw.fail(f"2 x hidden_size ({2 * hidden}) must be a multiple of num_attention_heads ({heads})")
    head_dim = 2 * hidden // heads
    data["intermediate_size"] = data.get("intermediate_size") or 4 * hidden
    data["mamba_headdim"] = "auto"  # transformers derives it: mamba_expand x hidden / n_mamba_heads
    data.pop("head_dim", None)  # derived too (attention_head_dim), whatever a saved config says
    if data.get("use_long_context"):  # as Zamba2Config's __post_init__ sets it
        data["max_position_embeddings"] = 16384
    raw = RawConfig(data, raw.source, raw.family, raw.prefix)
    adapters = bool(raw.get("use_shared_attention_adapter", kind=bool))
    kv_heads = raw.get("num_key_value_heads", heads, kind=int)
    if adapters and kv_heads != heads:
        raise raw.fail(
            f"use_shared_attention_adapter: the k and v adapters give 2 x hidden_size, so "
            f"num_key_value_heads ({kv_heads}) must equal num_attention_heads ({heads})"
        )
    rope = read_rope(raw) if raw.get("use_mem_rope", kind=bool) else None
    types = block_types(raw)
    hybrid = [i for i, t in enumerate(types) if t == "hybrid"]
    blocks = raw.require("num_mem_blocks")
    layers = tuple(
        Layer(None, rope, "rope", False, mixer="mamba", ffn="skip",
              shared=hybrid.index(i) if i in hybrid else None)
        for i in range(len(types))
    )  # fmt: skip
    ssm = dataclasses.replace(  # transformers' Zamba2 mixer fixes these whatever the config says
        mamba2_mixer(raw, MAMBA_KEYS), conv_bias=True, norm_eps=1e-5, activation="silu"
    )
    bias = bool(raw.get("add_bias_linear", kind=bool))
    shared = SharedBlocks(blocks, raw.require("adapter_rank"), adapters, tuple(hybrid[:blocks]))
    return dense(
        raw,
        "zamba2",
        name,
        head_dim_default=head_dim,
        head_dim=head_dim,
        kv_heads=kv_heads,
        layers=layers,
        ssm=ssm,
        shared=shared,
        mlp=Mlp(activation(raw, "gelu", "hidden_act"), "gated", bias),
        attention=Attention(scale=(head_dim / 2) ** -0.5),
        positions=Positions("rope" if rope is not None else "none"),
        tensors=tensor_map(hybrid, bias),
    )
