"""Falcon-H1's config reader: transformers' class defaults for the fields a config leaves out, its
layers' parallel mixers and what they cache, and hostile values refused in one line naming the
file and field (exit code 2 from the CLI)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoConfig  # noqa: E402

from tcp_compiler.cli import main  # noqa: E402
from tcp_compiler.errors import FrontendError  # noqa: E402
from tcp_compiler.frontend.config import RawConfig  # noqa: E402
from tcp_compiler.frontend.families import read_model_config  # noqa: E402


def _read(fields: dict):
    return read_model_config(RawConfig({"model_type": "falcon_h1", **fields}, "config.json"), "m")


def test_left_out_fields_are_transformers_class_defaults() -> None:
    theirs = AutoConfig.for_model("falcon_h1")
    ours = _read({})
    ssm, att, mlp, emb = ours.ssm, ours.attention, ours.mlp, ours.embedding
    assert (ours.vocab, ours.hidden, ours.intermediate, ours.heads, ours.kv_heads, len(ours.layers)) == (
        theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_attention_heads,
        theirs.num_key_value_heads, theirs.num_hidden_layers,
    )  # fmt: skip
    assert ours.head_dim == theirs.hidden_size // theirs.num_attention_heads
    sizes = (ssm.kind, ssm.inner, ssm.heads, ssm.head_dim, ssm.groups, ssm.state, ssm.conv_kernel, ssm.chunk)
    assert sizes == (
        "mamba2", theirs.mamba_d_ssm, theirs.mamba_n_heads, theirs.mamba_d_head, theirs.mamba_n_groups,
        theirs.mamba_d_state, theirs.mamba_d_conv, theirs.mamba_chunk_size,
    )  # fmt: skip
    assert (ssm.dt_min, ssm.dt_max) == tuple(theirs.time_step_limit)
    assert (ssm.conv_bias, ssm.proj_bias, ssm.has_out_bias) == (
        theirs.mamba_conv_bias, theirs.mamba_proj_bias, theirs.projectors_bias
    )
    assert ssm.gated_norm == "none" and not theirs.mamba_rms_norm  # y * silu(z), no norm
    assert (ssm.in_scale, ssm.out_scale, list(ssm.projection_scales)) == (
        theirs.ssm_in_multiplier, theirs.ssm_out_multiplier, theirs.ssm_multipliers
    )
    assert (att.in_scale, att.out_scale, att.key_scale, att.qkv_bias) == (
        theirs.attention_in_multiplier, theirs.attention_out_multiplier, theirs.key_multiplier,
        theirs.attention_bias,
    )  # fmt: skip
    assert [mlp.gate_scale, mlp.down_scale] == theirs.mlp_multipliers and mlp.bias == theirs.mlp_bias
    assert emb.scale is None and emb.logits_scale == theirs.lm_head_multiplier == 1.0
    assert emb.tied == theirs.tie_word_embeddings
    assert ours.norms.eps == theirs.rms_norm_eps
    assert ours.layers[0].rope.theta == theirs.rope_parameters["rope_theta"]


def test_a_null_mamba_d_ssm_takes_expand_times_hidden() -> None:
    fields = dict(mamba_d_ssm=None, hidden_size=64, mamba_expand=3, mamba_n_heads=12)
    ours, theirs = _read(fields), AutoConfig.for_model("falcon_h1", **fields)
    assert (ours.ssm.inner, ours.ssm.head_dim) == (192, theirs.mamba_d_head) == (192, 16)


@pytest.mark.parametrize(
    ("rms", "before", "mode"), [(False, True, "none"), (True, True, "norm_then_gate"), (True, False, "gated")]
)
def test_the_gated_norm_follows_rms_norm_and_norm_before_gate(rms: bool, before: bool, mode: str) -> None:
    assert _read({"mamba_rms_norm": rms, "mamba_norm_before_gate": before}).ssm.gated_norm == mode


def test_every_layer_attends_and_carries_a_state() -> None:
    cfg = _read({"num_hidden_layers": 3})
    assert all(layer.mixers == ("attention", "mamba") for layer in cfg.layers)
    assert all(layer.attends and layer.recurrent for layer in cfg.layers)
    per_layer = cfg.ssm.state_elements + cfg.ssm.window_elements
    assert cfg.state_elements() == 3 * per_layer and cfg.state_elements(range(1, 2)) == per_layer


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mlp_multipliers": [1.0]}, r"mlp_multipliers: expected 2 numbers \(gate, down\), got 1"),
        ({"ssm_multipliers": [1.0] * 6}, r"ssm_multipliers: expected 5 numbers \(z, x, B, C, dt\), got 6"),
        ({"ssm_multipliers": [1.0, -1.0, 1, 1, 1]}, r"ssm_multipliers: expected"),
        ({"mlp_multipliers": "2"}, r"mlp_multipliers: expected"),
        ({"key_multiplier": 0}, r"key_multiplier: expected"),
        ({"lm_head_multiplier": True}, r"lm_head_multiplier: expected"),
        ({"mamba_d_ssm": 1000}, r"mamba_d_ssm \(1000\) must equal mamba_n_heads x mamba_d_head"),
        ({"mamba_d_ssm": 0}, r"mamba_d_ssm: expected"),
        ({"mamba_rms_norm": "yes"}, r"mamba_rms_norm: expected"),
        ({"projectors_bias": 1}, r"projectors_bias: expected"),
    ],
)
def test_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read(fields)
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)


def test_the_cli_refuses_a_bad_falcon_h1_config_with_exit_code_2(tmp_path: Path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "falcon_h1", "ssm_multipliers": [1.0, 2.0]}))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "ssm_multipliers: expected 5 numbers" in err and str(path) in err and "\n" not in err
