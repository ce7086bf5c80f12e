"""DeepSeek-V3: multi-head latent attention (tcp_compiler.frontend.builder.mla) and, after the first
`first_k_dense_replace` dense layers, MoE layers with sigmoid scores, a selection-only correction
bias, grouped top-k (groups ranked by their two best scores), routed_scaling_factor and
n_shared_experts shared experts."""

from __future__ import annotations

from tcp_compiler.frontend.config import Attention, ModelConfig, Moe, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.deepseek_parts import deepseek_moe, every_layer_from, mla_scale, read_mla
from tcp_compiler.frontend.families.registry import family

# DeepseekV3Config's defaults for the fields a config may leave out (transformers 5.23.0).
DEFAULTS = {
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "first_k_dense_replace": 3,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "moe_intermediate_size": 2048,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 4096,
}


@family("deepseek_v3", defaults=DEFAULTS, architectures=("DeepseekV3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return mla_moe_model(
        raw, name, "deepseek_v3", every_layer_from(raw, raw.get("first_k_dense_replace", 3, kind=int))
    )


def mla_moe_model(raw: RawConfig, name: str, family_name: str, moe_layers: set[int]) -> ModelConfig:
    """DeepSeek-V3's decoder (latent attention, sigmoid-routed experts on `moe_layers`, dense MLPs
    elsewhere), for the families that reuse it (GLM-4.7-Flash's glm4_moe_lite)."""
    n = raw.require("num_hidden_layers")
    if raw.get("attention_bias", False, kind=bool):
        raise raw.fail(f"attention_bias: true is not supported for {family_name} (released models have none)")
    if raw.get("scoring_func", "sigmoid", kind=str) != "sigmoid":
        raise raw.fail(f"scoring_func: expected 'sigmoid', got {raw.get('scoring_func')!r}")
    mla = read_mla(raw)
    heads = raw.require("num_attention_heads")
    return dense(
        raw,
        family_name,
        name,
        head_dim_default=mla.nope_dim + mla.rope_dim,
        head_dim=mla.nope_dim + mla.rope_dim,
        kv_heads=heads,  # every head reads the one latent; num_key_value_heads plays no part
        positions=Positions(
            rotary_dim=mla.rope_dim, interleave=bool(raw.get("rope_interleave", True, kind=bool))
        ),
        attention=Attention(scale=mla_scale(raw, mla)),
        mla=mla,
        moe=sigmoid_moe(raw),
        layers=layers(
            raw,
            layer_types(raw, ["full_attention"] * n),
            None,
            {"default": read_rope(raw)},
            moe_layers,
        ),
    )


def sigmoid_moe(
    raw: RawConfig,
    correction_bias: str = "gate.e_score_correction_bias",
    keys: tuple[str, str] = ("n_routed_experts", "n_shared_experts"),
) -> Moe:
    """DeepSeek-V3's MoE (GLM-4.5's and K-EXAONE's too): sigmoid scores, the correction bias, top-k
    within the topk_group best of n_group groups (ranked by their two best scores),
    routed_scaling_factor and shared experts, under DeepSeek's tensor names; `correction_bias` and
    `keys` as deepseek_moe takes them, for the families that spell them otherwise."""
    n_group = raw.get("n_group", 1, kind=int)
    return deepseek_moe(
        raw,
        "sigmoid",
        bool(raw.get("norm_topk_prob", True, kind=bool)),
        (n_group, raw.get("topk_group", n_group, kind=int)),
        correction_bias=correction_bias,
        keys=keys,
    )
