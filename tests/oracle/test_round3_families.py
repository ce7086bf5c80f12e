"""The families of issue 28 beyond the shared oracle tests (test_families.py runs them too):
parameter counts equal transformers' own, on the tiny models and on the bundled published configs
(built on the meta device, no weights), and the parts a tiny model cannot show."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import numpy as np
import pytest
import torch
import transformers

from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import Positions, RawConfig, Temperature
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.families.common import ACTIVATIONS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
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


SCOUT = json.loads((BUNDLED / "llama-4-scout-17b-16e-instruct.json").read_text())


def _scout_for_transformers() -> transformers.Llama4Config:
    """Scout's published config as transformers 5.23 accepts it: its strict Llama4TextConfig wants a
    bool for attn_temperature_tuning, which the hub file gives as 4 (transformers 4.51, which wrote
    it, read its truth value; tcpc does too)."""
    data = {k: v for k, v in SCOUT.items() if k != "model_type"}
    data["text_config"] = {**SCOUT["text_config"], "attn_temperature_tuning": True}
    return transformers.Llama4Config(**data)


def test_scout_parameter_counts_equal_transformers() -> None:
    """The text model tcpc builds equals Llama4ForCausalLM; the card's total also holds the vision
    encoder and projector (model_cards.toml's unbuilt_params), which is the rest of
    Llama4ForConditionalGeneration."""
    config = _scout_for_transformers()
    with torch.device("meta"):
        text = transformers.Llama4ForCausalLM(config.text_config)
        whole = transformers.Llama4ForConditionalGeneration(config)
    ours = _ours(load_model("llama-4-scout-17b-16e-instruct").config)
    assert ours == sum(p.numel() for p in text.parameters())
    cards = tomllib.loads((BUNDLED / "model_cards.toml").read_text())
    unbuilt = cards["llama-4-scout-17b-16e-instruct"]["unbuilt_params"]
    assert ours + unbuilt == sum(p.numel() for p in whole.parameters())


def test_scout_layers_as_transformers_lays_them_out() -> None:
    """Every fourth layer NoPE: global, temperature-tuned, no q/k norm; the others RoPE, chunked
    (8192) and q/k-normed; every layer MoE (interleave_moe_layer_step 1)."""
    cfg = load_model("llama-4-scout-17b-16e-instruct").config
    _same_layers(cfg, _scout_for_transformers().text_config)
    assert {layer.rope.kind for layer in cfg.layers if layer.rope} == {"llama3"}


def test_llama4_fields_left_out_take_llama4_text_config_defaults() -> None:
    """A bare llama4_text config naming only its sizes: NoPE every 4th layer, chunks of 8192,
    every layer MoE (step 1), q/k norm, temperature tuning on, intermediate_size_mlp 16384."""
    fields = dict(vocab_size=97, hidden_size=64, intermediate_size=32, num_hidden_layers=8,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16)  # fmt: skip
    text = transformers.Llama4TextConfig(**fields)
    cfg = read_model_config(RawConfig({"model_type": "llama4_text", **fields}, "config.json"), "m")
    _same_layers(cfg, text)
    assert cfg.intermediate == text.intermediate_size_mlp == 16384
    assert (cfg.moe.experts, cfg.moe.top_k) == (text.num_local_experts, text.num_experts_per_tok) == (16, 1)
    assert cfg.layers[3].temperature == Temperature(text.floor_scale, text.attn_scale)


def _same_layers(cfg, text) -> None:
    """Each layer's RoPE, q/k norm, temperature, chunk and MoE as Llama4TextConfig lays them out."""
    assert cfg.attention.qk_norm == ("l2" if text.use_qk_norm else "none")
    assert cfg.moe.weights_input and cfg.moe.shared is not None
    for i, layer in enumerate(cfg.layers):
        rope = bool(text.no_rope_layers[i])
        assert (layer.rope is not None) == rope and layer.qk_norm == rope
        assert (layer.temperature is not None) == (not rope)
        chunked = text.layer_types[i] == "chunked_attention"
        assert layer.chunk == (text.attention_chunk_size if chunked else None)
        assert layer.moe == (i in text.moe_layers)


def test_llama4_multimodal_config_reads_as_its_text_config(tmp_path) -> None:
    """A llama4 config is its text_config (llama4_text) plus a vision model tcpc does not build."""
    text = {**SCOUT["text_config"], "num_hidden_layers": 4}
    text["moe_layers"], text["no_rope_layers"] = text["moe_layers"][:4], text["no_rope_layers"][:4]
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text(json.dumps(text))
    (tmp_path / "whole").mkdir()
    (tmp_path / "whole" / "config.json").write_text(json.dumps({**SCOUT, "text_config": text}))
    bare, whole = (load_model(tmp_path / d).config for d in ("bare", "whole"))
    assert dataclasses.replace(bare, name="") == dataclasses.replace(whole, name="")


def _bites(cfg):
    """Llama 4's special parts, each switched off."""
    off = dataclasses.replace

    def layers(**change):
        return tuple(off(layer, **{k: f(layer) for k, f in change.items()}) for layer in cfg.layers)

    rope = next(layer.rope for layer in cfg.layers if layer.rope is not None)
    return {
        "chunked attention": off(cfg, layers=layers(chunk=lambda layer: None)),
        "temperature tuning": off(cfg, layers=layers(temperature=lambda layer: None)),
        "q/k L2 norm": off(cfg, attention=off(cfg.attention, qk_norm="none")),
        "router weights on the expert input": off(cfg, moe=off(cfg.moe, weights_input=False)),
        "interleaved RoPE pairs": off(cfg, positions=Positions()),
        "shared expert": off(cfg, moe=off(cfg.moe, shared=None)),
        "NoPE layer": off(cfg, layers=layers(rope=lambda layer: rope)),
    }


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    model = build("llama4")
    return model, load_model(save(model, tmp_path_factory.mktemp("llama4")))


def test_llama4_tiny_model_has_each_special_part(llama4) -> None:
    """The tiny model has each part the oracle test makes bite: a chunk shorter than the test's 10
    positions, a NoPE layer with temperature tuning, q/k norm, an MoE layer with a shared expert
    between dense ones."""
    cfg = llama4[1].config
    assert {layer.chunk for layer in cfg.layers} == {3, None}
    assert [layer.rope is None for layer in cfg.layers] == [False, True, False]
    assert [layer.moe for layer in cfg.layers] == [False, True, False]
    assert cfg.layers[1].temperature is not None and cfg.attention.qk_norm == "l2"
    assert cfg.moe.shared is not None and cfg.intermediate != cfg.moe.intermediate


@pytest.mark.parametrize(
    "part",
    ["chunked attention", "temperature tuning", "q/k L2 norm", "router weights on the expert input",
     "interleaved RoPE pairs", "shared expert", "NoPE layer"],
)  # fmt: skip
def test_llama4_each_special_part_bites(llama4, part: str) -> None:
    """Switched off, each part moves the logits past the oracle test's 1e-4 (that test passing
    with it on is then no accident)."""
    model, loaded = llama4
    cfg = _bites(loaded.config)[part]
    result = generate(cfg, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs = reference_logits(model, PROMPT, result.token_matrix[0].tolist()[:STEPS])
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True)) > 1e-3, part


def _scout_with(tmp_path, **change) -> str:
    text = {**SCOUT["text_config"], **change}  # None: an explicit null
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SCOUT, "text_config": text}))
    return str(path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"no_rope_layers": [1, 0]}, "no_rope_layers: expected at least 48 entries of 0 or 1, got [1, 0]"),
        ({"no_rope_layers": [2] * 48}, "no_rope_layers: expected at least 48 entries of 0 or 1"),
        ({"moe_layers": [0, 48]}, "text_config.moe_layers[1]: expected a layer index from 0 to 47"),
        ({"layer_types": ["sliding_attention"] * 48}, "layer_types: expected 48 entries of full_attention"),
        ({"attention_chunk_size": None, "layer_types": ["chunked_attention"] * 48},
         "layer_types has chunked_attention layers but attention_chunk_size is not set"),
        ({"attention_chunk_size": 0}, "text_config.attention_chunk_size: expected an integer from 1"),
        ({"attn_temperature_tuning": "yes"}, 'attn_temperature_tuning: expected bool or int, got "yes"'),
        ({"floor_scale": -1}, "text_config.floor_scale: expected a number > 0"),
        ({"intermediate_size_mlp": "big"}, 'text_config.intermediate_size_mlp: expected an integer from 1'),
        ({"num_experts_per_tok": 17}, "num_experts_per_tok (17) exceeds num_local_experts (16)"),
    ],
)  # fmt: skip
def test_bad_llama4_config_is_one_line_exit_2(change: dict, expected: str, tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    out = tmp_path / "out.tir"
    assert main(["compile", _scout_with(tmp_path, **change), "--seq", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "config.json" in err and expected in err, err
    assert not out.exists()


def test_llama4_without_text_config_is_refused(tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in SCOUT.items() if k != "text_config"}))
    assert main(["compile", str(path), "--seq", "4", "-o", str(tmp_path / "out.tir")]) == 2
    err = capsys.readouterr().err
    assert "missing field 'text_config' (a llama4 config nests the text model there)" in err


def test_llama4_image_text_checkpoint_runs_its_language_model(tmp_path) -> None:
    """Llama4ForConditionalGeneration as saved (its config model_type llama4, its text weights under
    language_model.): tcpc runs the text model and gives the wrapper's own text-only logits."""
    text = build("llama4")
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14, vision_output_dim=32, projector_input_dim=32,
                  projector_output_dim=32)  # fmt: skip
    config = transformers.Llama4Config(text_config=text.config.to_dict(), vision_config=vision)
    config._attn_implementation = "eager"
    whole = transformers.Llama4ForConditionalGeneration(config).eval()
    weights = {f"language_model.{k}": v for k, v in text.state_dict().items()}
    missing = whole.load_state_dict(weights, strict=False).missing_keys
    assert not [k for k in missing if k.startswith("language_model.")]
    loaded = load_model(save(whole, tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "llama4"
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], 2)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs = reference_logits(whole, PROMPT, result.token_matrix[0].tolist()[:2])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


def test_an_unknown_text_model_type_declaring_llama4_for_causal_lm_reads_as_llama4_text(tmp_path) -> None:
    """A text-only fine-tune's config under a model_type of its own, declaring Llama4ForCausalLM."""
    text = {**SCOUT["text_config"], "model_type": "my_llama4", "architectures": ["Llama4ForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(text))
    cfg = load_model(tmp_path).config
    assert "(my_llama4 read as llama4_text: Llama4ForCausalLM)" in cfg.name
    scout = load_model("llama-4-scout-17b-16e-instruct").config
    assert dataclasses.replace(cfg, name="") == dataclasses.replace(scout, name="")
