"""Qwen 2 / 2.5: Llama-shaped with biases on the q, k and v projections."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, window_rule

MODEL_TYPES = ("qwen2",)


def read(raw: RawConfig, name: str) -> ModelConfig:
    enabled = bool(raw.get("use_sliding_window", False, kind=bool))
    types = layer_types(raw, window_rule(raw, enabled))
    window = raw.get("sliding_window", kind=int) if enabled or "sliding_attention" in types else None
    return dense(
        raw, "qwen2", name, qkv_bias=True, layers=layers(raw, types, window, {"default": read_rope(raw)})
    )
