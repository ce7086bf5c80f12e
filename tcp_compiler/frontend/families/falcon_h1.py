"""Falcon-H1 (TII): every layer runs attention and a Mamba-2 mixer side by side on the same normed
input and adds their outputs (Layer.beside), so each layer keeps a KV cache and a recurrent state;
then a LLaMA-style gated MLP. muP multipliers scale the embedding, the logits, attention's input,
output and keys, the Mamba mixer's input and output and each span of its in_proj output (z, x, B,
C, dt: ssm_multipliers), the MLP's gate (inside the activation) and its down projection. The
mixer's inner width is mamba_d_ssm (expand x hidden when null); its gated RMSNorm is optional
(mamba_rms_norm, off by default: y * silu(z)) and normalises before the gate by default
(mamba_norm_before_gate); in_proj's bias is mamba_proj_bias, out_proj's projectors_bias.
mamba_use_mlp and attn_layer_indices, which published configs carry, are not read by
transformers 5.23.0 either: every layer has both mixers and an MLP. Checkpoint names are Bamba's
(`mamba.*`, `feed_forward.*`, `pre_ff_layernorm`, `final_layernorm`)."""

from __future__ import annotations

import dataclasses
import math

from tcp_compiler.frontend.config import Attention, Embedding, Layer, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.bamba import MAMBA_KEYS, TENSORS
from tcp_compiler.frontend.families.common import dense, dense_mlp
from tcp_compiler.frontend.families.mamba2 import mamba2_mixer
from tcp_compiler.frontend.families.registry import family

# FalconH1Config's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", rms_norm_eps=1e-5,
    max_position_embeddings=8192, mamba_d_ssm=1024, mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1,
    mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
    mamba_proj_bias=False, mamba_norm_before_gate=True, mamba_rms_norm=False,
    time_step_limit=[0.0, math.inf], projectors_bias=False, lm_head_multiplier=1.0, embedding_multiplier=1.0,
    mlp_multipliers=[1.0, 1.0], key_multiplier=1.0, attention_out_multiplier=1.0, attention_in_multiplier=1.0,
    ssm_multipliers=[1.0] * 5, ssm_in_multiplier=1.0, ssm_out_multiplier=1.0, attention_bias=False,
    mlp_bias=False,
)  # fmt: skip

# the mixer's fields are Bamba's, with the inner width given by mamba_d_ssm when it is set
MAMBA_KEYS = dataclasses.replace(MAMBA_KEYS, inner="mamba_d_ssm")


def _number(raw: RawConfig, key: str) -> float:
    return float(raw.require(key, (int, float)))


def _numbers(raw: RawConfig, key: str, count: int, what: str) -> tuple[float, ...]:
    """A list of exactly `count` numbers (transformers unpacks or indexes exactly that many)."""
    values = raw.require(key, list)
    if len(values) != count:
        raise raw.fail(f"{raw.path(key)}: expected {count} numbers ({what}), got {len(values)}")
    return tuple(float(v) for v in values)


@family("falcon_h1", defaults=DEFAULTS, architectures=("FalconH1ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    gate_scale, down_scale = _numbers(raw, "mlp_multipliers", 2, "gate, down")
    mlp = dense_mlp(raw, bias=bool(raw.get("mlp_bias", kind=bool)))
    if not raw.get("mamba_rms_norm", kind=bool):
        gated_norm = "none"
    else:
        gated_norm = "norm_then_gate" if raw.get("mamba_norm_before_gate", kind=bool) else "gated"
    ssm = dataclasses.replace(
        mamba2_mixer(raw, MAMBA_KEYS),
        out_bias=bool(raw.get("projectors_bias", kind=bool)),
        gated_norm=gated_norm,
        in_scale=_number(raw, "ssm_in_multiplier"),
        out_scale=_number(raw, "ssm_out_multiplier"),
        projection_scales=_numbers(raw, "ssm_multipliers", 5, "z, x, B, C, dt"),
    )
    bias = bool(raw.get("attention_bias", kind=bool))
    embed = _number(raw, "embedding_multiplier")
    rope = read_rope(raw)
    n = raw.require("num_hidden_layers")
    return dense(
        raw,
        "falcon_h1",
        name,
        layers=tuple(Layer(None, rope, "rope", False, beside=("mamba",)) for _ in range(n)),
        ssm=ssm,
        attention=Attention(
            qkv_bias=bias,
            out_bias=bias,
            in_scale=_number(raw, "attention_in_multiplier"),
            out_scale=_number(raw, "attention_out_multiplier"),
            key_scale=_number(raw, "key_multiplier"),
        ),
        mlp=dataclasses.replace(mlp, gate_scale=gate_scale, down_scale=down_scale),
        embedding=Embedding(
            scale=None if embed == 1.0 else embed,
            tied=bool(raw.get("tie_word_embeddings", kind=bool)),
            logits_scale=_number(raw, "lm_head_multiplier"),
        ),
        tensors=TENSORS,
    )
