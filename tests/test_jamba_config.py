"""Jamba's config reader: transformers' JambaConfig class defaults for the fields a config leaves
out (mamba_dt_rank "auto" included), which layers attend and which route to experts exactly as
JambaConfig's own layers_block_type / layers_num_experts say, and hostile values refused in one
line naming the file and field."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoConfig  # noqa: E402

from tcp_compiler.errors import FrontendError  # noqa: E402
from tcp_compiler.frontend.config import RawConfig  # noqa: E402
from tcp_compiler.frontend.families import read_model_config  # noqa: E402


def _read(fields: dict):
    return read_model_config(RawConfig({"model_type": "jamba", **fields}, "config.json"), "m")


def test_left_out_fields_are_transformers_class_defaults() -> None:
    theirs = AutoConfig.for_model("jamba")
    ours = _read({})
    ssm, moe = ours.ssm, ours.moe
    assert (ours.vocab, ours.hidden, ours.intermediate, ours.heads, ours.kv_heads, ours.norms.eps) == (
        theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_attention_heads,
        theirs.num_key_value_heads, theirs.rms_norm_eps,
    )  # fmt: skip
    assert (ssm.kind, ssm.inner, ssm.state, ssm.conv_kernel, ssm.dt_rank) == (
        "mamba", theirs.mamba_expand * theirs.hidden_size, theirs.mamba_d_state, theirs.mamba_d_conv,
        theirs.mamba_dt_rank,
    )  # fmt: skip
    assert ssm.dt_rank == math.ceil(4096 / 16)  # "auto"
    assert (ssm.conv_bias, ssm.proj_bias, ssm.bcdt_norm_eps, ssm.bcdt_norm_weights) == (
        theirs.mamba_conv_bias, theirs.mamba_proj_bias, theirs.rms_norm_eps, True
    )  # fmt: skip
    assert (moe.experts, moe.top_k, moe.intermediate, moe.normalize_top_k, moe.softmax_after_top_k) == (
        theirs.num_experts, theirs.num_experts_per_tok, theirs.intermediate_size, False, False
    )  # fmt: skip
    assert ours.positions.kind == "none" and all(layer.rope is None for layer in ours.layers)
    assert ours.embedding.tied == theirs.tie_word_embeddings


@pytest.mark.parametrize(
    ("layers", "attn", "experts"),
    [
        (32, (8, 4), (2, 1)),
        (7, (3, 0), (2, 0)),
        (6, (2, 1), (3, 2)),
        (5, (1, 0), (1, 0)),
        (4, (5, 4), (4, 3)),
    ],  # fmt: skip
)
def test_attention_and_expert_layers_are_transformers(layers: int, attn: tuple, experts: tuple) -> None:
    fields = dict(num_hidden_layers=layers, attn_layer_period=attn[0], attn_layer_offset=attn[1],
                  expert_layer_period=experts[0], expert_layer_offset=experts[1])  # fmt: skip
    theirs = AutoConfig.for_model("jamba", **fields)
    ours = _read(fields)
    assert [layer.mixer for layer in ours.layers] == theirs.layers_block_type
    assert [layer.moe for layer in ours.layers] == [n > 1 for n in theirs.layers_num_experts]


def test_dt_rank_given() -> None:
    assert _read({"mamba_dt_rank": 7}).ssm.dt_rank == 7


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"attn_layer_offset": 8}, r"attn_layer_offset \(8\) must be smaller than attn_layer_period \(8\)"),
        ({"expert_layer_period": 1}, r"expert_layer_offset \(1\) must be smaller than expert_layer_period"),
        ({"attn_layer_period": 0}, r"attn_layer_period: expected an integer from 1"),
        ({"expert_layer_offset": -1}, r"expert_layer_offset: expected an integer from 0"),
        ({"attn_layer_offset": 1.5}, r"attn_layer_offset: expected an integer"),
        ({"mamba_dt_rank": "big"}, r"mamba_dt_rank: expected an integer .* \"auto\""),
        ({"mamba_dt_rank": 0}, r"mamba_dt_rank: expected an integer from 1"),
        ({"num_experts": 0}, r"num_experts: expected an integer from 1"),
        ({"num_experts": 4, "num_experts_per_tok": 5}, r"num_experts_per_tok \(5\) exceeds num_experts"),
        ({"mamba_proj_bias": "no"}, r"mamba_proj_bias: expected true or false"),
    ],
)
def test_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read(fields)
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)


def test_a_bad_jamba_config_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "jamba", "attn_layer_period": 4, "attn_layer_offset": 4}')
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and "attn_layer_offset" in err and err.count("\n") == 1
