"""Qwen3.5, dense (qwen3_5) and MoE (qwen3_5_moe): the text model of the image-text config
(`text_config`, model_type qwen3_5_text / qwen3_5_moe_text; a bare text config is read too).
It is Qwen3-Next's hybrid (qwen3_next.hybrid: gated DeltaNet layers and gated attention with
q/k norms and partial RoPE, (1 + w) RMSNorms) with two differences in transformers 5.23.0's
modelling: the DeltaNet's input projections are four separate ones (in_proj_qkv, in_proj_z,
in_proj_b, in_proj_a: Ssm.fused_projections off), and every layer's MLP is dense
(intermediate_size, Qwen3.5) or the MoE block (Qwen3.5-MoE: every layer, top-k weights always
renormalised; decoder_sparse_step, mlp_only_layers and norm_topk_prob are not read).

RoPE is M-RoPE (`mrope_section`, `mrope_interleaved`): each rotary frequency takes its angle from
the time, height or width position of the token. A text token's three positions are all its
sequence position, so for the text-only inputs tcpc runs every frequency sees that position and
M-RoPE is the ordinary partial RoPE (rope_theta, partial_rotary_factor of head_dim)."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.qwen3_next import experts, hybrid
from tcp_compiler.frontend.families.registry import family

# Qwen3_5TextConfig's and Qwen3_5MoeTextConfig's class defaults (transformers 5.23.0) for the
# fields a config may leave out; applied to the text config, so not the registry's top-level ones
SHARED_DEFAULTS: dict[str, Any] = dict(
    vocab_size=248_320, num_attention_heads=16, hidden_act="silu", max_position_embeddings=32_768,
    rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, head_dim=256,
    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16,
    linear_num_value_heads=32, full_attention_interval=4,
)  # fmt: skip
DENSE_DEFAULTS: dict[str, Any] = dict(
    SHARED_DEFAULTS, hidden_size=4096, intermediate_size=12_288, num_hidden_layers=32, num_key_value_heads=4
)
MOE_DEFAULTS: dict[str, Any] = dict(
    SHARED_DEFAULTS, hidden_size=2048, num_hidden_layers=40, num_key_value_heads=2, moe_intermediate_size=512,
    shared_expert_intermediate_size=512, num_experts_per_tok=8, num_experts=256,
)  # fmt: skip


def text_config_of(raw: RawConfig, text_type: str, defaults: dict[str, Any]) -> RawConfig:
    """The text model's config: `text_config` of an image-text config (its errors name
    `text_config.field`), or the config itself when its model_type is `text_type`; with the text
    config class's `defaults` for what it leaves out (an explicit null keeps the reader's rule)."""
    if raw.data.get("model_type") != text_type:
        if not raw.has("text_config"):
            raise raw.fail(f"missing field 'text_config' (a {raw.family} config nests the text model there)")
        raw = raw.nested("text_config")
    return RawConfig({**defaults, **raw.data}, raw.source, raw.family, raw.prefix)


@family("qwen3_5", "qwen3_5_text", architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"))
def read(raw: RawConfig, name: str) -> ModelConfig:
    text = text_config_of(raw, "qwen3_5_text", DENSE_DEFAULTS)
    return hybrid(text, "qwen3_5", name, None, set(), fused_projections=False)


@family(
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    architectures=("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
)
def read_moe(raw: RawConfig, name: str) -> ModelConfig:
    text = text_config_of(raw, "qwen3_5_moe_text", MOE_DEFAULTS)
    # every layer is MoE: the dense MLP width is never used (the class has no intermediate_size)
    text = RawConfig({**text.data, "intermediate_size": text.require("moe_intermediate_size")}, text.source,
                     text.family, text.prefix)  # fmt: skip
    layers = set(range(text.require("num_hidden_layers")))
    return hybrid(text, "qwen3_5_moe", name, experts(text, normalize=True), layers, fused_projections=False)
