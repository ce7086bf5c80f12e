"""Model families: each module reads one family's config.json into a ModelConfig.

A new family is one module here with MODEL_TYPES and read(raw, name), listed in FAMILIES.
"""

from __future__ import annotations

from types import ModuleType

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families import (
    bloom,
    deepseek_v3,
    falcon,
    gemma2,
    gemma3,
    gpt2,
    gpt_neox,
    gpt_oss,
    granite,
    llama,
    mistral,
    mixtral,
    olmo2,
    opt,
    phi3,
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_moe,
    smollm3,
    starcoder2,
    tcpc_decoder,
)

FAMILIES: dict[str, ModuleType] = {
    t: m
    for m in (
        llama,
        mistral,
        qwen2,
        qwen3,
        gemma3,
        mixtral,
        qwen3_moe,
        qwen2_moe,
        deepseek_v3,
        gpt2,
        opt,
        bloom,
        gpt_neox,
        falcon,
        gemma2,
        phi3,
        olmo2,
        starcoder2,
        granite,
        smollm3,
        gpt_oss,
        tcpc_decoder,
    )
    for t in m.MODEL_TYPES
}


def read_model_config(raw: RawConfig, name: str) -> ModelConfig:
    model_type = raw.get("model_type", kind=str)
    if model_type is None:
        raise FrontendError(f"{raw.source}: missing field 'model_type' (supported: {', '.join(FAMILIES)})")
    if model_type not in FAMILIES:
        raise FrontendError(
            f"{raw.source}: model_type '{model_type}' is not supported (supported: {', '.join(FAMILIES)})"
        )
    raw.family = str(model_type)
    return FAMILIES[model_type].read(raw, name)
