"""Bamba (IBM): Mamba-2 layers with attention layers at `attn_layer_indices`, each layer followed
by a LLaMA-style gated MLP (x + mixer(norm(x)), then x + mlp(norm(x))). The attention is Llama's
with RoPE on half of each head (transformers hardcodes partial_rotary_factor 0.5 unless
rope_parameters says otherwise); the Mamba-2 mixer's sizes are the `mamba_*` fields, its gated
norm uses rms_norm_eps. Checkpoint names: `mamba.*` for the mixer, `feed_forward.*` and
`pre_ff_layernorm` for the MLP, `final_layernorm` at the end."""

from __future__ import annotations

import math

from tcp_compiler.frontend.config import Layer, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_indices, partial_rotary, sizes
from tcp_compiler.frontend.families.mamba2 import Mamba2Keys, mamba2_mixer
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."

# BambaConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", rms_norm_eps=1e-5,
    max_position_embeddings=262144, attn_layer_indices=None, mamba_n_heads=128, mamba_d_head="auto",
    mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256,
    mamba_conv_bias=True, mamba_proj_bias=False, time_step_limit=[0.0, math.inf], attention_bias=False,
    mlp_bias=False,
)  # fmt: skip

# the Mamba-2 mixer's fields as Bamba (and Granite 4's hybrids) spell them
MAMBA_KEYS = Mamba2Keys(
    heads="mamba_n_heads", head_dim="mamba_d_head", groups="mamba_n_groups", state="mamba_d_state",
    conv_kernel="mamba_d_conv", expand="mamba_expand", chunk="mamba_chunk_size", conv_bias="mamba_conv_bias",
    proj_bias="mamba_proj_bias", norm_eps="rms_norm_eps",
)  # fmt: skip

TENSORS = TensorMap(
    (
        (LAYER + r"mixer\.(.+)", Rename(r"model.layers.\1.mamba.\2")),
        (LAYER + r"mlp\.(.+)", Rename(r"model.layers.\1.feed_forward.\2")),
        (LAYER + r"post_attention_layernorm\.(.+)", Rename(r"model.layers.\1.pre_ff_layernorm.\2")),
        (r"model\.norm\.(.+)", Rename(r"model.final_layernorm.\1")),
    )
)


@family("bamba", defaults=DEFAULTS, architectures=("BambaForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    attends = layer_indices(raw, "attn_layer_indices")
    rope = read_rope(raw)
    layers = tuple(
        Layer(None, rope, "rope", False) if i in attends else Layer(None, None, "rope", False, mixer="mamba")
        for i in range(raw.require("num_hidden_layers"))
    )
    return dense(
        raw,
        "bamba",
        name,
        layers=layers,
        ssm=mamba2_mixer(raw, MAMBA_KEYS),
        positions=Positions(rotary_dim=partial_rotary(raw, sizes(raw)["head_dim"], 0.5, top_level=False)),
        tensors=TENSORS,
    )
