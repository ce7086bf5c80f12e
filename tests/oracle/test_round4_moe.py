"""Granite 3 MoE (granitemoe, granitemoeshared), dots.llm1 (dots1) and MiniMax-M2 (minimax_m2)
beyond the shared oracle tests (test_families.py, test_sharding.py and the parameter counts of
test_round3_families.py run them too): each special part of their tiny models
(tests/oracle/tiny_models.py ROUND4_MOE), switched off in tcpc's config, moves the logits away from
transformers' by more than the oracle tests' tolerance, so those tests check it; fields a config
leaves out take the transformers class defaults; bad configs are one-line errors with exit 2."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoConfig

from tcp_compiler.cli import main
from tcp_compiler.frontend.config import ModelConfig, Positions, RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
from tests.oracle.tiny_models import build, save

off = dataclasses.replace


def _moe(**change) -> Callable[[ModelConfig], ModelConfig]:
    return lambda cfg: off(cfg, moe=off(cfg.moe, **change))


def _flip(group: str, field: str) -> Callable[[ModelConfig], ModelConfig]:
    return lambda cfg: off(
        cfg, **{group: off(getattr(cfg, group), **{field: not getattr(getattr(cfg, group), field)})}
    )


def _attention(**change) -> Callable[[ModelConfig], ModelConfig]:
    return lambda cfg: off(cfg, attention=off(cfg.attention, **change))


def _no_windows(cfg: ModelConfig) -> ModelConfig:
    return off(cfg, layers=tuple(off(layer, sliding_window=None) for layer in cfg.layers))


GRANITE = {
    "attention_multiplier": _attention(scale=None),
    "residual_multiplier": lambda cfg: off(cfg, residual=off(cfg.residual, branch_scale=1.0)),
    "embedding_multiplier": lambda cfg: off(cfg, embedding=off(cfg.embedding, scale=None)),
    "logits_scaling": lambda cfg: off(cfg, embedding=off(cfg.embedding, logits_divisor=1.0)),
    "softmax over the top-k logits": _moe(softmax_after_top_k=False),
}
SWITCHES = {
    **{("granitemoe", part): switch for part, switch in GRANITE.items()},
    ("granitemoeshared", "shared MLP"): _moe(shared=None),
    ("granitemoeshared", "residual_multiplier"): GRANITE["residual_multiplier"],
    ("dots1", "per-head q/k norm"): _attention(qk_norm="none"),
    ("dots1", "q/k/v biases"): _flip("attention", "qkv_bias"),
    ("dots1", "o bias"): _flip("attention", "out_bias"),
    ("dots1", "sliding window"): _no_windows,
    ("dots1", "correction bias"): _moe(correction_bias_name=None),
    ("dots1", "expert groups"): _moe(groups=1, topk_groups=1),
    ("dots1", "routed_scaling_factor"): _moe(routed_scale=1.0),
    ("dots1", "shared experts"): _moe(shared=None),
    ("dots1", "norm_topk_prob"): _flip("moe", "normalize_top_k"),
    ("minimax_m2", "all-heads q/k norm"): _attention(qk_norm="none"),
    ("minimax_m2", "rotary_dim"): lambda cfg: off(cfg, positions=Positions()),
    ("minimax_m2", "correction bias"): _moe(correction_bias_name=None),
    ("minimax_m2", "sigmoid scores"): _moe(scoring="softmax"),
    ("minimax_m2", "top-k renormalised"): _flip("moe", "normalize_top_k"),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> (the transformers model, its loaded tiny checkpoint)"""
    models = {}
    for name in sorted({family for family, _ in SWITCHES}):
        model = build(name)
        models[name] = (model, load_model(save(model, tmp_path_factory.mktemp(name))))
    return models


@pytest.mark.parametrize(("family", "part"), sorted(SWITCHES))
def test_each_part_bites(tiny, family: str, part: str) -> None:
    """Switched off, the part moves prefill or decode logits past 1e-3 (decode too: the window
    and routing differences may only show once the sequence grows)."""
    model, loaded = tiny[family]
    cfg = SWITCHES[family, part](loaded.config)
    assert cfg != loaded.config, part
    result = generate(cfg, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs = reference_logits(model, PROMPT, result.token_matrix[0].tolist()[:STEPS])
    assert max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True)) > 1e-3, (family, part)


def test_tiny_models_have_each_part(tiny) -> None:
    """The parts the switches turn off are there: dots1's window on its last layer only, after a
    dense first layer; MiniMax-M2's RoPE on half of each head; every other layer MoE."""
    dots = tiny["dots1"][1].config
    assert [layer.sliding_window for layer in dots.layers] == [None, None, 3]
    assert [layer.moe for layer in dots.layers] == [False, True, True]
    assert (dots.moe.groups, dots.moe.topk_groups, dots.moe.shared.intermediate) == (4, 2, 48)
    minimax = tiny["minimax_m2"][1].config
    assert minimax.rotary == 4 and minimax.head_dim == 8 and all(layer.moe for layer in minimax.layers)
    assert tiny["granitemoeshared"][1].config.moe.shared.intermediate == 16
    assert tiny["granitemoe"][1].config.moe.shared is None


# 32 query heads: a multiple of dots1's default 32 KV heads and MiniMax-M2's 8
SIZES = dict(
    vocab_size=97, hidden_size=256, intermediate_size=32, num_hidden_layers=4, num_attention_heads=32
)
BARE = {
    "granitemoe": {},
    "granitemoeshared": {},
    "dots1": dict(n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2),
    "minimax_m2": {},
}


@pytest.mark.parametrize("model_type", sorted(BARE))
def test_left_out_fields_take_the_class_defaults(model_type: str) -> None:
    """Heads, experts, top-k, widths, windows, RoPE and the position limit as the transformers
    Configuration class fills them for a config naming only its sizes."""
    fields = {**SIZES, **BARE[model_type]}
    theirs = AutoConfig.for_model(model_type, **fields)
    ours = read_model_config(RawConfig({"model_type": model_type, **fields}, "config.json"), "m")
    assert ours.kv_heads == theirs.num_key_value_heads
    assert ours.head_dim == (
        getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads
    )
    assert ours.max_positions == theirs.max_position_embeddings
    assert (ours.moe.experts, ours.moe.top_k) == (theirs.num_local_experts, theirs.num_experts_per_tok)
    assert {layer.rope.theta for layer in ours.layers} == {theirs.rope_parameters["rope_theta"]}
    rotary = int(ours.head_dim * theirs.rope_parameters.get("partial_rotary_factor", 1.0))
    assert ours.rotary == rotary
    types = getattr(theirs, "layer_types", None) or ["full_attention"] * theirs.num_hidden_layers
    assert [layer.sliding_window is not None for layer in ours.layers] == [
        t == "sliding_attention" for t in types
    ]
    shared = getattr(theirs, "shared_intermediate_size", 0) if model_type == "granitemoeshared" else 0
    if model_type == "dots1":
        shared = theirs.n_shared_experts * theirs.moe_intermediate_size
    assert (ours.moe.shared.intermediate if ours.moe.shared else 0) == shared
    assert ours.embedding.tied == theirs.tie_word_embeddings


def test_minimax_rotary_dim_gives_way_to_an_explicit_partial_rotary_factor() -> None:
    """MiniMaxM2Config turns rotary_dim into partial_rotary_factor only when the config sets none."""
    for extra in ({"rotary_dim": 16}, {"rotary_dim": 16, "partial_rotary_factor": 0.25}):
        fields = {**SIZES, "head_dim": 64, **extra}
        theirs = AutoConfig.for_model("minimax_m2", **fields)
        ours = read_model_config(RawConfig({"model_type": "minimax_m2", **fields}, "config.json"), "m")
        assert ours.rotary == int(64 * theirs.rope_parameters["partial_rotary_factor"])


@pytest.mark.parametrize(
    ("model_type", "change", "expected"),
    [
        ("granitemoe", {"num_experts_per_tok": 9}, "num_experts_per_tok (9) exceeds num_local_experts (8)"),
        ("granitemoeshared", {"shared_intermediate_size": "wide"}, "shared_intermediate_size"),
        ("dots1", {"n_shared_experts": None}, "n_shared_experts"),
        ("dots1", {"n_group": 3}, "n_group (3) must split n_routed_experts (4)"),
        ("dots1", {"max_window_layers": None}, "max_window_layers: expected a layer index"),
        ("minimax_m2", {"scoring_func": "softmax"}, "scoring_func: expected 'sigmoid'"),
        ("minimax_m2", {"rotary_dim": 3}, "partial_rotary_factor"),
        ("minimax_m2", {"num_local_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok (5) exceeds"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line_exit_2(model_type, change, expected, tmp_path: Path, capsys) -> None:
    data = {"model_type": model_type, **SIZES, "head_dim": 8, **BARE[model_type], **change}
    data = {k: v for k, v in data.items() if not (k == "n_shared_experts" and v is None)}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "out.tir"
    assert main(["compile", str(path), "--seq", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "config.json" in err and expected in err, err
    assert not out.exists()
