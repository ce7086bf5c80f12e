"""Gemma 3 (text): (1 + w) RMSNorm before and after attention and MLP, q/k norms, embeddings
scaled by sqrt(hidden), local sliding and global layers with their own RoPE bases, GELU-tanh MLP,
attention scaled by query_pre_attn_scalar^-1/2, tied embeddings."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import (
    activation,
    layer_types,
    layers,
    rms_norms,
    sizes,
    text_model,
)
from tcp_compiler.frontend.families.registry import family

# transformers' Gemma3TextConfig defaults for fields Google's published configs leave out
# (gemma-3-27b's text_config has no vocab_size, gemma-3-4b-it's no heads); applied to the text
# config, so not the registry's (top-level) defaults.
TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
}


@family("gemma3", "gemma3_text", architectures=("Gemma3ForConditionalGeneration",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.data.get("model_type") == "gemma3":
        raw = text_model(raw, tied_default=True)  # Gemma3Config ties by default
    raw = RawConfig({**TEXT_DEFAULTS, **raw.data}, raw.source, raw.family, raw.prefix)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if raw.get(key) is not None:
            raise raw.fail(f"field '{key}' is set; logit soft-capping is not supported (Gemma 2 style)")
    n = raw.require("num_hidden_layers")
    pattern = raw.get("sliding_window_pattern", raw.get("_sliding_window_pattern", 6), kind=int)
    types = layer_types(
        raw, ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    )
    ropes = {
        "full_attention": read_rope(raw, "full_attention", default_theta=1_000_000.0),
        "sliding_attention": read_rope(
            _local(raw), "sliding_attention", default_theta=raw.get("rope_local_base_freq", 10_000.0)
        ),
    }
    fields = sizes(raw, head_dim_default=256)
    return ModelConfig(
        name=name,
        family="gemma3",
        norms=rms_norms(raw, offset=1.0, sandwich=True),
        mlp=Mlp(activation(raw, "gelu_pytorch_tanh", "hidden_activation", "hidden_act")),
        layers=layers(raw, types, raw.get("sliding_window", 4096, kind=int), ropes),
        attention=Attention(
            qk_norm="per_head", scale=float(raw.get("query_pre_attn_scalar", 256, kind=(int, float))) ** -0.5
        ),
        embedding=Embedding(
            scale=float(fields["hidden"]) ** 0.5,
            scale_in_table_dtype=True,
            tied=bool(raw.get("tie_word_embeddings", True, kind=bool)),
        ),
        **fields,
    )


def _local(raw: RawConfig) -> RawConfig:
    """Old-style configs: local layers use rope_local_base_freq and no rope_scaling."""
    if raw.has("rope_parameters"):
        return raw
    data = {k: v for k, v in raw.data.items() if k not in ("rope_scaling", "rope_theta")}
    data["rope_theta"] = raw.get("rope_local_base_freq", 10_000.0, kind=(int, float))
    return RawConfig(data, raw.source, raw.family, raw.prefix)
