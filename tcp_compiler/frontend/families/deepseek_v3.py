"""DeepSeek-V3: multi-head latent attention (tcp_compiler.frontend.builder.mla) and, after the first
`first_k_dense_replace` dense layers, MoE layers with sigmoid scores, a selection-only correction
bias, grouped top-k, routed_scaling_factor and n_shared_experts shared experts."""

from __future__ import annotations

import math

from tcp_compiler.frontend.config import (
    Attention,
    Mla,
    ModelConfig,
    Moe,
    Positions,
    RawConfig,
    SharedExpert,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.schema import MAX_WIDTH


@family("deepseek_v3", architectures=("DeepseekV3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    if raw.get("attention_bias", False, kind=bool):
        raise raw.fail("attention_bias: true is not supported for deepseek_v3 (released models have none)")
    if raw.get("scoring_func", "sigmoid", kind=str) != "sigmoid":
        raise raw.fail(f"scoring_func: expected 'sigmoid', got {raw.get('scoring_func')!r}")
    mla = Mla(
        q_lora_rank=raw.get("q_lora_rank", kind=int),
        kv_lora_rank=raw.require("kv_lora_rank"),
        nope_dim=raw.require("qk_nope_head_dim"),
        rope_dim=raw.require("qk_rope_head_dim"),
        v_dim=raw.require("v_head_dim"),
    )
    if mla.rope_dim % 2:
        raise raw.fail(f"qk_rope_head_dim must be even for rotary embeddings, got {mla.rope_dim}")
    rope = read_rope(raw)
    heads = raw.require("num_attention_heads")
    first_moe = raw.get("first_k_dense_replace", 3, kind=int)
    return dense(
        raw,
        "deepseek_v3",
        name,
        head_dim_default=mla.nope_dim + mla.rope_dim,
        head_dim=mla.nope_dim + mla.rope_dim,
        kv_heads=heads,  # every head reads the one latent; num_key_value_heads plays no part
        positions=Positions(
            rotary_dim=mla.rope_dim, interleave=bool(raw.get("rope_interleave", True, kind=bool))
        ),
        attention=Attention(scale=(mla.nope_dim + mla.rope_dim) ** -0.5 * _mscale_squared(raw)),
        mla=mla,
        moe=sigmoid_moe(raw),
        layers=layers(
            raw, layer_types(raw, ["full_attention"] * n), None, {"default": rope}, set(range(first_moe, n))
        ),  # fmt: skip
    )


def sigmoid_moe(raw: RawConfig) -> Moe:
    """DeepSeek-V3's MoE (GLM-4.5's too): sigmoid scores, the correction bias, grouped top-k,
    routed_scaling_factor and n_shared_experts shared experts, under DeepSeek's tensor names."""
    pre = "model.layers.{i}.mlp"
    experts = raw.get("n_routed_experts", raw.get("num_local_experts"), kind=int)
    if experts is None:
        raise raw.fail(f"missing field 'n_routed_experts' (needed for {raw.family} models)")
    groups = raw.get("n_group", 1, kind=int)
    topk_groups = raw.get("topk_group", groups, kind=int)
    top_k = raw.require("num_experts_per_tok")
    moe_f = raw.require("moe_intermediate_size")
    if experts % groups or experts // groups < 2:
        raise raw.fail(f"n_group ({groups}) must split n_routed_experts ({experts}) into groups of 2 or more")
    if topk_groups > groups:
        raise raw.fail(f"topk_group ({topk_groups}) exceeds n_group ({groups})")
    if top_k > topk_groups * experts // groups:
        raise raw.fail(
            f"num_experts_per_tok ({top_k}) exceeds the {topk_groups * experts // groups} experts "
            f"of topk_group ({topk_groups}) groups"
        )
    shared = raw.get("n_shared_experts", 0, kind=int)
    if shared * moe_f > MAX_WIDTH:
        raise raw.fail(
            f"n_shared_experts x moe_intermediate_size ({shared} x {moe_f}): expected at most {MAX_WIDTH:,}"
        )
    return Moe(
        experts=experts,
        top_k=top_k,
        intermediate=moe_f,
        normalize_top_k=bool(raw.get("norm_topk_prob", True, kind=bool)),
        router_name=f"{pre}.gate.weight",
        expert_names=tuple(f"{pre}.experts.{{e}}.{p}_proj.weight" for p in ("gate", "up", "down")),
        scoring="sigmoid",
        correction_bias_name=f"{pre}.gate.e_score_correction_bias",
        groups=groups,
        topk_groups=topk_groups,
        routed_scale=float(raw.get("routed_scaling_factor", 2.5, kind=float)),
        shared=SharedExpert(
            shared * moe_f, tuple(f"{pre}.shared_experts.{p}_proj.weight" for p in ("gate", "up", "down"))
        )
        if shared
        else None,
    )


def _mscale_squared(raw: RawConfig) -> float:
    """transformers' DeepseekV3Attention scales the softmax by yarn's mscale(factor,
    mscale_all_dim)^2 when the RoPE is scaled (any rope_type but default) and mscale_all_dim is set."""
    params = raw.nested("rope_parameters" if raw.has("rope_parameters") else "rope_scaling")
    kind = params.get("rope_type", params.get("type", "default"))
    all_dims = params.get("mscale_all_dim")
    if kind == "default" or not all_dims:
        return 1.0
    factor = float(params.require("factor", float))
    mscale = 1.0 if factor <= 1 else 0.1 * float(all_dims) * math.log(factor) + 1.0
    return mscale * mscale
