"""GLM-4.5 and GLM-4.5-Air (`Glm4MoeForCausalLM`): GQA with q/k/v biases (`attention_bias`) and an
optional RMSNorm on each query and key head (`use_qk_norm`), RoPE on the first
partial_rotary_factor of each head (0.5 by default) in rotate-half pairs; the first
`first_k_dense_replace` layers dense, the rest DeepSeek-V3's MoE (sigmoid scores, a
selection-only correction bias, top-k within the best topk_group of n_group groups,
routed_scaling_factor, n_shared_experts shared experts). The multi-token-prediction layers
(`num_nextn_predict_layers`) are neither loaded by transformers nor counted here."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, partial_rotary, sizes
from tcp_compiler.frontend.families.deepseek_v3 import sigmoid_moe
from tcp_compiler.frontend.families.registry import family

# Glm4MoeConfig's defaults for fields a config may leave out.
DEFAULTS = {
    "num_key_value_heads": 8,
    "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 131072,
    "n_routed_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 1408,
    "n_shared_experts": 1,
    "routed_scaling_factor": 1.0,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "norm_topk_prob": True,
}


@family("glm4_moe", defaults=DEFAULTS, architectures=("Glm4MoeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    moe_layers = set(range(raw.get("first_k_dense_replace", kind=int), n))
    qk_norm = "per_head" if raw.get("use_qk_norm", False, kind=bool) else "none"
    return dense(
        raw,
        "glm4_moe",
        name,
        positions=Positions(rotary_dim=partial_rotary(raw, sizes(raw)["head_dim"])),
        attention=Attention(qkv_bias=bool(raw.get("attention_bias", False, kind=bool)), qk_norm=qk_norm),
        moe=sigmoid_moe(raw),
        layers=layers(
            raw, layer_types(raw, ["full_attention"] * n), None, {"default": read_rope(raw)}, moe_layers
        ),
    )
