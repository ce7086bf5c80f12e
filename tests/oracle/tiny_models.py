"""Tiny random-weight Hugging Face models, one per supported family, saved to disk for the oracle tests.

float32, eager attention, weights 0.1 * randn (norm weights around 1, or around 0 for Gemma's
(1 + w) norms) so a wrong transpose, scale or mask cannot hide behind small numbers. Windows are
shorter than the test prompts so sliding attention really cuts.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

COMMON = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)

FAMILIES = {
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8,
            }
        ),
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=3, head_dim=8)),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(use_sliding_window=True, sliding_window=3, max_window_layers=1),
    ),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16, tie_word_embeddings=True)),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            head_dim=8,
            sliding_window=3,
            query_pre_attn_scalar=12,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
            tie_word_embeddings=True,
        ),
    ),
    "mixtral": (
        "MixtralConfig",
        "MixtralForCausalLM",
        dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=4),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, norm_topk_prob=True),
    ),
}
DENSE = ["llama", "mistral", "qwen2", "qwen3", "gemma3"]
MOE = ["mixtral", "qwen3_moe"]


def build(family: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """The family's tiny model; `overrides` change config fields (e.g. vocab_size)."""
    config_cls, model_cls, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**COMMON, **extra, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval().to(torch.float32)
    centre = 0.0 if family == "gemma3" else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(0.1 * torch.randn_like(p) + (centre if "norm" in name else 0.0))
    return model


def save(model: transformers.PreTrainedModel, directory: Path) -> Path:
    model.save_pretrained(directory)
    return directory
