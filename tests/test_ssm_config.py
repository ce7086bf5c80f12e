"""The state-space families' config readers: transformers' class defaults for fields a config
leaves out, and hostile values refused in one line naming the file and field."""

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
    return read_model_config(RawConfig(fields, "config.json"), "m")


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba", "mamba2"])
def test_left_out_fields_are_transformers_class_defaults(model_type: str) -> None:
    theirs = AutoConfig.for_model(model_type)
    ours = _read({"model_type": model_type})
    ssm = ours.ssm
    assert (ours.vocab, ours.hidden, len(ours.layers)) == (
        theirs.vocab_size, theirs.hidden_size, theirs.num_hidden_layers
    )  # fmt: skip
    assert ssm.inner == int(theirs.expand * theirs.hidden_size)
    assert (ssm.state, ssm.conv_kernel, ssm.conv_bias, ssm.proj_bias) == (
        theirs.state_size, theirs.conv_kernel, theirs.use_conv_bias, theirs.use_bias
    )  # fmt: skip
    assert ours.embedding.tied == theirs.tie_word_embeddings
    assert ours.norms.eps == theirs.layer_norm_epsilon
    if model_type == "mamba2":
        assert (ssm.heads, ssm.head_dim, ssm.groups, ssm.chunk) == (
            theirs.num_heads, theirs.head_dim, theirs.n_groups, theirs.chunk_size
        )  # fmt: skip
        assert (ssm.dt_min, ssm.dt_max) == tuple(theirs.time_step_limit)
    else:
        assert ssm.dt_rank == theirs.time_step_rank == math.ceil(theirs.hidden_size / 16)
    assert ssm.bcdt_norm_eps == (theirs.mixer_rms_eps if model_type == "falcon_mamba" else None)


MAMBA2 = {"model_type": "mamba2", "hidden_size": 64, "num_heads": 8, "head_dim": 16, "n_groups": 2}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**MAMBA2, "head_dim": 8}, r"expand \(128\) must equal num_heads x head_dim \(8 x 8\)"),
        ({**MAMBA2, "n_groups": 3}, r"num_heads \(8\) must be a multiple of n_groups \(3\)"),
        ({**MAMBA2, "time_step_limit": [0.5, 0.1]}, r"time_step_limit: expected \[min, max\] with 0 <= min"),
        ({**MAMBA2, "time_step_limit": [0.0]}, r"time_step_limit: expected \[min, max\]"),
        ({**MAMBA2, "time_step_limit": ["a", 1]}, r"time_step_limit: expected \[min, max\]"),
        ({**MAMBA2, "time_step_limit": 3}, r"time_step_limit: expected a list, got 3"),
        ({**MAMBA2, "state_size": 0}, r"state_size: expected an integer from 1"),
        ({**MAMBA2, "conv_kernel": 1.5}, r"conv_kernel: expected an integer from 1"),
        ({**MAMBA2, "expand": -2}, r"expand: expected a number > 0"),
        ({"model_type": "mamba", "time_step_rank": "x"}, r"time_step_rank: expected an integer .* \"auto\""),
        ({"model_type": "falcon_mamba", "mixer_rms_eps": 2.0}, r"mixer_rms_eps: expected a number > 0"),
        ({"model_type": "mamba", "use_conv_bias": "yes"}, r"use_conv_bias: expected true or false"),
    ],
)
def test_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read(fields)
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)


def test_transformers_encoded_infinity_is_read() -> None:
    """transformers 5 writes time_step_limit's Infinity as {"__float__": "Infinity"}."""
    cfg = _read({**MAMBA2, "time_step_limit": [0.001, {"__float__": "Infinity"}]})
    assert (cfg.ssm.dt_min, cfg.ssm.dt_max) == (0.001, math.inf)
    with pytest.raises(FrontendError, match="time_step_limit"):
        _read({**MAMBA2, "time_step_limit": [0.0, {"__float__": "NaN"}]})


def test_a_bad_mamba_config_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "mamba2", "hidden_size": 64, "num_heads": 8, "head_dim": 16, '
                   '"n_groups": 2, "time_step_limit": [1, 0]}')  # fmt: skip
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and "time_step_limit" in err and err.count("\n") == 1
