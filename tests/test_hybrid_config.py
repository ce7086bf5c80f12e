"""The attention / Mamba hybrid families' config readers: transformers' class defaults for fields a
config leaves out, which layers attend, and hostile values refused in one line naming the file and
field."""

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


def _mixers(cfg) -> list[str]:
    return [layer.mixer for layer in cfg.layers]


def test_bamba_left_out_fields_are_transformers_class_defaults() -> None:
    theirs = AutoConfig.for_model("bamba", attn_layer_indices=[3, 7])
    ours = _read({"model_type": "bamba", "attn_layer_indices": [3, 7]})
    ssm = ours.ssm
    assert _mixers(ours) == ["attention" if t == "full_attention" else "mamba" for t in theirs.layer_types]
    assert (ours.vocab, ours.hidden, ours.intermediate, ours.heads, ours.kv_heads) == (
        theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_attention_heads,
        theirs.num_key_value_heads,
    )  # fmt: skip
    sizes = (ssm.kind, ssm.inner, ssm.heads, ssm.head_dim, ssm.groups, ssm.state, ssm.conv_kernel, ssm.chunk)
    assert sizes == (
        "mamba2", theirs.mamba_expand * theirs.hidden_size, theirs.mamba_n_heads, theirs.mamba_d_head,
        theirs.mamba_n_groups, theirs.mamba_d_state, theirs.mamba_d_conv, theirs.mamba_chunk_size,
    )  # fmt: skip
    assert (ssm.conv_bias, ssm.proj_bias, ssm.norm_eps) == (
        theirs.mamba_conv_bias, theirs.mamba_proj_bias, theirs.rms_norm_eps
    )  # fmt: skip
    assert (ssm.dt_min, ssm.dt_max) == tuple(theirs.time_step_limit) == (0.0, math.inf)
    assert ours.rotary == int(ours.head_dim * theirs.rope_parameters["partial_rotary_factor"])
    assert all(layer.ffn == "standard" for layer in ours.layers)  # an MLP after every mixer
    assert ours.embedding.tied == theirs.tie_word_embeddings


def test_bamba_rope_fraction() -> None:
    """transformers forces 0.5 over a top-level partial_rotary_factor; rope_parameters' own wins."""
    assert _read({"model_type": "bamba", "partial_rotary_factor": 1.0}).rotary == 64
    full = {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 1.0}
    assert _read({"model_type": "bamba", "rope_parameters": full}).rotary == 128


BAMBA = {"model_type": "bamba", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
         "mamba_n_heads": 8, "mamba_n_groups": 2}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**BAMBA, "attn_layer_indices": [4]}, r"indices\[0\]: expected a layer index from 0 to 3"),
        ({**BAMBA, "attn_layer_indices": [True]}, r"attn_layer_indices\[0\]: expected a layer index"),
        ({**BAMBA, "attn_layer_indices": 2}, r"attn_layer_indices: expected a list, got 2"),
        ({**BAMBA, "mamba_d_head": 8},
         r"x mamba_expand \(128\) must equal mamba_n_heads x mamba_d_head \(8 x 8\)"),
        ({**BAMBA, "mamba_d_head": "big"}, r"mamba_d_head: expected an integer .* \"auto\""),
        ({**BAMBA, "mamba_n_groups": 3}, r"mamba_n_heads \(8\) must be a multiple of mamba_n_groups \(3\)"),
        ({**BAMBA, "mamba_d_state": 0}, r"mamba_d_state: expected an integer from 1"),
        ({**BAMBA, "mamba_expand": -1}, r"mamba_expand: expected a number > 0"),
        ({**BAMBA, "mamba_conv_bias": "yes"}, r"mamba_conv_bias: expected true or false"),
    ],
)
def test_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read(fields)
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)


def test_nemotron_h_left_out_fields_are_transformers_class_defaults() -> None:
    pattern = "M-*-M"
    theirs = AutoConfig.for_model("nemotron_h", hybrid_override_pattern=pattern)
    ours = _read({"model_type": "nemotron_h", "hybrid_override_pattern": pattern})
    ssm = ours.ssm
    blocks = {"linear_attention": ("mamba", "standard", "skip"),
              "full_attention": ("attention", "standard", "skip"),
              "mlp": ("attention", "skip", "standard")}  # fmt: skip
    parts = [(x.mixer, x.attention, x.ffn) for x in ours.layers]
    assert parts == [blocks[t] for t in theirs.layers_block_type]
    assert (ours.vocab, ours.hidden, ours.intermediate, ours.heads, ours.kv_heads, ours.head_dim) == (
        theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_attention_heads,
        theirs.num_key_value_heads, theirs.head_dim,
    )  # fmt: skip
    sizes = (ssm.inner, ssm.heads, ssm.head_dim, ssm.groups, ssm.state, ssm.conv_kernel, ssm.chunk)
    assert sizes == (
        theirs.mamba_num_heads * theirs.mamba_head_dim, theirs.mamba_num_heads, theirs.mamba_head_dim,
        theirs.n_groups, theirs.ssm_state_size, theirs.conv_kernel, theirs.chunk_size,
    )  # fmt: skip
    assert (ssm.dt_min, ssm.dt_max) == (theirs.time_step_min, math.inf)  # not time_step_limit
    assert (ssm.conv_bias, ssm.proj_bias, ssm.norm_eps) == (
        theirs.use_conv_bias, theirs.use_bias, theirs.layer_norm_epsilon
    )  # fmt: skip
    assert (ours.mlp.activation, ours.mlp.kind, ours.positions.kind) == ("relu2", "plain", "none")
    assert ours.embedding.tied == theirs.tie_word_embeddings


def test_nemotron_h_moe_left_out_fields_are_transformers_class_defaults() -> None:
    """The class default pattern has a MoE block (ME*-): its experts, routing and shared expert."""
    theirs = AutoConfig.for_model("nemotron_h")
    ours = _read({"model_type": "nemotron_h"})
    moe = ours.moe
    assert [x.moe for x in ours.layers] == [t == "moe" for t in theirs.layers_block_type] == [0, 1, 0, 0]
    assert (moe.experts, moe.top_k, moe.intermediate, moe.shared.intermediate, moe.latent) == (
        theirs.n_routed_experts, theirs.num_experts_per_tok, theirs.moe_intermediate_size,
        theirs.moe_shared_expert_intermediate_size, theirs.moe_latent_size,
    )  # fmt: skip
    assert (moe.groups, moe.topk_groups, moe.normalize_top_k, moe.routed_scale) == (
        theirs.n_group, theirs.topk_group, theirs.norm_topk_prob, theirs.routed_scaling_factor
    )  # fmt: skip
    assert (moe.scoring, moe.gated, moe.correction_bias_name is not None) == ("sigmoid", False, True)
    assert _read({**NEMOTRON}).moe is None  # no MoE block, no experts


def test_nemotron_h_reads_the_older_spellings_and_block_lists() -> None:
    """mamba_n_groups, mamba_chunk_size ... as transformers takes them; layers_block_type over the
    pattern."""
    cfg = _read({"model_type": "nemotron_h", "hybrid_override_pattern": "M", "mamba_n_groups": 4,
                 "mamba_chunk_size": 64, "mamba_dt_min": 0.01})  # fmt: skip
    assert (cfg.ssm.groups, cfg.ssm.chunk, cfg.ssm.dt_min) == (4, 64, 0.01)
    listed = _read({"model_type": "nemotron_h", "layers_block_type": ["mlp", "full_attention"]})
    assert [(x.attention, x.ffn) for x in listed.layers] == [("skip", "standard"), ("standard", "skip")]


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"model_type": "nemotron_h", "layers_block_type": ["mamba", "attention", "mlp", "moe"]},
         "layers_block_type"),
        ({"model_type": "granitemoehybrid", "num_hidden_layers": 3,
          "layer_types": ["mamba", "attention", "mamba"]}, "layer_types"),
        ({"model_type": "qwen3_next", "num_hidden_layers": 2,
          "layer_types": ["linear_attention", "attention"]}, "layer_types"),
    ],
)  # fmt: skip
def test_older_layer_type_names_are_read_as_transformers_reads_them(fields: dict, key: str) -> None:
    """transformers 5 reads "mamba" as "linear_attention" and "attention" as "full_attention" in any
    config's layer list (published Nemotron 3 and Granite 4 configs use the older names)."""
    theirs = AutoConfig.for_model(**fields)
    assert "mamba" not in theirs.layer_types and "attention" not in theirs.layer_types
    legacy, current = _read(fields), _read({**fields, key: list(theirs.layer_types)})
    assert legacy.layers == current.layers


NEMOTRON = {"model_type": "nemotron_h", "hybrid_override_pattern": "M*-"}
MOE = {**NEMOTRON, "hybrid_override_pattern": "M*E"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**NEMOTRON, "hybrid_override_pattern": "M*X"}, r"pattern: expected letters M, \*, - or E"),
        ({**NEMOTRON, "hybrid_override_pattern": ""}, r"hybrid_override_pattern: expected letters"),
        ({**MOE, "mlp_bias": True}, r"mlp_bias: expected false with MoE"),
        ({**MOE, "n_group": 3}, r"n_group \(3\) must split n_routed_experts \(8\) into groups of 2"),
        ({**MOE, "n_group": 4, "topk_group": 5}, r"topk_group \(5\) exceeds n_group \(4\)"),
        ({**MOE, "num_experts_per_tok": 9}, r"num_experts_per_tok \(9\) exceeds the 8 experts"),
        ({**MOE, "moe_latent_size": 0}, r"moe_latent_size: expected"),
        ({**MOE, "moe_shared_expert_intermediate_size": -1}, r"moe_shared_expert_intermediate_size: expect"),
        ({**NEMOTRON, "layers_block_type": ["mlp", "conv"]}, r"layers_block_type\[1\]: expected one of"),
        ({**NEMOTRON, "mamba_hidden_act": "relu2"}, r"mamba_hidden_act: relu2 is an MLP activation"),
        ({**NEMOTRON, "mlp_hidden_act": "tanh"}, r"'mlp_hidden_act' = 'tanh' is not supported"),
        ({**NEMOTRON, "mamba_num_heads": 12}, r"mamba_num_heads \(12\) must be a multiple of n_groups \(8\)"),
    ],
)
def test_nemotron_h_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read(fields)
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)


def test_granitemoehybrid_left_out_fields_are_transformers_class_defaults() -> None:
    types = ["mamba", "attention"]
    theirs = AutoConfig.for_model("granitemoehybrid", num_hidden_layers=2, layer_types=types)
    ours = _read({"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": types})
    moe, ssm = ours.moe, ours.ssm
    assert [x.mixer for x in ours.layers] == types and all(x.moe and x.ffn == "standard" for x in ours.layers)
    assert (moe.experts, moe.top_k, moe.intermediate, moe.shared.intermediate, moe.softmax_after_top_k) == (
        theirs.num_local_experts, theirs.num_experts_per_tok, theirs.intermediate_size,
        theirs.shared_intermediate_size, True,
    )  # fmt: skip
    assert (ssm.heads, ssm.head_dim, ssm.groups, ssm.state, ssm.chunk) == (
        theirs.mamba_n_heads, theirs.mamba_d_head, theirs.mamba_n_groups, theirs.mamba_d_state,
        theirs.mamba_chunk_size,
    )  # fmt: skip
    assert ours.positions.kind == "none" and theirs.position_embedding_type is None  # RoPE only on "rope"
    assert (ours.heads, ours.kv_heads, ours.norms.eps) == (
        theirs.num_attention_heads, theirs.num_key_value_heads, theirs.rms_norm_eps
    )  # fmt: skip
    assert ours.attention.scale == theirs.attention_multiplier and ours.residual.branch_scale == 1.0


def test_granitemoehybrid_without_experts_runs_the_shared_mlp_as_its_mlp() -> None:
    cfg = _read({"model_type": "granitemoehybrid", "num_hidden_layers": 1, "num_local_experts": 0,
                 "shared_intermediate_size": 96})  # fmt: skip
    assert cfg.moe is None and cfg.intermediate == 96 and not cfg.layers[0].moe


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"layer_types": ["mamba"]}, r"layer_types has 1 entries but num_hidden_layers is 2"),
        ({"layer_types": ["mamba", "conv"]}, r"layer_types\[1\]: expected one of mamba"),
        ({"num_experts_per_tok": 9}, r"num_experts_per_tok \(9\) exceeds num_local_experts \(8\)"),
    ],
)
def test_granitemoehybrid_hostile_values_are_refused_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=message) as raised:
        _read({"model_type": "granitemoehybrid", "num_hidden_layers": 2, **fields})
    assert str(raised.value).startswith("config.json: ") and "\n" not in str(raised.value)
