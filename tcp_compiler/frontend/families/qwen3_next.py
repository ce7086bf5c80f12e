"""Qwen3-Next: a hybrid of gated DeltaNet layers (linear attention: a short convolution and the
gated delta rule, builder/ssm.py's `gated_delta`) and, every full_attention_interval-th layer (or
as `layer_types` says), full attention whose q_proj also gives a sigmoid gate on each head's output,
with q/k RMSNorms and RoPE on the first partial_rotary_factor (0.25) of each head. Every layer
has an MLP after its mixer: routed experts plus a shared expert scaled by sigmoid(shared_expert_
gate). Its RMSNorms scale by (1 + w) (weights saved zero-centred), the DeltaNet's gated norm by w."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import (
    Attention,
    Layer,
    ModelConfig,
    Moe,
    Norms,
    Positions,
    RawConfig,
    SharedExpert,
    Ssm,
    read_rope,
)
from tcp_compiler.frontend.families.common import (
    dense,
    listed_layer_types,
    partial_rotary,
    sizes,
    sparse_layers,
)
from tcp_compiler.frontend.families.registry import family

# Qwen3NextConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48, num_attention_heads=16,
    num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
    tie_word_embeddings=False, attention_bias=False, head_dim=256, linear_conv_kernel_dim=4,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
    decoder_sparse_step=1, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    num_experts_per_tok=10, num_experts=512, norm_topk_prob=True, full_attention_interval=4,
)  # fmt: skip

MIXERS = {"linear_attention": "deltanet", "full_attention": "attention"}


@family("qwen3_next", defaults=DEFAULTS, architectures=("Qwen3NextForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    moe = experts(raw, normalize=bool(raw.get("norm_topk_prob", kind=bool)))
    return hybrid(raw, "qwen3_next", name, moe, sparse_layers(raw) if moe.experts > 0 else set())


def experts(raw: RawConfig, normalize: bool) -> Moe:
    """The MoE block: num_experts routed experts (softmax, top num_experts_per_tok, renormalised
    when `normalize`) beside a shared expert scaled by sigmoid(shared_expert_gate)."""
    pre = "model.layers.{i}.mlp"
    moe = Moe(
        experts=raw.require("num_experts"),
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("moe_intermediate_size"),
        normalize_top_k=normalize,
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
    return moe


def hybrid(
    raw: RawConfig,
    family: str,
    name: str,
    moe: Moe | None,
    moe_layers: set[int],
    fused_projections: bool = True,
) -> ModelConfig:
    """The Qwen3-Next-style hybrid: DeltaNet and gated-attention layers (`_types`), each followed
    by the MoE block (layers in `moe_layers`) or a dense MLP of intermediate_size (the rest; all
    of them without `moe`: Qwen3.5's dense models); `fused_projections` as Ssm's."""
    rope = read_rope(raw)
    layers = tuple(
        Layer(None, rope if MIXERS[t] == "attention" else None, "rope", i in moe_layers, mixer=MIXERS[t])
        for i, t in enumerate(_types(raw))
    )
    return dense(
        raw,
        family,
        name,
        norms=Norms(float(raw.require("rms_norm_eps", (int, float))), offset=1.0),
        positions=Positions(rotary_dim=partial_rotary(raw, sizes(raw)["head_dim"], default=0.25)),
        attention=Attention(
            qkv_bias=bool(raw.get("attention_bias", kind=bool)), qk_norm="per_head", output_gate=True
        ),
        moe=moe,
        layers=layers,
        ssm=_deltanet(raw, fused_projections),
    )


def _types(raw: RawConfig) -> list[str]:
    """`layer_types`, or transformers' rule: every full_attention_interval-th layer full attention."""
    n = raw.require("num_hidden_layers")
    interval = raw.require("full_attention_interval")
    if interval < 1:
        raise raw.fail(f"full_attention_interval must be at least 1, got {interval}")
    fallback = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n)]
    types = listed_layer_types(raw, "layer_types", MIXERS, fallback)
    if len(types) != n:
        raise raw.fail(f"{raw.path('layer_types')} has {len(types)} entries but num_hidden_layers is {n}")
    return types


def _deltanet(raw: RawConfig, fused_projections: bool) -> Ssm:
    """The gated DeltaNet layers' sizes: value heads (each key head serves value / key of them)."""
    key_heads, value_heads = raw.require("linear_num_key_heads"), raw.require("linear_num_value_heads")
    if value_heads % key_heads:
        raise raw.fail(
            f"linear_num_value_heads ({value_heads}) must be a multiple of linear_num_key_heads ({key_heads})"
        )
    value_dim = raw.require("linear_value_head_dim")
    return Ssm(
        "gated_delta",
        inner=value_heads * value_dim,
        state=raw.require("linear_key_head_dim"),
        conv_kernel=raw.require("linear_conv_kernel_dim"),
        heads=value_heads,
        head_dim=value_dim,
        groups=key_heads,
        conv_bias=False,
        norm_eps=float(raw.require("rms_norm_eps", (int, float))),
        fused_projections=fused_projections,
    )
