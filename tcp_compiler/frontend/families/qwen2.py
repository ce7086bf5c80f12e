"""Qwen 2 / 2.5: Llama-shaped with biases on the q, k and v projections."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layers, qwen_windows
from tcp_compiler.frontend.families.registry import family


@family("qwen2", defaults={"num_key_value_heads": 32}, architectures=("Qwen2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    types, window = qwen_windows(raw)
    return dense(
        raw,
        "qwen2",
        name,
        attention=Attention(qkv_bias=True),
        layers=layers(raw, types, window, {"default": read_rope(raw)}),
    )
