"""Jamba (AI21): Mamba-1 layers with an attention layer every `attn_layer_period` layers from
`attn_layer_offset` (no positional encoding at all: the Mamba layers carry the order), each
layer followed by a mixture of experts every `expert_layer_period` layers from
`expert_layer_offset` and by a LLaMA-style gated MLP elsewhere (x + mixer(norm(x)), then
x + ffn(norm(x))). The Mamba-1 mixer's dt rank, B and C pass through RMSNorms with learned
weights (`dt_layernorm`, `b_layernorm`, `c_layernorm`, eps rms_norm_eps), unlike Falcon-Mamba's
weightless ones. The router takes the top-k of a softmax over all experts, not renormalised.
Checkpoints (transformers' `JambaForCausalLM`): the mixer under `mamba`, the MLP or experts
under `feed_forward` with `pre_ff_layernorm` before it, `final_layernorm` at the end; each
expert's gate, up and down by name (transformers stacks them in memory, not on disk)."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import Layer, ModelConfig, Moe, Positions, RawConfig, Ssm
from tcp_compiler.frontend.families.bamba import TENSORS
from tcp_compiler.frontend.families.common import dense
from tcp_compiler.frontend.families.mamba import conv_activation, inner_width, time_step_rank
from tcp_compiler.frontend.families.registry import family

# JambaConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", rms_norm_eps=1e-6,
    max_position_embeddings=262144, num_experts_per_tok=2, num_experts=16, expert_layer_period=2,
    expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4,
    mamba_expand=2, mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False,
)  # fmt: skip

FEED_FORWARD = "model.layers.{i}.feed_forward"


def periodic(raw: RawConfig, period: str, offset: str) -> set[int]:
    """The layers i with i % `period` == `offset`, the offset checked to lie below the period as
    JambaConfig checks it."""
    every, first = raw.require(period), raw.require(offset)
    if first >= every:
        raise raw.fail(f"{raw.path(offset)} ({first}) must be smaller than {period} ({every})")
    return {i for i in range(raw.require("num_hidden_layers")) if i % every == first}


def mixer(raw: RawConfig) -> Ssm:
    """The Mamba-1 mixer from the `mamba_*` fields, with weighted RMSNorms on dt, B and C."""
    return Ssm(
        "mamba",
        inner=inner_width(raw, "mamba_expand"),
        state=raw.require("mamba_d_state"),
        conv_kernel=raw.require("mamba_d_conv"),
        dt_rank=time_step_rank(raw, "mamba_dt_rank"),
        conv_bias=bool(raw.get("mamba_conv_bias", kind=bool)),
        proj_bias=bool(raw.get("mamba_proj_bias", kind=bool)),
        bcdt_norm_eps=float(raw.require("rms_norm_eps", (int, float))),
        bcdt_norm_weights=True,
        activation=conv_activation(raw, "hidden_act"),
    )


def experts(raw: RawConfig) -> Moe | None:
    """The expert layers' MoE; None with one expert (transformers builds the dense MLP then)."""
    count = raw.require("num_experts")
    if count == 1:
        return None
    moe = Moe(
        experts=count,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=False,
        router_name=FEED_FORWARD + ".router.weight",
        expert_names=(
            FEED_FORWARD + ".experts.{e}.gate_proj.weight",
            FEED_FORWARD + ".experts.{e}.up_proj.weight",
            FEED_FORWARD + ".experts.{e}.down_proj.weight",
        ),
    )
    if moe.top_k > count:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_experts ({count})")
    return moe


@family("jamba", defaults=DEFAULTS, architectures=("JambaForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    attends = periodic(raw, "attn_layer_period", "attn_layer_offset")
    routed = periodic(raw, "expert_layer_period", "expert_layer_offset")
    moe = experts(raw)
    n = raw.require("num_hidden_layers")
    mixers = ["attention" if i in attends else "mamba" for i in range(n)]
    routes = [moe is not None and i in routed for i in range(n)]
    layers = tuple(Layer(None, None, "rope", routes[i], mixer=mixers[i]) for i in range(n))
    return dense(raw, "jamba", name, layers=layers, ssm=mixer(raw), moe=moe, positions=Positions("none"),
                 tensors=TENSORS)  # fmt: skip
