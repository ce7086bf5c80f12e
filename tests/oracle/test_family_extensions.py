"""What issue 17 added, beyond the per-family oracle runs of test_families.py: RoPE frequencies and
cos/sin tables of yarn, dynamic NTK and longrope equal transformers' (inv_freq, attention factor,
the rotary embedding's own forward with its length-dependent updates), old and new config spellings
agree, the new families split over chips exactly, and transformers' eager ALiBi Falcon differs from
its SDPA path (which is why test_families checks that family against SDPA).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import ir
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.config import RawConfig, Rope, read_rope
from tcp_compiler.frontend.precision import PRECISIONS
from tests.oracle.test_sharding import _assert_same_generation, _generate, _load
from tests.oracle.tiny_models import ISSUE_28, build

HEAD, MAX_POSITIONS = 16, 64
LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "original_max_position_embeddings": 32,
    "short_factor": [1.0 + 0.25 * i for i in range(HEAD // 2)],
    "long_factor": [2.0 + 0.5 * i for i in range(HEAD // 2)],
}
YARN = {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "original_max_position_embeddings": 32}
# (rope parameters, sequence lengths the graph is built for)
CASES = {
    "yarn": (YARN, [1]),
    "yarn_ramp": ({**YARN, "beta_fast": 8.0, "beta_slow": 2.0}, [1]),
    "yarn_untruncated": ({**YARN, "beta_fast": 8.0, "truncate": False}, [1]),
    "yarn_attention_factor": ({**YARN, "attention_factor": 0.7}, [1]),
    "yarn_mscale": ({**YARN, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707}, [1]),
    "yarn_original_beyond_max": ({**YARN, "original_max_position_embeddings": 4 * MAX_POSITIONS}, [1]),
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, [5, 64, 65, 300]),
    "longrope": (LONGROPE, [5, 32, 33, 300]),
    "longrope_factor": ({**LONGROPE, "factor": 8.0}, [33]),
    "longrope_attention_factor": ({**LONGROPE, "attention_factor": 1.3}, [5, 33]),
}


def _hf_config(params: dict) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        head_dim=HEAD,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters=dict(params),
    )


def _ours(params: dict) -> Rope:
    raw = RawConfig(
        {"model_type": "llama", "max_position_embeddings": MAX_POSITIONS, "rope_parameters": dict(params)},
        "config.json",
    )
    return read_rope(raw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_inv_freq_and_attention_factor_match_transformers(case: str) -> None:
    params, lengths = CASES[case]
    rope = _ours(params)
    for length in lengths:
        # The length as transformers' forward passes it (a tensor, so dynamic's base is float32); at
        # or below max_position_embeddings its dynamic update keeps the frequencies of __init__.
        grown = params["rope_type"] != "dynamic" or length > MAX_POSITIONS
        seq = torch.tensor(length) if grown else None
        inv, attention = ROPE_INIT_FUNCTIONS[params["rope_type"]](_hf_config(params), "cpu", seq_len=seq)
        np.testing.assert_allclose(rope.inv_freq(HEAD, length), inv.numpy(), rtol=2e-7, atol=0, err_msg=case)
        assert rope.attention_factor == pytest.approx(float(attention), rel=1e-12), case


@pytest.mark.parametrize("case", ["yarn_ramp", "yarn_attention_factor", "dynamic", "longrope"])
def test_rope_table_matches_the_rotary_embeddings_forward(case: str) -> None:
    """cos and sin (attention factor included) as LlamaRotaryEmbedding returns them, including its
    updates when a forward's length passes max_position_embeddings (dynamic) or the original
    context (longrope). Angles reach ~300 rad, where one float32 ulp of a frequency moves cos and
    sin by a few 1e-6."""
    params, lengths = CASES[case]
    rope = _ours(params)
    for length in lengths:
        embedding = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(_hf_config(params))
        positions = torch.arange(length)[None]
        cos, sin = embedding(torch.zeros(1, dtype=torch.float32), positions)
        table = rope.table(HEAD, length)
        half = HEAD // 2
        np.testing.assert_allclose(table[..., 0, 0], cos[0, :, :half].numpy(), atol=1e-5, err_msg=case)
        np.testing.assert_allclose(table[..., 0, 1], sin[0, :, :half].numpy(), atol=1e-5, err_msg=case)
        np.testing.assert_array_equal(table[..., 1, 0], -table[..., 0, 1])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({k: v for k, v in YARN.items() if k != "factor"}, "missing field 'rope_parameters.factor'"),
        ({**YARN, "original_max_position_embeddings": 0}, "original_max_position_embeddings: expected an"),
        ({**YARN, "original_max_position_embeddings": -8}, "original_max_position_embeddings: expected an"),
    ],
)
def test_yarn_refuses_what_transformers_cannot_use(params: dict, message: str) -> None:
    """Yarn without its factor (transformers raises KeyError) or with a context of no positions
    (transformers divides by it); one line naming the file and the field."""
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        _ours(params)
    assert "\n" not in str(e.value) and str(e.value).startswith("config.json: ")


def test_yarn_without_factor_is_refused_by_transformers_too() -> None:
    with pytest.raises(KeyError, match="factor"):
        _hf_config({k: v for k, v in YARN.items() if k != "factor"})


def test_rope_scaling_and_rope_parameters_spellings_agree() -> None:
    new = {"max_position_embeddings": 4096, "rope_parameters": {**YARN, "beta_fast": 16.0}}
    old = {
        "max_position_embeddings": 4096,
        "rope_theta": YARN["rope_theta"],
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 32,
            "beta_fast": 16,
        },
    }
    assert read_rope(RawConfig(new, "new.json")) == read_rope(RawConfig(old, "old.json"))


def test_phi3_top_level_original_context_wins() -> None:
    """Phi-3 keeps original_max_position_embeddings at the top level; transformers' standardisation
    copies it over the RoPE parameters' own."""
    data = {"max_position_embeddings": 128, "original_max_position_embeddings": 16, "rope_scaling": LONGROPE}
    rope = read_rope(RawConfig(data, "config.json"))
    assert rope.original_max_positions == 16
    assert rope.inv_freq(HEAD, 17)[-1] == pytest.approx(rope.inv_freq(HEAD, 300)[-1])
    assert rope.inv_freq(HEAD, 16)[-1] != pytest.approx(rope.inv_freq(HEAD, 17)[-1])


SHARDED = [
    "gemma2", "phi3", "phi3_partial", "olmo2", "starcoder2", "granite", "smollm3", "falcon_alibi", "gpt_oss",
    "qwen2_moe", "deepseek_v3", "deepseek_v3_q_proj", *ISSUE_28,
]  # fmt: skip


@pytest.mark.parametrize("chips", [2, 4])
@pytest.mark.parametrize("family", SHARDED)
def test_sharded_generation_matches_one_chip(family: str, chips: int, tmp_path) -> None:
    model = _load(family, tmp_path)
    one = _generate(model, 1)
    _assert_same_generation(_generate(model, chips), one, f"{family} on {chips} chips")
    assert np.abs(one.prefill_logits).max() > 0.05


def test_olmo2_norms_q_and_k_over_the_heads_of_every_chip(tmp_path) -> None:
    """Each chip holds some heads, so the norm's sum of squares joins over the chips (in f32)."""
    cfg = _load("olmo2", tmp_path).config
    graph = build_decode(cfg, PRECISIONS["bf16"], 1, 4, chips=2).graph
    for i in range(len(cfg.layers)):
        for name in (f"l{i}.q_norm.sum.all", f"l{i}.k_norm.sum.all"):
            node = graph[name]
            assert node.kind == "all_reduce" and node.type.dtype == ir.F32
            assert node.type.names == ("B", "S")


def test_falcon_alibi_eager_adds_the_bias_twice() -> None:
    """transformers' eager Falcon adds ALiBi in the scores and again in the mask; SDPA adds it once.
    Should a transformers release fix eager, this fails: test_families may then check against it."""
    model = build("falcon_alibi")
    ids = torch.tensor([[5, 17, 3, 88, 42, 9]])
    with torch.no_grad():
        sdpa = model(ids).logits
        model.config._attn_implementation = "eager"
        eager = model(ids).logits
    assert (sdpa - eager).abs().max() > 1e-2


def test_gpt_oss_sinks_and_clamps_move_the_tiny_models_logits() -> None:
    """The tiny gpt-oss is sensitive to what its oracle test checks: without sinks (-1e9), or with
    a swiglu_limit too large to clamp anything, transformers' own logits move by > 1e-2."""
    ids = torch.tensor([[5, 17, 3, 88, 42, 9]])
    model = build("gpt_oss")
    with torch.no_grad():
        base = model(ids).logits
        unclamped = build("gpt_oss", swiglu_limit=1e3)(ids).logits
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-1e9)
        sinkless = model(ids).logits
    assert (unclamped - base).abs().max() > 1e-2
    assert (sinkless - base).abs().max() > 1e-2


def test_gpt_oss_experts_are_cut_from_the_stacked_interleaved_tensors(tmp_path) -> None:
    """Expert e's gate is column 2j of gate_up_proj[e] ([E, D, 2F]), its up column 2j + 1, as
    GptOssExperts._apply_gate splits them; down_proj[e] is [F, D]; each read as [out, in]."""
    loaded = _load("gpt_oss", tmp_path)
    cfg, get = loaded.config, loaded.checkpoint.load
    experts = build("gpt_oss", vocab_size=cfg.vocab).model.layers[1].mlp.experts
    expected = {
        "gate_proj.weight": experts.gate_up_proj[2, :, ::2].T,
        "up_proj.weight": experts.gate_up_proj[2, :, 1::2].T,
        "down_proj.weight": experts.down_proj[2].T,
        "gate_proj.bias": experts.gate_up_proj_bias[2, ::2],
        "up_proj.bias": experts.gate_up_proj_bias[2, 1::2],
        "down_proj.bias": experts.down_proj_bias[2],
    }
    for name, want in expected.items():
        source = cfg.tensors.source(f"model.layers.1.mlp.experts.2.{name}")
        np.testing.assert_array_equal(source.load(get), want.detach().numpy(), err_msg=name)
    assert cfg.tensors.source("model.layers.1.mlp.experts.2.up_proj.weight").stored((48, 32)) == (4, 32, 96)
