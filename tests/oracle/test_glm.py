"""GLM, GLM-4 and GLM-4.5: each special part of the tiny models (tests/oracle/tiny_models.py GLM),
switched the other way in tcpc's config, moves the logits away from transformers' by more than the
oracle tests' tolerance, so those tests check it: interleaved and partial RoPE, q/k/v biases,
GLM-4's extra norms, and GLM-4.5's q/k norm and routing (correction bias, groups, scale, shared
experts, top-k renormalisation). The first dense layers are checked by the parameter counts.
Bad GLM configs are one-line errors with exit code 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tcp_compiler.cli import main
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.test_families import PROMPT, reference_logits
from tests.oracle.tiny_models import build, save

FLIP = object()
SWITCHES = [
    ("glm", "positions", "interleave", FLIP),
    ("glm", "positions", "rotary_dim", None),
    ("glm", "attention", "qkv_bias", FLIP),
    ("glm4", "positions", "interleave", FLIP),
    ("glm4", "positions", "rotary_dim", None),
    ("glm4", "norms", "sandwich", FLIP),
    ("glm4_moe", "positions", "interleave", FLIP),
    ("glm4_moe", "positions", "rotary_dim", None),
    ("glm4_moe", "attention", "qkv_bias", FLIP),
    ("glm4_moe", "attention", "qk_norm", "none"),
    ("glm4_moe", "moe", "correction_bias_name", None),
    ("glm4_moe", "moe", "groups", 1),
    ("glm4_moe", "moe", "routed_scale", 1.0),
    ("glm4_moe", "moe", "shared", None),
    ("glm4_moe", "moe", "normalize_top_k", FLIP),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> (its loaded tiny checkpoint, transformers' prefill logits)"""
    models = {}
    for name in sorted({s[0] for s in SWITCHES}):
        model = build(name)
        models[name] = (
            load_model(save(model, tmp_path_factory.mktemp(name))),
            reference_logits(model, PROMPT, [])[0],
        )
    return models


@pytest.mark.parametrize(("family", "group", "field", "value"), SWITCHES)
def test_each_part_moves_the_logits(tiny, family: str, group: str, field: str, value) -> None:
    loaded, theirs = tiny[family]
    cfg = loaded.config
    part = getattr(cfg, group)
    new = (not getattr(part, field)) if value is FLIP else value
    if group == "moe" and field == "groups":
        part = dataclasses.replace(part, topk_groups=1)
    changed = dataclasses.replace(cfg, **{group: dataclasses.replace(part, **{field: new})})
    same = generate(cfg, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], 0).prefill_logits[0]
    moved = generate(changed, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], 0).prefill_logits[0]
    np.testing.assert_allclose(same, theirs, atol=1e-4, rtol=0)
    assert np.abs(moved - theirs).max() > 1e-3, (family, group, field)


AIR = json.loads((BUNDLED / "glm-4.5-air.json").read_text())


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"head_dim": None},
            "hidden_size (4096) is not a multiple of num_attention_heads (96); set head_dim",
        ),
        ({"partial_rotary_factor": 0.001}, "partial_rotary_factor 0.001 gives 0 rotary dims of 128"),
        ({"partial_rotary_factor": 1.5}, "partial_rotary_factor: expected a number > 0 and <= 1, got 1.5"),
        ({"n_group": 3}, "n_group (3) must split n_routed_experts (128) into groups of 2 or more"),
        ({"n_group": 8, "topk_group": 9}, "topk_group (9) exceeds n_group (8)"),
        ({"first_k_dense_replace": -1}, "first_k_dense_replace: expected an integer from 0"),
        ({"use_qk_norm": "yes"}, 'use_qk_norm: expected true or false, got "yes"'),
        ({"routed_scaling_factor": 0}, "routed_scaling_factor: expected a number > 0"),
        ({"model_type": "glm4", "attention_bias": 1}, "attention_bias: expected true or false, got 1"),
    ],
)
def test_bad_glm_config_is_one_line_exit_2(change: dict, expected: str, tmp_path: Path, capsys) -> None:
    config = {k: v for k, v in {**AIR, **change}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "out.tir"
    assert main(["compile", str(path), "--seq", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "config.json" in err and expected in err, err
    assert not out.exists()
