"""ERNIE 4.5 (`ernie4_5`: ERNIE-4.5-0.3B; `ernie4_5_moe`: ERNIE-4.5-21B-A3B, -300B-A47B), as
transformers 5.23 builds them: Llama-shaped with RoPE on interleaved pairs (x0, x1), (x2, x3), ...
of the whole head, and `use_bias` on q, k, v, o and the MLP's projections; embeddings tied unless
the config says otherwise. The MoE model puts experts on every `moe_layer_interval`-th layer from
`moe_layer_start_index` to `moe_layer_end_index` (-1: the last; counted as (i + 1) % interval), the
others dense: a softmax over `moe_num_experts` router logits, `moe_k` experts picked by the scores
plus a correction bias (`moe_statics`, stored [1, E], which picks but does not weigh), their
scores divided by max(their sum, `moe_norm_min`), and `moe_num_shared_experts` x
`moe_intermediate_size` of shared expert every token runs. The fields the text configs keep from
the multimodal training (moe_capacity, moe_gate, moe_use_aux_free, ...) play no part in
transformers' model, nor do the multi-token-prediction layers (`num_nextn_predict_layers`),
which it neither loads nor counts."""

from __future__ import annotations

import dataclasses
from typing import Any

from tcp_compiler.frontend.config import Attention, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, dense_mlp, layer_types, layers
from tcp_compiler.frontend.families.deepseek_parts import deepseek_moe
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

# Ernie4_5Config's and Ernie4_5_MoeConfig's defaults for fields a config may leave out: RoPE base
# 500000, tied embeddings; the dense model's head_dim is 128 whatever hidden / heads is.
THETA = 500000.0
SHARED = {
    "vocab_size": 103424,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
DENSE = {
    **SHARED,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 18,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
}
MOE = {
    **SHARED,
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "num_hidden_layers": 28,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "moe_intermediate_size": 1536,
    "moe_k": 6,
    "moe_num_experts": 64,
    "moe_num_shared_experts": 2,
    "moe_layer_start_index": 1,
    "moe_layer_end_index": -1,
    "moe_layer_interval": 1,
    "moe_norm_min": 1e-12,
}
# Ernie4_5_MoeConfig.attribute_map: a config may name these fields by the other families' names
ALIASES = {"moe_num_experts": "num_experts", "moe_k": "num_experts_per_tok"}
CORRECTION_BIAS = "moe_statics.e_score_correction_bias"
# the correction bias the builder reads as [E], stored [1, E]
STATICS = TensorMap(
    ((r"(model\.layers\.\d+\.mlp\.moe_statics\.e_score_correction_bias)", Rename(r"\1", unit_axis=True)),)
)


@family("ernie4_5", defaults=DENSE, architectures=("Ernie4_5ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return _model(raw, name, "ernie4_5", set())


@family(
    "ernie4_5_moe",
    defaults={k: v for k, v in MOE.items() if k not in ALIASES},  # _aliased fills those
    architectures=("Ernie4_5_MoeForCausalLM",),
)
def read_moe(raw: RawConfig, name: str) -> ModelConfig:
    raw = _aliased(raw)
    if raw.get("use_bias", False, kind=bool):
        raise raw.fail(
            "use_bias: true is not supported for ernie4_5_moe (released models have none; transformers "
            "would put biases on the shared experts and on the LM head)"
        )
    moe = deepseek_moe(
        raw,
        "softmax",
        True,
        correction_bias=CORRECTION_BIAS,
        keys=("moe_num_experts", "moe_num_shared_experts"),
        top_k_key="moe_k",
    )
    floor = float(raw.get("moe_norm_min", MOE["moe_norm_min"], kind=(int, float)))
    moe = dataclasses.replace(moe, routed_scale=1.0, normalize_floor=floor)  # no routed_scaling_factor
    return _model(raw, name, "ernie4_5_moe", moe_layers(raw), moe=moe, tensors=STATICS)


def _aliased(raw: RawConfig) -> RawConfig:
    """The config with each field of ALIASES it leaves out read from its alias, as transformers'
    attribute_map reads it, else the class default."""
    data = dict(raw.data)
    for key, alias in ALIASES.items():
        if data.get(key) is None:
            data[key] = data[alias] if data.get(alias) is not None else MOE[key]
    return RawConfig(data, raw.source, raw.family, raw.prefix)


def _model(raw: RawConfig, name: str, family_name: str, sparse: set[int], **moe: Any) -> ModelConfig:
    """What both models share: interleaved RoPE on the whole head, `use_bias` on every projection;
    `sparse` the layers with experts, `moe` the experts and their tensor map."""
    bias = bool(raw.get("use_bias", False, kind=bool))
    types = layer_types(raw, ["full_attention"] * raw.require("num_hidden_layers"))
    return dense(
        raw,
        family_name,
        name,
        positions=Positions(interleave=True),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=dense_mlp(raw, bias=bias),
        layers=layers(raw, types, None, {"default": read_rope(raw, default_theta=THETA)}, sparse),
        **moe,
    )


def moe_layers(raw: RawConfig) -> set[int]:
    """Ernie4_5_MoeDecoderLayer's rule: layer i has experts when (i + 1) % moe_layer_interval == 0
    and moe_layer_start_index <= i <= moe_layer_end_index (-1: the last layer)."""
    n = raw.require("num_hidden_layers")
    start = raw.get("moe_layer_start_index", MOE["moe_layer_start_index"], kind=int)
    end = raw.get("moe_layer_end_index", MOE["moe_layer_end_index"], kind=int)
    interval = raw.get("moe_layer_interval", MOE["moe_layer_interval"], kind=int)
    end = n - 1 if end == -1 else end
    return {i for i in range(n) if (i + 1) % interval == 0 and start <= i <= end}
