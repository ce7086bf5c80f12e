"""Qwen 3 MoE: Qwen 3 attention (q/k norms) with routed experts; optional top-k renormalisation."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Moe, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layers, qwen_windows, sparse_layers
from tcp_compiler.frontend.families.registry import family


@family("qwen3_moe", defaults={"num_key_value_heads": 4}, architectures=("Qwen3MoeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    experts = raw.get("num_experts", raw.get("num_local_experts"), kind=int)
    if experts is None:
        raise raw.fail("missing field 'num_experts' (needed for qwen3_moe models)")
    moe = Moe(
        experts=experts,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("moe_intermediate_size"),
        normalize_top_k=bool(raw.get("norm_topk_prob", False, kind=bool)),
        router_name="model.layers.{i}.mlp.gate.weight",
        expert_names=(
            "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
            "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
            "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
        ),
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_experts ({moe.experts})")
    moe_layers = sparse_layers(raw)
    types, window = qwen_windows(raw)
    return dense(
        raw,
        "qwen3_moe",
        name,
        attention=Attention(qkv_bias=bool(raw.get("attention_bias", False, kind=bool)), qk_norm="per_head"),
        moe=moe,
        layers=layers(raw, types, window, {"default": read_rope(raw)}, moe_layers),
    )
