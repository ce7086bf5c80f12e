"""The families of issue 28 beyond the shared oracle tests (test_families.py runs them too):
parameter counts equal transformers' own, on the tiny models and on the bundled published configs
(built on the meta device, no weights), and the parts a tiny model cannot show."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoConfig

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import Positions, RawConfig, Temperature
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.families.common import ACTIVATIONS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
from tests.oracle.tiny_models import COMMON, FAMILIES, ISSUE_28, build, save, use_long_factors

# bundled config -> the transformers class that counts it
BUNDLED_CLASSES = {
    "gemma-2b": ("GemmaConfig", "GemmaForCausalLM"),
    "c4ai-command-r-v01": ("CohereConfig", "CohereForCausalLM"),
    "c4ai-command-r7b-12-2024": ("Cohere2Config", "Cohere2ForCausalLM"),
    "gpt-j-6b": ("GPTJConfig", "GPTJForCausalLM"),
    "deepseek-v2-lite": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
    "exaone-4.0-32b": ("Exaone4Config", "Exaone4ForCausalLM"),
    "k-exaone-236b-a23b": ("ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
    "glm-4-9b-chat-hf": ("GlmConfig", "GlmForCausalLM"),
    "glm-4-9b-0414": ("Glm4Config", "Glm4ForCausalLM"),
    "glm-4.5-air": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "phi-3.5-moe-instruct": ("PhimoeConfig", "PhimoeForCausalLM"),
    "granite-3.1-3b-a800m-instruct": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
    "dots.llm1.inst": ("Dots1Config", "Dots1ForCausalLM"),
    "minimax-m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
}


@pytest.mark.parametrize("name", sorted(ISSUE_28))
def test_tiny_parameter_count_equals_transformers(name: str, tmp_path) -> None:
    model = build(name)
    cfg = load_model(save(model, tmp_path)).config
    assert tcpc_params(cfg) == transformers_params(model)


@pytest.mark.parametrize("name", sorted(BUNDLED_CLASSES))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    model = bundled_on_meta(name, *BUNDLED_CLASSES[name])
    assert tcpc_params(load_model(name).config) == transformers_params(model)


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
    ours = tcpc_params(load_model("llama-4-scout-17b-16e-instruct").config)
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


def test_transformers_phimoe_rotary_keeps_the_short_factors_past_the_original_context() -> None:
    """Why tiny_models.use_long_factors patches the oracle: transformers 5.23's Phi-3.5-MoE rotary
    forward rotates position 11 of a 12-token sequence (original context 8) by the short factors
    (the first is 1.0, so cos(11)), times long_mscale; patched, by the long ones (1.5: cos(11 / 1.5)).
    Should a release fix the forward, this fails and the patch can go."""
    config_cls, model_cls, extra = FAMILIES["phimoe"]
    config = getattr(transformers, config_cls)(**{**COMMON, **extra})
    rotary = getattr(transformers, model_cls)(config).model.rotary_emb
    positions = torch.arange(12)[None]
    scale = extra["rope_parameters"]["long_mscale"]
    cos = rotary(torch.zeros(1), positions)[0][0, -1, 0].item()
    assert cos == pytest.approx(scale * np.cos(11.0), abs=1e-5)
    use_long_factors(SimpleNamespace(model=SimpleNamespace(rotary_emb=rotary)))
    cos = rotary(torch.zeros(1), positions)[0][0, -1, 0].item()
    assert cos == pytest.approx(scale * np.cos(11.0 / 1.5), abs=1e-5)


def test_deepseek_v2_routing_parts_move_transformers_logits() -> None:
    """The tiny DeepSeek-V2 is sensitive to what its oracle test checks: switched to greedy top-k,
    a routed scale of 1, or without yarn's softmax mscale, transformers' own logits move by > 1e-2."""
    ids = torch.tensor([[5, 17, 3, 88, 42, 9]])
    with torch.no_grad():
        base = build("deepseek_v2")(ids).logits
        rope = {**FAMILIES["deepseek_v2"][2]["rope_parameters"], "mscale_all_dim": 0}
        for change in ({"topk_method": "greedy"}, {"routed_scaling_factor": 1.0}, {"rope_parameters": rope}):
            assert (build("deepseek_v2", **change)(ids).logits - base).abs().max() > 1e-2, change


def test_deepseek_v2_router_ignores_norm_topk_prob_as_transformers_does(tmp_path) -> None:
    """DeepseekV2TopkRouter never renormalises the top-k weights; the tiny model says
    norm_topk_prob true, and tcpc reads it as transformers does."""
    assert FAMILIES["deepseek_v2"][2]["norm_topk_prob"] is True
    cfg = load_model(save(build("deepseek_v2"), tmp_path)).config
    assert not cfg.moe.normalize_top_k and cfg.moe.group_score == "max" and cfg.moe.routed_scale == 2.5


DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_experts_per_tok": 2, "n_routed_experts": 8,
    "moe_intermediate_size": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
    "v_head_dim": 8, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2,
}  # fmt: skip
PHIMOE = {
    "model_type": "phimoe", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4,
    "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                     "short_mscale": 1.2, "long_mscale": 1.2, "original_max_position_embeddings": 8},
}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "change", "message"),
    [
        (DEEPSEEK_V2, {"topk_method": "noaux_tc"}, "topk_method: expected one of greedy, group_limited"),
        (DEEPSEEK_V2, {"scoring_func": "sigmoid"}, "scoring_func: expected 'softmax', got 'sigmoid'"),
        (DEEPSEEK_V2, {"moe_layer_freq": 2}, "moe_layer_freq: expected 1"),
        (DEEPSEEK_V2, {"n_group": 3}, "n_group (3) must split n_routed_experts (8) into groups of 1 or more"),
        (DEEPSEEK_V2, {"topk_group": 1, "num_experts_per_tok": 3}, "num_experts_per_tok (3) exceeds the 2"),
        (DEEPSEEK_V2, {"n_group": None}, "missing field 'n_group'"),
        (DEEPSEEK_V2, {"mlp_bias": True}, "mlp_bias: true is not supported"),
        (PHIMOE, {"num_experts_per_tok": 4}, "num_experts_per_tok: sparsemixer routes every token to 2"),
        (PHIMOE, {"rope_scaling": {**PHIMOE["rope_scaling"], "long_mscale": None}},
         "missing field 'rope_scaling.long_mscale'"),
        (PHIMOE, {"rope_scaling": {"type": "linear", "factor": 2.0}}, "'linear' is not supported for phimoe"),
        (PHIMOE, {"router_jitter_noise": -0.1}, "router_jitter_noise: expected a number >= 0"),
        (PHIMOE, {"rope_scaling": {**PHIMOE["rope_scaling"], "short_mscale": 0}},
         "short_mscale: expected a number > 0"),
        (DEEPSEEK_V2, {"moe_layer_freq": 0}, "moe_layer_freq: expected an integer from 1"),
        (DEEPSEEK_V2, {"topk_method": 3}, "topk_method: expected a string, got 3"),
    ],
)  # fmt: skip
def test_bad_fields_are_one_line_errors(base: dict, change: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        read_model_config(RawConfig({**base, **change}, "config.json"), "m")
    assert "\n" not in str(e.value) and str(e.value).startswith("config.json: ")


@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3"])
def test_deepseek_class_defaults_fill_what_a_config_leaves_out(model_type: str) -> None:
    """A config naming only the sizes gets the DeepseekV2Config / DeepseekV3Config defaults:
    experts, shared experts, groups, LoRA ranks, head dims and dense layers as transformers builds them."""
    fields = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                  num_attention_heads=4, num_experts_per_tok=4)  # fmt: skip
    theirs = AutoConfig.for_model(model_type, **fields)
    cfg = read_model_config(RawConfig({"model_type": model_type, **fields}, "config.json"), "m")
    assert cfg.moe.experts == theirs.n_routed_experts and cfg.moe.intermediate == theirs.moe_intermediate_size
    assert cfg.moe.shared.intermediate == theirs.n_shared_experts * theirs.moe_intermediate_size
    assert cfg.mla.q_lora_rank == theirs.q_lora_rank and cfg.mla.kv_lora_rank == theirs.kv_lora_rank
    assert (cfg.mla.nope_dim, cfg.mla.rope_dim, cfg.mla.v_dim) == (
        theirs.qk_nope_head_dim, theirs.qk_rope_head_dim, theirs.v_head_dim)  # fmt: skip
    assert [layer.moe for layer in cfg.layers] == [i >= theirs.first_k_dense_replace for i in range(4)]
    assert cfg.moe.routed_scale == theirs.routed_scaling_factor
    if model_type == "deepseek_v3":
        assert (cfg.moe.groups, cfg.moe.topk_groups) == (theirs.n_group, theirs.topk_group)


# microsoft/Phi-3.5-MoE-instruct's published fields, without its 64-entry longrope factor lists
# (not bundled: no public copy of them was found to check a rebuilt file against). The fields agree
# with a field-by-field listing of the published config in a public repository
# (xinyuwei-david/david-share, Deep-Learning/Phi-3.5-MoE-and-Mini-Fine-tuning/README.md).
PHI_35_MOE = {
    "architectures": ["PhiMoEForCausalLM"], "attention_bias": True, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 6400, "lm_head_bias": True, "max_position_embeddings": 131072,
    "model_type": "phimoe", "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 16, "original_max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "router_jitter_noise": 0.01, "sliding_window": 131072,
    "tie_word_embeddings": False, "vocab_size": 32064,
}  # fmt: skip


def test_phi_35_moe_counts_what_transformers_and_its_card_count() -> None:
    """41.87B, as transformers' PhimoeForCausalLM counts it (experts, biases, LayerNorms and the
    LM head's bias); the hub lists 41.9B, and the card's 6.6B active is the count with 2 of the 16
    experts per layer."""
    config = transformers.PhimoeConfig(**{k: v for k, v in PHI_35_MOE.items() if k != "model_type"})
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.PhimoeForCausalLM(config).parameters())
    cfg = read_model_config(RawConfig(PHI_35_MOE, "config.json"), "Phi-3.5-MoE-instruct")
    ours = tcpc_params(cfg)
    assert ours == theirs and round(ours / 1e9, 1) == 41.9
    inactive = len(cfg.layers) * (cfg.moe.experts - cfg.moe.top_k) * 3 * cfg.hidden * cfg.moe.intermediate
    assert round((ours - inactive) / 1e9, 1) == 6.6


# deepseek-ai/DeepSeek-V2's sizes and routing (group-limited: 3 of 8 groups, routed scale 16),
# written from memory of the published config and checked here against its model card's counts.
DEEPSEEK_V2_FULL = {
    "model_type": "deepseek_v2", "vocab_size": 102400, "hidden_size": 5120, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "num_hidden_layers": 60, "num_attention_heads": 128,
    "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 160, "n_shared_experts": 2,
    "num_experts_per_tok": 6, "n_group": 8, "topk_group": 3, "topk_method": "group_limited_greedy",
    "routed_scaling_factor": 16.0, "first_k_dense_replace": 1, "max_position_embeddings": 163840,
}  # fmt: skip


def test_deepseek_v2_counts_what_transformers_and_its_card_count() -> None:
    """235.74B as transformers' DeepseekV2ForCausalLM counts it; the card: "236B total parameters,
    of which 21B are activated for each token" (21.38B with 6 of the 160 routed experts)."""
    config = transformers.DeepseekV2Config(**{k: v for k, v in DEEPSEEK_V2_FULL.items() if k != "model_type"})
    with torch.device("meta"):
        theirs = sum(p.numel() for p in transformers.DeepseekV2ForCausalLM(config).parameters())
    cfg = read_model_config(RawConfig(DEEPSEEK_V2_FULL, "config.json"), "DeepSeek-V2")
    ours = tcpc_params(cfg)
    assert ours == theirs and round(ours / 1e9) == 236
    assert (cfg.moe.groups, cfg.moe.topk_groups, cfg.moe.group_score) == (8, 3, "max")
    moe_layers = sum(layer.moe for layer in cfg.layers)
    inactive = moe_layers * (cfg.moe.experts - cfg.moe.top_k) * 3 * cfg.hidden * cfg.moe.intermediate
    assert round((ours - inactive) / 1e9) == 21


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
        ({"v_head_dim": 0}, "v_head_dim: expected an integer from 1"),
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
        ({"n_group": 3}, "n_group (3) must split num_experts (4) into groups of 2 or more"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok (5) exceeds the 4 experts (num_experts)"),
        ({"num_shared_experts": 1 << 16, "num_experts_per_tok": 2},
         "num_shared_experts x moe_intermediate_size (65536 x 24)"),
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


def test_minicpm3_scales_the_softmax_by_yarns_mscale_as_transformers() -> None:
    """MiniCPM3Attention multiplies its scaling by mscale(factor, mscale_all_dim)^2 (DeepSeek-V2's
    yarn_apply_mscale) when the RoPE is scaled and mscale_all_dim is set."""
    rope = {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "mscale_all_dim": 0.7,
            "original_max_position_embeddings": 8}  # fmt: skip
    fields = {**COMMON, **FAMILIES["minicpm3"][2], "num_hidden_layers": 2, "max_position_embeddings": 32}
    fields["rope_parameters"] = rope
    theirs = transformers.MiniCPM3ForCausalLM(transformers.MiniCPM3Config(**fields))
    cfg = read_model_config(RawConfig({"model_type": "minicpm3", **fields}, "m.json"), "m")
    assert cfg.scale == pytest.approx(theirs.model.layers[0].self_attn.scaling, rel=1e-6)
    assert cfg.scale != pytest.approx((8 + 4) ** -0.5)
