"""Phi-3.5-MoE: Mixtral's layout (block_sparse_moe: router `gate`, experts w1 / w3 / w2 in every
layer) routed by sparsemixer (the top 2 experts, each weighed by a softmax over the experts within
router_jitter_noise of it; tcp_compiler.frontend.builder.routing), LayerNorm with bias (eps from
rms_norm_eps), q/k/v/o biases (attention_bias), an LM head with a bias (lm_head_bias), a sliding
window on every layer when set, and longrope whose cos and sin are scaled by short_mscale, or
long_mscale once the sequence passes original_max_position_embeddings.

transformers 5.23's PhimoeRotaryEmbedding recomputes the frequencies without the sequence length
on every forward, so it never applies the long factors (while switching to long_mscale); its 4.x
PhimoeRotaryEmbedding passed the length and switched to them past the original context, as
transformers' Phi-3 still does, and so does tcpc (the oracle test restores that switch in
transformers; tests/oracle/test_round3_families.py)."""

from __future__ import annotations

import dataclasses

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    ModelConfig,
    Moe,
    Norms,
    RawConfig,
    Rope,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family

# PhimoeConfig's defaults for the fields a config may leave out (transformers 5.23.0).
DEFAULTS = {
    "num_key_value_heads": 8,
    "max_position_embeddings": 4096 * 32,
    "num_local_experts": 16,
    "num_experts_per_tok": 2,
    "router_jitter_noise": 0.01,
    "rms_norm_eps": 1e-5,
}
PRE = "model.layers.{i}.block_sparse_moe"


# transformers' class, and the remote-code class the published configs name
@family("phimoe", defaults=DEFAULTS, architectures=("PhimoeForCausalLM", "PhiMoEForCausalLM"))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    experts = raw.require("num_local_experts")
    top_k = raw.require("num_experts_per_tok")
    if top_k != 2 or experts < 2:
        raise raw.fail(
            f"num_experts_per_tok: sparsemixer routes every token to 2 of num_local_experts "
            f"({experts}) experts, got {top_k}"
        )
    moe = Moe(
        experts=experts,
        top_k=2,
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=False,
        router_name=f"{PRE}.gate.weight",
        expert_names=tuple(f"{PRE}.experts.{{e}}.{w}.weight" for w in ("w1", "w3", "w2")),
        sparsemixer_eps=float(raw.get("router_jitter_noise", 0.01)),
    )
    window = raw.get("sliding_window", kind=int)
    types = layer_types(raw, ["sliding_attention" if window else "full_attention"] * n)
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "phimoe",
        name,
        norms=Norms(float(raw.get("rms_norm_eps", 1e-5, kind=(int, float))), "layer"),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(
            tied=bool(raw.get("tie_word_embeddings", False, kind=bool)),
            head_bias=bool(raw.get("lm_head_bias", False, kind=bool)),
        ),
        moe=moe,
        layers=layers(raw, types, window, {"default": _rope(raw)}, set(range(n))),
    )


def _rope(raw: RawConfig) -> Rope:
    """Default RoPE, or longrope with its short_mscale and long_mscale in place of the attention
    factor (transformers requires both numbers for a scaled RoPE)."""
    rope = read_rope(raw)
    if rope.kind == "default":
        return rope
    if rope.kind != "longrope":
        where = rope.source or "rope_scaling"
        raise raw.fail(f"{where}: rope_type '{rope.kind}' is not supported for phimoe (default, longrope)")
    params = raw.nested("rope_parameters" if raw.has("rope_parameters") else "rope_scaling")
    short, long = (float(params.require(f"{k}_mscale", float)) for k in ("short", "long"))
    return dataclasses.replace(rope, attention_factor=short, long_attention_factor=long)
