"""Llama 2 / 3 / 3.1 / 3.2: the reference family (llama3 RoPE scaling included)."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense

MODEL_TYPES = ("llama",)


def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.get("attention_bias", False) or raw.get("mlp_bias", False):
        raise raw.fail("attention_bias / mlp_bias = true is not supported for llama models")
    return dense(raw, "llama", name)
