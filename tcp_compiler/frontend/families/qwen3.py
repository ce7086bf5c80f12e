"""Qwen 3: RMSNorm on each query and key head (q_norm, k_norm); head_dim set explicitly."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layers, qwen_windows
from tcp_compiler.frontend.families.registry import family


@family("qwen3", defaults={"num_key_value_heads": 32}, architectures=("Qwen3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    types, window = qwen_windows(raw)
    return dense(
        raw,
        "qwen3",
        name,
        head_dim_default=128,  # transformers' Qwen3Config default
        attention=Attention(qkv_bias=bool(raw.get("attention_bias", False, kind=bool)), qk_norm="per_head"),
        layers=layers(raw, types, window, {"default": read_rope(raw)}),
    )
