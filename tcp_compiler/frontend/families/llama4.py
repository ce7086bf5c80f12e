"""Llama 4 (Scout, Maverick): the text model of the multimodal config (`text_config`, model_type
llama4_text; a bare text config is read too). Llama attention where most layers rotate q and k
(RoPE on interleaved pairs, transformers' complex form), L2-norm them (an RMSNorm without a
weight) and attend within their chunk of attention_chunk_size positions, while every
no_rope_layer_interval-th layer (no_rope_layers[i] = 0) attends globally without positions and
with its queries scaled by the temperature tuning (floor_scale, attn_scale). MoE layers
(moe_layers, or every interleave_moe_layer_step-th) route each token to its top-k experts by
sigmoid scores that scale the expert's input, beside a shared expert every token runs; the other
layers run a dense MLP of intermediate_size_mlp. Experts are stored stacked, gate_up_proj
[E, D, 2F] with gate then up; layout rules cut each expert's canonical tensors out of them."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Layer,
    ModelConfig,
    Moe,
    Positions,
    RawConfig,
    SharedExpert,
    Temperature,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense_mlp, rms_norms, sizes, text_model
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Expert, Rename, TensorMap
from tcp_compiler.frontend.schema import show

# transformers' Llama4TextConfig defaults for the fields a config leaves out; applied to the text
# config (a multimodal config nests it), so not the registry's top-level defaults.
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 202_048,
    "hidden_size": 5120,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16_384,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-5,
    "num_experts_per_tok": 1,
    "num_local_experts": 16,
    "interleave_moe_layer_step": 1,
    "use_qk_norm": True,
    "no_rope_layer_interval": 4,
    "attention_chunk_size": 8192,
    "attn_temperature_tuning": True,
    "floor_scale": 8192,
    "attn_scale": 0.1,
}
LAYER = r"model\.layers\.(\d+)\."
EXPERTS = r"model.layers.\1.feed_forward.experts."


@family("llama4", architectures=("Llama4ForConditionalGeneration",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    """The image-text config: its text model, in `text_config`."""
    return read_text(text_model(raw, tied_default=False), name)


@family("llama4_text", architectures=("Llama4ForCausalLM",))
def read_text(raw: RawConfig, name: str) -> ModelConfig:
    """The text model, with Llama4TextConfig's defaults for what the config leaves out."""
    # a config's explicit null keeps transformers' own rule (heads for KV heads, hidden / heads
    # for head_dim), which the readers below apply to a missing field
    raw = RawConfig({**TEXT_DEFAULTS, **raw.data}, raw.source, raw.family, raw.prefix)
    fields = sizes(raw)
    fields["intermediate"] = raw.require("intermediate_size_mlp")
    experts = raw.require("num_local_experts")
    moe = Moe(
        experts=experts,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=False,
        router_name="model.layers.{i}.feed_forward.router.weight",
        expert_names=tuple(
            f"model.layers.{{i}}.mlp.experts.{{e}}.{p}_proj.weight" for p in ("gate", "up", "down")
        ),
        scoring="sigmoid",
        weights_input=True,
        shared=SharedExpert(
            raw.require("intermediate_size"),
            tuple(
                f"model.layers.{{i}}.feed_forward.shared_expert.{p}_proj.weight"
                for p in ("gate", "up", "down")
            ),
        ),
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({moe.experts})")
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return ModelConfig(
        name=name,
        family="llama4",
        layers=_layers(raw),
        norms=rms_norms(raw),
        mlp=dense_mlp(raw),
        positions=Positions(interleave=True),
        attention=Attention(
            qkv_bias=bias, out_bias=bias, qk_norm="l2" if raw.get("use_qk_norm", kind=bool) else "none"
        ),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", False, kind=bool))),
        moe=moe,
        tensors=_layout(experts),
        **fields,
    )


def _layers(raw: RawConfig) -> tuple[Layer, ...]:
    """Each layer's RoPE (or none), chunk, q/k norm, temperature and MLP kind, as
    Llama4TextConfig and Llama4TextAttention derive them."""
    n = raw.require("num_hidden_layers")
    uses_rope = _flags(raw, n)
    types = raw.get("layer_types", kind=list)
    if types is None:
        types = ["chunked_attention" if flag else "full_attention" for flag in uses_rope]
    if len(types) != n or any(t not in ("full_attention", "chunked_attention") for t in types):
        raise raw.fail(
            f"layer_types: expected {n} entries of full_attention or chunked_attention, got {show(types)}"
        )
    chunk = raw.get("attention_chunk_size", kind=int)
    if chunk is None and "chunked_attention" in types:
        raise raw.fail("layer_types has chunked_attention layers but attention_chunk_size is not set")
    rope = read_rope(raw, default_theta=500_000.0)
    temperature = None
    if raw.get("attn_temperature_tuning", kind=(bool, int)):  # Scout publishes 4: on
        temperature = Temperature(
            float(raw.require("floor_scale", (int, float))), float(raw.get("attn_scale", kind=(int, float)))
        )
    moe = _moe_layers(raw, n)
    return tuple(
        Layer(
            None,
            rope if flag else None,
            "rope",
            i in moe,
            chunk=chunk if t == "chunked_attention" else None,
            qk_norm=bool(flag),
            temperature=None if flag else temperature,
        )
        for i, (flag, t) in enumerate(zip(uses_rope, types, strict=True))
    )


def _flags(raw: RawConfig, n: int) -> list[int]:
    """no_rope_layers (1: the layer rotates, 0: NoPE), at least one entry per layer; when absent
    or empty, every no_rope_layer_interval-th layer is NoPE."""
    flags = raw.get("no_rope_layers", kind=list)
    if not flags:
        interval = raw.get("no_rope_layer_interval", kind=int)
        return [int((i + 1) % interval != 0) for i in range(n)]
    if len(flags) < n or any(isinstance(f, bool) or f not in (0, 1) for f in flags):
        raise raw.fail(f"no_rope_layers: expected at least {n} entries of 0 or 1, got {show(flags)}")
    return flags[:n]


def _moe_layers(raw: RawConfig, n: int) -> set[int]:
    """moe_layers, or every interleave_moe_layer_step-th layer (the step-th, 2 step-th, ...)."""
    listed = raw.get("moe_layers", kind=list)
    if listed is None:
        step = raw.get("interleave_moe_layer_step", kind=int)
        return set(range(step - 1, n, step))
    for i, layer in enumerate(listed):
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n:
            raise raw.fail(f"{raw.path('moe_layers')}[{i}]: expected a layer index from 0 to {n - 1}")
    return set(listed)


def _layout(experts: int) -> TensorMap:
    """The dense MLP under feed_forward, and each expert's gate, up and down cut out of the stacked
    [E, D, 2F] gate_up_proj (gate, then up) and [E, F, D] down_proj."""
    rules: list = [
        (LAYER + r"mlp\.(gate|up|down)_proj\.weight", Rename(r"model.layers.\1.feed_forward.\2_proj.weight"))
    ]
    expert = LAYER + r"mlp\.experts\.(\d+)\."
    for proj, stacked, part, parts in (("gate", "gate_up_proj", 0, 2), ("up", "gate_up_proj", 1, 2),
                                       ("down", "down_proj", 0, 1)):  # fmt: skip
        rules.append(
            (expert + rf"{proj}_proj\.weight", Expert(EXPERTS + stacked, r"\2", experts, part, parts, False))
        )
    return TensorMap(tuple(rules))
