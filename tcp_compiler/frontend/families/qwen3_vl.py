"""Qwen3-VL (`Qwen3VLForConditionalGeneration`, `Qwen3VLMoeForConditionalGeneration`): a vision
encoder in front of a Qwen 3 text model (q/k RMSNorm per head, GQA, no sliding window), nested in
`text_config`. tcpc runs text-only inputs: the vision encoder, its merger and the DeepStack
features it adds to the first layers' hidden states (only where image tokens are) are neither
built nor counted. The text model's interleaved M-RoPE (`mrope_section`, `mrope_interleaved`)
rotates each frequency by the temporal, height or width position; for text the three positions are
the token's index, so it is ordinary RoPE (tests/oracle/test_vl_families.py checks this against
transformers). The MoE text model routes as Qwen 3 MoE but always renormalises its top-k
weights (Qwen3VLMoeTextTopKRouter ignores norm_topk_prob); no shared expert; dense layers by
mlp_only_layers and decoder_sparse_step."""

import dataclasses
from typing import Any

from tcp_compiler.frontend.config import Attention, ModelConfig, Moe, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, sparse_layers, text_model
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Expert, TensorMap

# Qwen3VLTextConfig's and Qwen3VLMoeTextConfig's defaults (transformers 5.23.0) for the fields a
# text_config may leave out (head_dim: the MoE class's is hidden_size / num_attention_heads)
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151_936,
    "hidden_size": 4096,
    "intermediate_size": 22_016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "max_position_embeddings": 128_000,
}
MOE_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151_936,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "max_position_embeddings": 128_000,
    "moe_intermediate_size": 1408,
    "num_experts_per_tok": 4,
}
EXPERTS = 60  # Qwen3VLMoeTextConfig's num_experts (saved as num_local_experts, its alias)
ROPE_THETA = 500_000.0  # both text classes' default_theta


@family("qwen3_vl", architectures=("Qwen3VLForConditionalGeneration",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return _text(raw, name, "qwen3_vl", TEXT_DEFAULTS)


@family("qwen3_vl_moe", architectures=("Qwen3VLMoeForConditionalGeneration",))
def read_moe(raw: RawConfig, name: str) -> ModelConfig:
    text = _defaults(raw, MOE_TEXT_DEFAULTS)
    moe = Moe(
        experts=text.get("num_experts", text.get("num_local_experts", EXPERTS, kind=int), kind=int),
        top_k=text.require("num_experts_per_tok"),
        intermediate=text.require("moe_intermediate_size"),
        normalize_top_k=True,
        router_name="model.layers.{i}.mlp.gate.weight",
        expert_names=tuple(
            f"model.layers.{{i}}.mlp.experts.{{e}}.{p}_proj.weight" for p in ("gate", "up", "down")
        ),
    )
    if moe.top_k > moe.experts:
        raise text.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_experts ({moe.experts})")
    config = _text(text, name, "qwen3_vl_moe", {}, moe=moe, moe_layers=sparse_layers(text))
    return dataclasses.replace(config, tensors=_stacked_experts(moe.experts))


def _stacked_experts(experts: int) -> TensorMap:
    """Each expert's gate, up and down cut out of the hub checkpoints' stacked tensors: gate_up_proj
    [E, D, 2F] (gate, then up) and down_proj [E, F, D], which transformers transposes on loading."""
    layer = r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\."
    stacked = r"model.layers.\1.mlp.experts."
    return TensorMap(tuple(
        (layer + rf"{proj}_proj\.weight", Expert(stacked + tensor, r"\2", experts, part, parts, False))
        for proj, tensor, part, parts in (("gate", "gate_up_proj", 0, 2), ("up", "gate_up_proj", 1, 2),
                                          ("down", "down_proj", 0, 1))
    ))  # fmt: skip


def _defaults(raw: RawConfig, defaults: dict[str, Any]) -> RawConfig:
    """The text config (outer tie_word_embeddings, default False) with its class's defaults."""
    text = text_model(raw, tied_default=False)
    return RawConfig({**defaults, **text.data}, text.source, text.family, text.prefix)


def _text(
    raw: RawConfig, name: str, family_name: str, defaults: dict[str, Any], moe: Moe | None = None,
    moe_layers: set[int] = frozenset(),
) -> ModelConfig:  # fmt: skip
    """The Qwen 3 text model: every layer full attention with the one (text-only) RoPE."""
    text = _defaults(raw, defaults) if defaults else raw
    n = text.require("num_hidden_layers")
    types = layer_types(text, ["full_attention"] * n)
    rope = read_rope(text, default_theta=ROPE_THETA)
    return dense(
        text,
        family_name,
        name,
        attention=Attention(qkv_bias=bool(text.get("attention_bias", False, kind=bool)), qk_norm="per_head"),
        moe=moe,
        layers=layers(text, types, None, {"default": rope}, moe_layers),
    )
