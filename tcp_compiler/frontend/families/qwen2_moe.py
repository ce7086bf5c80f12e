"""Qwen1.5-MoE / Qwen2-MoE: Qwen 2 attention (q/k/v biases) with softmax-routed experts plus a
shared expert every token runs, scaled by sigmoid(shared_expert_gate(x)) before it is added."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Moe, RawConfig, SharedExpert, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, sparse_layers
from tcp_compiler.frontend.families.registry import family


@family(
    "qwen2_moe",
    defaults={"num_key_value_heads": 16, "shared_expert_intermediate_size": 5632},
    architectures=("Qwen2MoeForCausalLM",),
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    experts = raw.require("num_experts")
    pre = "model.layers.{i}.mlp"
    moe = Moe(
        experts=experts,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("moe_intermediate_size"),
        normalize_top_k=bool(raw.get("norm_topk_prob", False, kind=bool)),
        router_name=f"{pre}.gate.weight",
        expert_names=tuple(f"{pre}.experts.{{e}}.{p}_proj.weight" for p in ("gate", "up", "down")),
        shared=SharedExpert(
            raw.require("shared_expert_intermediate_size"),
            tuple(f"{pre}.shared_expert.{p}_proj.weight" for p in ("gate", "up", "down")),
            gate_name=f"{pre}.shared_expert_gate.weight",
        ),
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_experts ({moe.experts})")
    types, window = _windows(raw)
    return dense(
        raw,
        "qwen2_moe",
        name,
        attention=Attention(qkv_bias=bool(raw.get("qkv_bias", True, kind=bool))),
        moe=moe,
        layers=layers(raw, types, window, {"default": read_rope(raw)}, sparse_layers(raw)),
    )


def _windows(raw: RawConfig) -> tuple[list[str], int | None]:
    """transformers' Qwen2-MoE rule: with use_sliding_window, even-indexed layers below
    max_window_layers slide; `layer_types` overrides it."""
    n = raw.require("num_hidden_layers")
    enabled = bool(raw.get("use_sliding_window", False, kind=bool))
    first = raw.get("max_window_layers", 28, kind=int)  # transformers' default
    slides = [enabled and i % 2 == 0 and i < first for i in range(n)]
    types = layer_types(raw, ["sliding_attention" if s else "full_attention" for s in slides])
    window = raw.get("sliding_window", kind=int) if "sliding_attention" in types else None
    return types, window
