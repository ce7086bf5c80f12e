"""ERNIE 4.5 (`ernie4_5`, `ernie4_5_moe`) beyond the shared oracle tests (test_families.py runs the
tiny models against transformers, test_sharding.py on 2 and 4 chips): parameter counts equal
transformers' own on the bundled and published configs, the MoE layers where transformers puts
them, each special part made to bite, the class defaults, and bad fields as one-line errors."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch
import transformers

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import Positions, RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.families.ernie4_5 import MOE as MOE_DEFAULTS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
from tests.oracle.tiny_models import build, save

CLASSES = {
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
}
BUNDLED_MODELS = {"ernie-4.5-0.3b-pt": "ernie4_5", "ernie-4.5-21b-a3b-pt": "ernie4_5_moe"}
# baidu/ERNIE-4.5-300B-A47B-PT's fields, written without hub access from the published fields as
# public code quotes them (the MindIE router test's FAKE_CONFIG_DICT for ERNIE-4.5-300B: 54 layers,
# experts from layer 3 to 53, no shared expert, top-8 of 64, expert FFN 3584) and an untied LM
# head, as a public listing of the released checkpoint's tensors shows (lm_head.weight [8192, 103424]
# beside ernie.embed_tokens.weight); not bundled for that reason.
ERNIE_300B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_act": "silu",
    "hidden_size": 8192, "intermediate_size": 28672, "max_position_embeddings": 131072,
    "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 54, "rms_norm_eps": 1e-05,
    "vocab_size": 103424, "rope_theta": 500000, "use_bias": False, "moe_num_experts": 64,
    "moe_num_shared_experts": 0, "moe_layer_start_index": 3, "moe_layer_end_index": 53,
    "moe_intermediate_size": 3584, "moe_k": 8, "moe_layer_interval": 1, "moe_use_aux_free": True,
    "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}  # fmt: skip


def _transformers(data: dict, model_type: str) -> torch.nn.Module:
    config_cls, model_cls = CLASSES[model_type]
    config = getattr(transformers, config_cls)(**{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        return getattr(transformers, model_cls)(config)


@pytest.mark.parametrize("name", sorted(BUNDLED_MODELS))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    model = bundled_on_meta(name, *CLASSES[BUNDLED_MODELS[name]])
    assert tcpc_params(load_model(name).config) == transformers_params(model)


def _active(cfg) -> int:
    """Parameters one token runs: all but the routed experts it is not sent to."""
    moe_layers = sum(layer.moe for layer in cfg.layers)
    idle = moe_layers * (cfg.moe.experts - cfg.moe.top_k) * 3 * cfg.hidden * cfg.moe.intermediate
    return tcpc_params(cfg) - idle


def test_counts_match_the_model_cards() -> None:
    """ERNIE-4.5-0.3B: 0.36B ("Total Parameters 0.36B"); 21B-A3B: 21.83B in all, 3.35B per token
    (the card's "21B" and "3B"); 300B-A47B: 299.48B in all, 47.93B per token (the card's "300B" and
    "47B"), as transformers counts them."""
    small = load_model("ernie-4.5-0.3b-pt").config
    assert round(tcpc_params(small) / 1e9, 2) == 0.36
    a3b = load_model("ernie-4.5-21b-a3b-pt").config
    assert round(tcpc_params(a3b) / 1e9) == 22 and round(_active(a3b) / 1e9) == 3
    big = read_model_config(RawConfig(ERNIE_300B, "config.json"), "ERNIE-4.5-300B-A47B-PT")
    ours = tcpc_params(big)
    assert ours == transformers_params(_transformers(ERNIE_300B, "ernie4_5_moe"))
    assert round(ours / 1e9, 1) == 299.5 and round(_active(big) / 1e9) == 48


def _moe_layers(model: torch.nn.Module) -> list[bool]:
    return [type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in model.model.layers]


@pytest.mark.parametrize(
    "fields",
    [
        ERNIE_300B,
        json.loads((BUNDLED / "ernie-4.5-21b-a3b-pt.json").read_text()),
        {**ERNIE_300B, "num_hidden_layers": 9, "moe_layer_start_index": 2, "moe_layer_end_index": 7,
         "moe_layer_interval": 3},
        {**ERNIE_300B, "num_hidden_layers": 5, "moe_layer_start_index": 0, "moe_layer_end_index": -1,
         "moe_layer_interval": 2},
    ],
    ids=["300b", "21b", "interval-3", "end-minus-1"],
)  # fmt: skip
def test_moe_layers_as_transformers_lays_them_out(fields: dict) -> None:
    cfg = read_model_config(RawConfig(fields, "config.json"), "m")
    theirs = _transformers(fields, "ernie4_5_moe")
    assert [layer.moe for layer in cfg.layers] == _moe_layers(theirs)
    assert tcpc_params(cfg) == transformers_params(theirs)


def test_tiny_moe_model_has_each_special_part(tmp_path) -> None:
    """Layer 3 only has experts, and each of moe_layer_interval, _start_index and _end_index decides
    that (left to its class default, another layer would have experts); the correction bias is
    nonzero; the floor, 0.9, is above the top-3 sums of 8 softmax scores."""
    model = build("ernie4_5_moe")
    cfg = load_model(save(model, tmp_path)).config
    assert [layer.moe for layer in cfg.layers] == _moe_layers(model) == [i == 3 for i in range(6)]
    fields = json.loads((tmp_path / "config.json").read_text())
    for key, other in (("moe_layer_interval", {2, 3, 4}), ("moe_layer_start_index", {1, 3}),
                       ("moe_layer_end_index", {3, 5})):  # fmt: skip
        data = {k: v for k, v in fields.items() if k != key}
        default = read_model_config(RawConfig(data, "config.json"), "m")
        assert {i for i, layer in enumerate(default.layers) if layer.moe} == other, key
    assert cfg.moe.shared is not None and cfg.moe.normalize_floor == 0.9 and cfg.positions.interleave
    bias = model.model.layers[3].mlp.gate.moe_statics.e_score_correction_bias
    assert float(bias.abs().min()) > 0


def _bites(cfg):
    """Each ERNIE part switched off."""
    off = dataclasses.replace
    parts = {
        "interleaved RoPE pairs": off(cfg, positions=Positions()),
        "q/k/v/o biases": off(cfg, attention=off(cfg.attention, qkv_bias=False, out_bias=False)),
        "MLP biases": off(cfg, mlp=off(cfg.mlp, bias=False)),
    }
    if cfg.moe is not None:
        parts |= {
            "correction bias": off(cfg, moe=off(cfg.moe, correction_bias_name=None)),
            "moe_norm_min floor": off(cfg, moe=off(cfg.moe, normalize_floor=0.0)),
            "shared experts": off(cfg, moe=off(cfg.moe, shared=None)),
        }
    return parts


@pytest.fixture(scope="module", params=sorted(CLASSES))
def tiny(request, tmp_path_factory):
    model = build(request.param)
    return model, load_model(save(model, tmp_path_factory.mktemp(request.param)))


def test_each_special_part_bites(tiny) -> None:
    """Switched off, each part moves the logits past the oracle test's 1e-4 (that test passing
    with it on is then no accident); the MLP bias only on the dense model (the MoE tiny model has
    none: use_bias is refused there)."""
    model, loaded = tiny
    for part, cfg in _bites(loaded.config).items():
        if "bias" in part and loaded.config.moe is not None and part != "correction bias":
            continue
        result = generate(cfg, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], STEPS)
        ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
        theirs = reference_logits(model, PROMPT, result.token_matrix[0].tolist()[:STEPS])
        assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True)) > 1e-3, part


SIZES = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4)


def test_dense_defaults_fill_what_a_config_leaves_out() -> None:
    """Ernie4_5Config's defaults: head_dim 128 (not hidden / heads), 2 KV heads, tied embeddings,
    RoPE base 500000, eps 1e-5; head_dim null is hidden / heads, as its __post_init__ makes it."""
    theirs = transformers.Ernie4_5Config(**SIZES)
    cfg = read_model_config(RawConfig({"model_type": "ernie4_5", **SIZES}, "config.json"), "m")
    assert (cfg.head_dim, cfg.kv_heads, cfg.embedding.tied) == (theirs.head_dim, 2, True) == (128, 2, True)
    assert cfg.layers[0].rope.theta == theirs.rope_parameters["rope_theta"] == 500000.0
    assert cfg.norms.eps == theirs.rms_norm_eps
    null = read_model_config(RawConfig({"model_type": "ernie4_5", **SIZES, "head_dim": None}, "c.json"), "m")
    assert null.head_dim == transformers.Ernie4_5Config(**SIZES, head_dim=None).head_dim == 16


def test_moe_defaults_fill_what_a_config_leaves_out() -> None:
    """Ernie4_5_MoeConfig's defaults: 64 experts, top-6, 2 shared experts of 1536, experts from
    layer 1 to the last, 4 KV heads, head_dim hidden / heads, tied embeddings."""
    fields = {**SIZES, "moe_intermediate_size": 24}
    cfg = read_model_config(RawConfig({"model_type": "ernie4_5_moe", **fields}, "config.json"), "m")
    theirs = _transformers(fields, "ernie4_5_moe")
    assert [layer.moe for layer in cfg.layers] == _moe_layers(theirs) == [False, True, True, True]
    assert (cfg.moe.experts, cfg.moe.top_k) == (MOE_DEFAULTS["moe_num_experts"], MOE_DEFAULTS["moe_k"])
    assert cfg.moe.shared.intermediate == 2 * 24 and cfg.moe.normalize_floor == 1e-12
    assert (cfg.kv_heads, cfg.head_dim, cfg.embedding.tied) == (4, 16, True)
    assert tcpc_params(cfg) == transformers_params(theirs)


def test_moe_fields_by_their_attribute_map_names() -> None:
    """Ernie4_5_MoeConfig reads num_experts and num_experts_per_tok as moe_num_experts and moe_k."""
    fields = {**SIZES, "moe_intermediate_size": 24, "num_experts": 8, "num_experts_per_tok": 3}
    theirs = transformers.Ernie4_5_MoeConfig(**fields)
    cfg = read_model_config(RawConfig({"model_type": "ernie4_5_moe", **fields}, "config.json"), "m")
    assert (cfg.moe.experts, cfg.moe.top_k) == (theirs.moe_num_experts, theirs.moe_k) == (8, 3)
    assert tcpc_params(cfg) == transformers_params(_transformers(fields, "ernie4_5_moe"))


MOE_TINY = {**SIZES, "model_type": "ernie4_5_moe", "moe_num_experts": 4, "moe_k": 2}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"use_bias": True}, "use_bias: true is not supported for ernie4_5_moe"),
        ({"moe_k": 5}, "moe_k (5) exceeds the 4 experts (moe_num_experts)"),
        ({"moe_layer_end_index": -2}, "moe_layer_end_index: expected an integer from -1 to 1,024"),
        ({"moe_layer_interval": 0}, "moe_layer_interval: expected an integer from 1"),
        ({"moe_layer_start_index": "1"}, 'moe_layer_start_index: expected an integer from 0 to 1,024'),
        ({"moe_norm_min": -1}, "moe_norm_min: expected a number >= 0"),
        ({"moe_num_shared_experts": -1}, "moe_num_shared_experts: expected an integer from 0"),
        ({"moe_num_experts": 0}, "moe_num_experts: expected an integer from 1"),
        ({"use_bias": "no"}, 'use_bias: expected true or false, got "no"'),
    ],
)  # fmt: skip
def test_bad_fields_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        read_model_config(RawConfig({**MOE_TINY, **change}, "config.json"), "m")
    assert "\n" not in str(e.value) and str(e.value).startswith("config.json: ")


def test_bad_field_on_the_command_line_is_one_line_exit_2(tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MOE_TINY, "moe_layer_interval": 0}))
    out = tmp_path / "out.tir"
    assert main(["compile", str(path), "--seq", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "moe_layer_interval: expected an integer from 1" in err and not out.exists()
