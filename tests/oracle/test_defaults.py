"""Class defaults as transformers applies them: a config that leaves out num_key_value_heads (and
head_dim, sliding_window) gets what that family's transformers Configuration class uses, read by
tcpc and by `AutoConfig.for_model` from the same fields."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoConfig  # noqa: E402

from tcp_compiler.frontend.config import RawConfig  # noqa: E402
from tcp_compiler.frontend.families import read_model_config  # noqa: E402

# 32 query heads: every family's KV default (32, 16, 8, 4, 2 or "as many as the query heads") divides it.
FIELDS = dict(
    vocab_size=97,
    hidden_size=512,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=32,
    max_position_embeddings=64,
)
EXTRA = {
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2),
}
# Families whose configs carry query and KV heads in these fields (the others spell them their own
# way, or have one latent for every head as DeepSeek's MLA does).
KV_FAMILIES = [
    "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "starcoder2", "granite",
    "smollm3", "mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "phi", "glm", "glm4", "glm4_moe",
    "llama4_text",
]  # fmt: skip


def windows(config) -> list[int | None]:
    """transformers' per-layer attention window (None: full attention)."""
    n = config.num_hidden_layers
    types = getattr(config, "layer_types", None) or ["full_attention"] * n
    window = getattr(config, "sliding_window", None)
    if window and not getattr(config, "layer_types", None) and getattr(config, "use_sliding_window", True):
        types = ["sliding_attention"] * n
    return [window if t == "sliding_attention" else None for t in types]


@pytest.mark.parametrize("model_type", KV_FAMILIES)
def test_left_out_kv_heads_head_dim_and_windows_are_transformers_defaults(model_type) -> None:
    fields = {**FIELDS, **EXTRA.get(model_type, {})}
    theirs = AutoConfig.for_model(model_type, **fields)
    ours = read_model_config(RawConfig({"model_type": model_type, **fields}, "config.json"), "m")
    assert ours.kv_heads == theirs.num_key_value_heads, model_type
    head_dim = getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads
    assert ours.head_dim == head_dim, model_type
    assert [layer.sliding_window for layer in ours.layers] == windows(theirs), model_type


# google/gemma-3-4b-it's config.json as published (vision_config left out): the text model's heads,
# KV heads and head_dim are the Gemma3TextConfig defaults, so the file does not name them.
GEMMA_3_4B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
}


def test_gemma_3_4b_it_reads_its_heads_from_the_class_defaults() -> None:
    theirs = AutoConfig.for_model(**GEMMA_3_4B_IT["text_config"])
    ours = read_model_config(RawConfig(GEMMA_3_4B_IT, "config.json"), "gemma-3-4b-it")
    assert (ours.heads, ours.kv_heads, ours.head_dim) == (8, 4, 256)
    assert (ours.heads, ours.kv_heads, ours.head_dim) == (
        theirs.num_attention_heads,
        theirs.num_key_value_heads,
        theirs.head_dim,
    )
    assert [layer.sliding_window for layer in ours.layers] == windows(theirs)
