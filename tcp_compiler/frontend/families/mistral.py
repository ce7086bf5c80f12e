"""Mistral: Llama-shaped with a sliding attention window on every layer."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family


@family(
    "mistral",
    defaults={"num_key_value_heads": 8, "sliding_window": 4096},
    architectures=("MistralForCausalLM",),
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)
    types = layer_types(raw, ["sliding_attention" if window else "full_attention"] * n)
    return dense(raw, "mistral", name, layers=layers(raw, types, window, {"default": read_rope(raw)}))
