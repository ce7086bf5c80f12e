"""DeepSeek-V2 / V2-Lite / V2.5 / Coder-V2: DeepSeek-V3's latent attention (q_lora_rank null in
V2-Lite: one q_proj) with RoPE on interleaved pairs always, and MoE layers from
first_k_dense_replace on routed as transformers' DeepseekV2TopkRouter does: a softmax over the
experts, then the top k (topk_method "greedy") or the top k within the topk_group groups whose
best score is highest ("group_limited_greedy"), the weights times routed_scaling_factor. That
router never renormalises the k weights, whatever norm_topk_prob says (the published configs
all say false), so neither does tcpc. Yarn's mscale_all_dim scales the softmax as in V3."""

from __future__ import annotations

from tcp_compiler.frontend.config import Attention, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.deepseek_parts import deepseek_moe, every_layer_from, mla_scale, read_mla
from tcp_compiler.frontend.families.registry import family

# DeepseekV2Config's defaults for the fields a config may leave out (transformers 5.23.0).
DEFAULTS = {
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "first_k_dense_replace": 0,
    "routed_scaling_factor": 1.0,
    "topk_method": "greedy",
    "moe_intermediate_size": 1407,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 2048,
}
TOPK_METHODS = ("greedy", "group_limited_greedy")


@family("deepseek_v2", defaults=DEFAULTS, architectures=("DeepseekV2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    for flag in ("attention_bias", "mlp_bias"):
        if raw.get(flag, False, kind=bool):
            raise raw.fail(f"{flag}: true is not supported for deepseek_v2 (released models have none)")
    if raw.get("scoring_func", "softmax", kind=str) != "softmax":
        raise raw.fail(f"scoring_func: expected 'softmax', got {raw.get('scoring_func')!r}")
    method = raw.get("topk_method", kind=str)
    if method not in TOPK_METHODS:
        raise raw.fail(f"topk_method: expected one of {', '.join(TOPK_METHODS)}, got {method!r}")
    groups = (1, 1)
    if method == "group_limited_greedy":
        groups = (raw.require("n_group"), raw.require("topk_group"))
    mla = read_mla(raw)
    return dense(
        raw,
        "deepseek_v2",
        name,
        head_dim_default=mla.nope_dim + mla.rope_dim,
        head_dim=mla.nope_dim + mla.rope_dim,
        kv_heads=raw.require("num_attention_heads"),  # every head reads the one latent
        positions=Positions(rotary_dim=mla.rope_dim, interleave=True),
        attention=Attention(scale=mla_scale(raw, mla)),
        mla=mla,
        moe=deepseek_moe(raw, "softmax", False, groups, "max"),
        layers=layers(
            raw,
            layer_types(raw, ["full_attention"] * n),
            None,
            {"default": read_rope(raw)},
            every_layer_from(raw, raw.get("first_k_dense_replace", 0, kind=int)),
        ),
    )
