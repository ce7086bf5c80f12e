"""The families of issue 28 beyond the shared oracle tests (test_families.py runs them too):
parameter counts equal transformers' own, on the tiny models and on the bundled published configs
(built on the meta device, no weights), and the parts a tiny model cannot show."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoConfig

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.families.common import ACTIVATIONS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tests.oracle.tiny_models import COMMON, FAMILIES, ISSUE_28, build, save, use_long_factors

# bundled config -> the transformers class that counts it
BUNDLED_CLASSES = {
    "gemma-2b": ("GemmaConfig", "GemmaForCausalLM"),
    "c4ai-command-r-v01": ("CohereConfig", "CohereForCausalLM"),
    "c4ai-command-r7b-12-2024": ("Cohere2Config", "Cohere2ForCausalLM"),
    "gpt-j-6b": ("GPTJConfig", "GPTJForCausalLM"),
    "deepseek-v2-lite": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
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
    ours = _ours(cfg)
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
    ours = _ours(cfg)
    assert ours == theirs and round(ours / 1e9) == 236
    assert (cfg.moe.groups, cfg.moe.topk_groups, cfg.moe.group_score) == (8, 3, "max")
    moe_layers = sum(layer.moe for layer in cfg.layers)
    inactive = moe_layers * (cfg.moe.experts - cfg.moe.top_k) * 3 * cfg.hidden * cfg.moe.intermediate
    assert round((ours - inactive) / 1e9) == 21
