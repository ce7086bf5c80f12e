"""The families of issue 28 beyond the shared oracle tests (test_families.py runs them too):
parameter counts equal transformers' own, on the tiny models and on the bundled published configs
(built on the meta device, no weights), and the parts a tiny model cannot show."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.families.common import ACTIVATIONS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.tiny_models import FAMILIES, ISSUE_28, build, save

# bundled config -> the transformers class that counts it
BUNDLED_CLASSES = {
    "gemma-2b": ("GemmaConfig", "GemmaForCausalLM"),
    "c4ai-command-r-v01": ("CohereConfig", "CohereForCausalLM"),
    "c4ai-command-r7b-12-2024": ("Cohere2Config", "Cohere2ForCausalLM"),
    "gpt-j-6b": ("GPTJConfig", "GPTJForCausalLM"),
    "exaone-4.0-32b": ("Exaone4Config", "Exaone4ForCausalLM"),
    "glm-4-9b-chat-hf": ("GlmConfig", "GlmForCausalLM"),
    "glm-4-9b-0414": ("Glm4Config", "Glm4ForCausalLM"),
    "glm-4.5-air": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "k-exaone-236b-a23b": ("ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
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


def test_exaone4_32b_layers_slide_and_rotate_as_transformers_lays_them_out() -> None:
    """EXAONE-4.0-32B: 3 sliding layers (window 4096, RoPE) to 1 global layer (no window, NoPE)."""
    data = json.loads((BUNDLED / "exaone-4.0-32b.json").read_text())
    types = transformers.Exaone4Config(**{k: v for k, v in data.items() if k != "model_type"}).layer_types
    layers = load_model("exaone-4.0-32b").config.layers
    assert types.count("full_attention") == 16 and types[3] == "full_attention"
    for layer, kind in zip(layers, types, strict=True):
        sliding = kind == "sliding_attention"
        assert (layer.sliding_window == 4096) == sliding and (layer.rope is not None) == sliding


EXAONE4_SIZES = {
    "model_type": "exaone4", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "local"),
    [
        ({"sliding_window_pattern": "LLLG"}, [1, 1, 1, 0, 1, 0]),  # the last layer is global
        ({"sliding_window_pattern": 3}, [1, 1, 0, 1, 1, 0]),
        ({}, [1, 1, 1, 0, 1, 1]),  # Exaone4Config's default pattern, 4
        ({"sliding_window": None, "sliding_window_pattern": "LLLG"}, [0] * 6),
    ],
)
def test_exaone4_pattern_without_layer_types(fields: dict, local: list[int]) -> None:
    """Configs without layer_types (transformers 5.23 builds them from an integer pattern only; the
    string form follows Exaone4Config's documented rule). Without a window every layer rotates."""
    cfg = read_model_config(RawConfig({**EXAONE4_SIZES, **fields}, "e.json"), "e")
    assert [int(layer.sliding_window is not None) for layer in cfg.layers] == local
    window = fields.get("sliding_window", 4096)
    for layer, slides in zip(cfg.layers, local, strict=True):
        assert (layer.rope is not None) == (window is None or bool(slides))
    if isinstance(fields.get("sliding_window_pattern"), int) or not fields:
        expected = transformers.Exaone4Config(**{k: v for k, v in {**EXAONE4_SIZES, **fields}.items()
                                                 if k != "model_type"}).layer_types  # fmt: skip
        assert [int(t == "sliding_attention") for t in expected] == local


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sliding_window_pattern": "LLXG"}, 'expected a string of L and G, got "LLXG"'),
        ({"sliding_window_pattern": None}, "sliding_window_pattern is null but sliding_window is set"),
        ({"sliding_window_pattern": 0}, "sliding_window_pattern: expected an integer from 1"),
    ],
)
def test_exaone4_bad_patterns_are_one_line_errors(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig({**EXAONE4_SIZES, **fields}, "e.json"), "e")
    assert str(e.value).startswith("e.json: ") and message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("chips", [2, 4])
def test_minicpm3_latent_attention_on_several_chips_equals_one(chips: int, tmp_path) -> None:
    """MiniCPM 3's MLA (tests/oracle/test_sharding.py runs the per-head families)."""
    model = load_model(save(build("minicpm3", vocab_size=96), tmp_path))
    prompts = [[5, 17, 3, 88, 42, 9], [7, 1, 60]]
    one = generate(model.config, model.checkpoint.load, prompts, PRECISIONS["f32"], 3)
    many = generate(model.config, model.checkpoint.load, prompts, PRECISIONS["f32"], 3, chips=chips)
    np.testing.assert_allclose(many.prefill_logits, one.prefill_logits, atol=1e-5, rtol=0)
    for a, b in zip(many.decode_logits, one.decode_logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert many.token_matrix.tolist() == one.token_matrix.tolist()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"attention_bias": True}, "attention_bias: true is not supported for minicpm3"),
        ({"rope_scaling": {"type": "yarn", "factor": 4.0, "mscale_all_dim": 1.0}},
         "rope_scaling.mscale_all_dim: not supported for minicpm3"),
        ({"qk_rope_head_dim": 5}, "qk_rope_head_dim must be even"),
        ({"scale_depth": -1}, "scale_depth: expected a number > 0"),
    ],
)  # fmt: skip
def test_minicpm3_bad_fields_are_one_line_errors(fields: dict, message: str) -> None:
    raw = {"model_type": "minicpm3", "vocab_size": 97, "num_hidden_layers": 2, **fields}
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig(raw, "m.json"), "m")
    assert str(e.value).startswith("m.json: ") and message in str(e.value) and "\n" not in str(e.value)


def test_k_exaone_layers_as_transformers_lays_them_out() -> None:
    """K-EXAONE's dense first layer and sparse rest, its sliding (window 128) and global layers."""
    data = json.loads((BUNDLED / "k-exaone-236b-a23b.json").read_text())
    config = transformers.ExaoneMoeConfig(**{k: v for k, v in data.items() if k != "model_type"})
    cfg = load_model("k-exaone-236b-a23b").config
    assert [layer.moe for layer in cfg.layers] == [kind == "sparse" for kind in config.mlp_layer_types]
    slides = [kind == "sliding_attention" for kind in config.layer_types]
    assert [layer.sliding_window == 128 for layer in cfg.layers] == slides
    assert [layer.rope is not None for layer in cfg.layers] == slides


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mlp_layer_types": ["dense", "moe"]}, 'mlp_layer_types: expected 2 entries of "dense" or "sparse"'),
        ({"mlp_layer_types": [{}, []]}, 'mlp_layer_types: expected 2 entries of "dense" or "sparse"'),
        ({"n_group": 3}, "n_group (3) must divide num_experts (4)"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok (5) exceeds the experts of topk_group (1) groups"),
    ],
)
def test_k_exaone_bad_fields_are_one_line_errors(fields: dict, message: str) -> None:
    raw = {**EXAONE4_SIZES, "model_type": "exaone_moe", "num_hidden_layers": 2, "num_experts": 4,
           "moe_intermediate_size": 24, **fields}  # fmt: skip
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig(raw, "k.json"), "k")
    assert str(e.value).startswith("k.json: ") and message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bias", [True, False])
def test_internlm3_reads_its_bias_fields_as_transformers_maps_them(bias: bool) -> None:
    """Published InternLM3 configs say qkv_bias and bias; InternLM3Config's attribute_map reads them
    as attention_bias (q, k, v, o) and mlp_bias (the oracle's saved configs use those names)."""
    fields = {"qkv_bias": bias, "bias": bias, "num_hidden_layers": 2}
    theirs = transformers.InternLM3Config(**fields)
    cfg = read_model_config(RawConfig({"model_type": "internlm3", **fields}, "i.json"), "i")
    assert cfg.attention.qkv_bias == cfg.attention.out_bias == theirs.attention_bias == bias
    assert cfg.mlp.bias == theirs.mlp_bias == bias
    sizes = (theirs.num_key_value_heads, theirs.head_dim, theirs.vocab_size)
    assert (cfg.kv_heads, cfg.head_dim, cfg.vocab) == sizes
