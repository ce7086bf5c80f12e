"""DeepSeek-MoE (V1, `model_type: deepseek`, remote code: deepseek-moe-16b): Llama attention (MHA
or GQA, rotate_half RoPE with none, linear or dynamic scaling, attention_bias) and, where
n_routed_experts is set, MoE layers from first_k_dense_replace on, every moe_layer_freq-th:
fine-grained experts picked by a softmax top-k (renormalised when norm_topk_prob and k > 1) plus
n_shared_experts x moe_intermediate_size of shared expert every token runs."""

from __future__ import annotations

import dataclasses

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, Rope, read_rope
from tcp_compiler.frontend.families.common import dense, layers
from tcp_compiler.frontend.families.deepseek_parts import deepseek_moe
from tcp_compiler.frontend.families.registry import family

# DeepseekConfig's defaults (configuration_deepseek.py of deepseek-moe-16b) for fields a config
# may leave out.
DEFAULTS = {"moe_intermediate_size": 1407, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6}
ROPE_TYPES = ("default", "linear", "dynamic")  # what its rotary embedding classes implement


@family("deepseek", defaults=DEFAULTS, architectures=("DeepseekForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    if raw.get("scoring_func", "softmax", kind=str) != "softmax":
        raise raw.fail(f"scoring_func: expected 'softmax', got {raw.get('scoring_func')!r}")
    moe = None
    moe_layers: set[int] = set()
    if raw.has("n_routed_experts"):
        top_k = raw.require("num_experts_per_tok")
        normalize = bool(raw.get("norm_topk_prob", False, kind=bool)) and top_k > 1
        moe = dataclasses.replace(deepseek_moe(raw, "softmax", normalize), routed_scale=1.0)
        first = raw.get("first_k_dense_replace", 0, kind=int)
        freq = raw.get("moe_layer_freq", 1, kind=int)
        moe_layers = {i for i in range(first, n) if i % freq == 0}
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "deepseek",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        moe=moe,
        layers=layers(raw, ["full_attention"] * n, None, {"default": _rope(raw)}, moe_layers),
    )


def _rope(raw: RawConfig) -> Rope:
    rope = read_rope(raw)
    if rope.kind not in ROPE_TYPES:
        supported = ", ".join(ROPE_TYPES)
        raise raw.fail(f"rope_scaling: type '{rope.kind}' is not supported for deepseek ({supported})")
    return rope
