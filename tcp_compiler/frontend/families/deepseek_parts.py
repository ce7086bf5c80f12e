"""What the DeepSeek families (V1 `deepseek`, `deepseek_v2`, `deepseek_v3`) share: the latent
attention's sizes and softmax scale (V2, V3), and the MoE block: n_routed_experts fine-grained
experts routed by `mlp.gate`, n_shared_experts x moe_intermediate_size of shared expert every token
runs, expert groups where the family has them."""

from __future__ import annotations

import math

from tcp_compiler.frontend.config import GroupScore, Mla, Moe, RawConfig, Scoring, SharedExpert
from tcp_compiler.frontend.schema import MAX_WIDTH

PREFIX = "model.layers.{i}.mlp"


def read_mla(raw: RawConfig) -> Mla:
    """The latent attention's sizes (q_lora_rank null: queries through one q_proj)."""
    mla = Mla(
        q_lora_rank=raw.get("q_lora_rank", kind=int),
        kv_lora_rank=raw.require("kv_lora_rank"),
        nope_dim=raw.require("qk_nope_head_dim"),
        rope_dim=raw.require("qk_rope_head_dim"),
        v_dim=raw.require("v_head_dim"),
    )
    if mla.rope_dim % 2:
        raise raw.fail(f"qk_rope_head_dim must be even for rotary embeddings, got {mla.rope_dim}")
    return mla


def mla_scale(raw: RawConfig, mla: Mla) -> float:
    """The softmax scale of DeepSeek-V2 / V3 attention: 1/sqrt(qk head dim), times yarn's
    mscale(factor, mscale_all_dim)^2 when the RoPE is scaled (any rope_type but default) and
    mscale_all_dim is set, as transformers' yarn_apply_mscale (V2) and DeepseekV3Attention apply it."""
    params = raw.nested("rope_parameters" if raw.has("rope_parameters") else "rope_scaling")
    kind = params.get("rope_type", params.get("type", "default"))
    all_dims = params.get("mscale_all_dim")
    scale = (mla.nope_dim + mla.rope_dim) ** -0.5
    if kind == "default" or not all_dims:
        return scale
    factor = float(params.require("factor", float))
    mscale = 1.0 if factor <= 1 else 0.1 * float(all_dims) * math.log(factor) + 1.0
    return scale * mscale * mscale


def every_layer_from(raw: RawConfig, first: int) -> set[int]:
    """The MoE layers of transformers' DeepSeek-V2 / V3: every layer from first_k_dense_replace on.
    Their code ignores moe_layer_freq (the remote code skips layers by it), so a config where the
    two would differ is refused rather than read one way silently."""
    n = raw.require("num_hidden_layers")
    freq = raw.get("moe_layer_freq", 1, kind=int)
    if freq != 1:
        raise raw.fail(
            f"moe_layer_freq: expected 1 (transformers puts experts in every layer from "
            f"first_k_dense_replace on), got {freq}"
        )
    return set(range(first, n))


def deepseek_moe(
    raw: RawConfig,
    scoring: Scoring,
    normalize: bool,
    groups: tuple[int, int] = (1, 1),
    group_score: GroupScore = "top2_sum",
    correction_bias: str | None = None,
    keys: tuple[str, str] = ("n_routed_experts", "n_shared_experts"),
    top_k_key: str = "num_experts_per_tok",
) -> Moe:
    """The MoE block: `groups` is (n_group, topk_group) when routing is group-limited;
    `correction_bias` the correction bias's name (with {i}) under PREFIX when routing has one; `keys`
    the family's names for the routed and the shared expert counts (K-EXAONE says num_experts and
    num_shared_experts), `top_k_key` its name for the experts per token (ERNIE 4.5 says moe_k)."""
    experts_key, shared_key = keys
    experts = raw.require(experts_key)
    top_k = raw.require(top_k_key)
    moe_f = raw.require("moe_intermediate_size")
    n_group, topk_group = groups
    smallest = 2 if group_score == "top2_sum" else 1  # a group's score needs that many experts
    if experts % n_group or experts // n_group < smallest:
        raise raw.fail(
            f"n_group ({n_group}) must split {experts_key} ({experts}) into groups of {smallest} or more"
        )
    if topk_group > n_group:
        raise raw.fail(f"topk_group ({topk_group}) exceeds n_group ({n_group})")
    eligible = topk_group * experts // n_group
    if top_k > eligible:
        what = f"of topk_group ({topk_group}) groups" if n_group > 1 else f"({experts_key})"
        raise raw.fail(f"{top_k_key} ({top_k}) exceeds the {eligible} experts {what}")
    shared = raw.get(shared_key, 0, kind=int)
    if shared * moe_f > MAX_WIDTH:
        raise raw.fail(
            f"{shared_key} x moe_intermediate_size ({shared} x {moe_f}): expected at most {MAX_WIDTH:,}"
        )
    return Moe(
        experts=experts,
        top_k=top_k,
        intermediate=moe_f,
        normalize_top_k=normalize,
        router_name=f"{PREFIX}.gate.weight",
        expert_names=tuple(f"{PREFIX}.experts.{{e}}.{p}_proj.weight" for p in ("gate", "up", "down")),
        scoring=scoring,
        correction_bias_name=f"{PREFIX}.{correction_bias}" if correction_bias else None,
        groups=n_group,
        topk_groups=topk_group,
        group_score=group_score,
        routed_scale=float(raw.get("routed_scaling_factor", 1.0, kind=float)),
        shared=SharedExpert(
            shared * moe_f, tuple(f"{PREFIX}.shared_experts.{p}_proj.weight" for p in ("gate", "up", "down"))
        )
        if shared
        else None,
    )
