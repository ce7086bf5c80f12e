"""The families of issue 28 beyond the shared oracle tests (test_families.py runs them too):
parameter counts equal transformers' own, on the tiny models and on the bundled published configs
(built on the meta device, no weights), and the parts a tiny model cannot show."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.families.common import ACTIVATIONS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tests.oracle.tiny_models import FAMILIES, ISSUE_28, build, save

# bundled config -> the transformers class that counts it
BUNDLED_CLASSES = {
    "gemma-2b": ("GemmaConfig", "GemmaForCausalLM"),
    "c4ai-command-r-v01": ("CohereConfig", "CohereForCausalLM"),
    "c4ai-command-r7b-12-2024": ("Cohere2Config", "Cohere2ForCausalLM"),
    "gpt-j-6b": ("GPTJConfig", "GPTJForCausalLM"),
    "glm-4-9b-chat-hf": ("GlmConfig", "GlmForCausalLM"),
    "glm-4-9b-0414": ("Glm4Config", "Glm4ForCausalLM"),
    "glm-4.5-air": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
}


def _ours(cfg) -> int:
    return sum(p.type.numel for p in build_prefill(cfg, PRECISIONS["bf16"], 1, 1).checkpoint_params())


def _theirs(model) -> int:
    """transformers' parameters, plus the MoE router's correction bias: a checkpoint tensor that
    transformers holds as a buffer (GLM-4.5's, DeepSeek-V3's e_score_correction_bias)."""
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    return sum(p.numel() for p in model.parameters()) + bias


@pytest.mark.parametrize("name", sorted(ISSUE_28))
def test_tiny_parameter_count_equals_transformers(name: str, tmp_path) -> None:
    model = build(name)
    cfg = load_model(save(model, tmp_path)).config
    assert _ours(cfg) == _theirs(model)


@pytest.mark.parametrize("name", sorted(BUNDLED_CLASSES))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    config_cls, model_cls = BUNDLED_CLASSES[name]
    data = json.loads((BUNDLED / f"{name}.json").read_text())
    config = getattr(transformers, config_cls)(**{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(config)
    assert _ours(load_model(name).config) == _theirs(model)


def test_gemma_legacy_gelu_is_the_tanh_approximation_as_transformers_reads_it(tmp_path) -> None:
    """Published Gemma configs say hidden_act "gelu"; GemmaConfig turns it into the tanh
    approximation. At the tiny model's scale exact and tanh GELU agree within the logits' tolerance,
    so this is checked on the config."""
    assert FAMILIES["gemma"][2]["hidden_act"] == "gelu"
    model = build("gemma")
    cfg = load_model(save(model, tmp_path)).config
    assert cfg.mlp.activation == ACTIVATIONS[model.config.hidden_act] == "gelu_tanh"


def test_command_r7b_layers_slide_and_rotate_as_transformers_lays_them_out() -> None:
    """The published sliding_window_pattern 4, as Cohere2Config turns it into layer_types: RoPE
    and the window on the sliding layers, neither on the global ones."""
    data = json.loads((BUNDLED / "c4ai-command-r7b-12-2024.json").read_text())
    types = transformers.Cohere2Config(**{k: v for k, v in data.items() if k != "model_type"}).layer_types
    layers = load_model("c4ai-command-r7b-12-2024").config.layers
    assert "full_attention" in types and "sliding_attention" in types
    for layer, kind in zip(layers, types, strict=True):
        sliding = kind == "sliding_attention"
        assert (layer.sliding_window == data["sliding_window"]) == sliding
        assert (layer.rope is not None) == sliding
