"""SmolLM3: Llama-shaped with RoPE left out of some layers (NoPE): no_rope_layers[i] = 0 marks
them, by default every no_rope_layer_interval-th layer (the 4th, 8th, ...); with
use_sliding_window the NoPE layers slide (`layer_types` in transformers 5 configs)."""

import dataclasses

from tcp_compiler.frontend.config import Attention, Embedding, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, dense_mlp, layer_types, layers
from tcp_compiler.frontend.families.registry import family


@family("smollm3", defaults={"num_key_value_heads": 4}, architectures=("SmolLM3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    interval = raw.get("no_rope_layer_interval", 4, kind=int)
    uses_rope = raw.get("no_rope_layers", kind=list)
    if uses_rope is None:
        uses_rope = [int((i + 1) % interval != 0) for i in range(n)]
    if len(uses_rope) != n or any(flag not in (0, 1) or isinstance(flag, bool) for flag in uses_rope):
        raise raw.fail(f"no_rope_layers: expected {n} entries of 0 or 1, got {len(uses_rope)} entries")
    sliding = bool(raw.get("use_sliding_window", False, kind=bool)) and raw.has("sliding_window")
    types = layer_types(
        raw, ["sliding_attention" if sliding and not uses_rope[i] else "full_attention" for i in range(n)]
    )
    window = raw.get("sliding_window", kind=int) if "sliding_attention" in types else None
    built = layers(raw, types, window, {"default": read_rope(raw)})
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "smollm3",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=dense_mlp(raw, bias=bool(raw.get("mlp_bias", False, kind=bool))),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        layers=tuple(
            layer if flag else dataclasses.replace(layer, rope=None)
            for layer, flag in zip(built, uses_rope, strict=True)
        ),
    )
