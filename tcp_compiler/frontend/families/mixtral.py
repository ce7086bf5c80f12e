"""Mixtral: Mistral attention with a top-k routed mixture of SwiGLU experts in every layer."""

from tcp_compiler.frontend.config import ModelConfig, Moe, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family


@family("mixtral", defaults={"num_key_value_heads": 8}, architectures=("MixtralForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)
    types = layer_types(raw, ["sliding_attention" if window else "full_attention"] * n)
    moe = Moe(
        experts=raw.require("num_local_experts"),
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=True,
        router_name="model.layers.{i}.block_sparse_moe.gate.weight",
        expert_names=(
            "model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight",
            "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
            "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight",
        ),
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({moe.experts})")
    rope = {"default": read_rope(raw, default_theta=1_000_000.0)}
    return dense(raw, "mixtral", name, moe=moe, layers=layers(raw, types, window, rope, set(range(n))))
