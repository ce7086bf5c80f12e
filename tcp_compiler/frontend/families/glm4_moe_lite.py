"""GLM-4.7-Flash (`Glm4MoeLiteForCausalLM`): DeepSeek-V3's latent attention (transformers'
Glm4MoeLiteAttention is DeepseekV3Attention, RoPE on interleaved pairs by default) and GLM-4.5's
MoE, which is DeepSeek-V3's routing (sigmoid scores, correction bias, top-k within the best
topk_group of n_group groups, routed_scaling_factor, shared experts): read by the deepseek_v3
reader with Glm4MoeLiteConfig's own defaults. The MoE layers are `mlp_layer_types`' sparse ones,
else every layer but the first: transformers ignores first_k_dense_replace here. Its RoPE spans
head_dim, which Glm4MoeLiteConfig maps onto qk_rope_head_dim."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import partial_rotary, sparse_mlp_layers
from tcp_compiler.frontend.families.deepseek_v3 import mla_moe_model
from tcp_compiler.frontend.families.registry import family

# Glm4MoeLiteConfig's defaults (transformers 5.23.0) for the fields a config may leave out.
DEFAULTS = {
    "vocab_size": 154_880,
    "hidden_size": 2048,
    "intermediate_size": 10_240,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 47,
    "num_attention_heads": 20,
    "num_key_value_heads": 20,
    "n_shared_experts": 1,
    "n_routed_experts": 64,
    "routed_scaling_factor": 1.8,
    "kv_lora_rank": 512,
    "q_lora_rank": 768,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "qk_nope_head_dim": 192,
    "n_group": 1,
    "topk_group": 1,
    "num_experts_per_tok": 4,
    "norm_topk_prob": True,
    "max_position_embeddings": 202_752,
    "rms_norm_eps": 1e-5,
}


@family("glm4_moe_lite", defaults=DEFAULTS, architectures=("Glm4MoeLiteForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    rope_dim = raw.require("qk_rope_head_dim")
    if raw.has("head_dim") and raw.get("head_dim", kind=int) != rope_dim:
        raise raw.fail(
            f"head_dim ({raw.get('head_dim')}) must equal qk_rope_head_dim ({rope_dim}): "
            "Glm4MoeLiteConfig reads head_dim as qk_rope_head_dim"
        )
    if partial_rotary(raw, rope_dim) is not None:
        raise raw.fail(
            "partial_rotary_factor: expected 1.0 (latent attention rotates all qk_rope_head_dim dims)"
        )
    return mla_moe_model(raw, name, "glm4_moe_lite", sparse_mlp_layers(raw, 1))
