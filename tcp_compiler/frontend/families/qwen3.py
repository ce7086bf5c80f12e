"""Qwen 3: RMSNorm on each query and key head (q_norm, k_norm); head_dim set explicitly."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, window_rule

MODEL_TYPES = ("qwen3",)


def read(raw: RawConfig, name: str) -> ModelConfig:
    enabled = bool(raw.get("use_sliding_window", False, kind=bool))
    types = layer_types(raw, window_rule(raw, enabled))
    window = raw.get("sliding_window", kind=int) if enabled or "sliding_attention" in types else None
    return dense(
        raw,
        "qwen3",
        name,
        head_dim_default=128,  # transformers' Qwen3Config default
        qk_norm=True,
        qkv_bias=bool(raw.get("attention_bias", False, kind=bool)),
        layers=layers(raw, types, window, {"default": read_rope(raw)}),
    )
