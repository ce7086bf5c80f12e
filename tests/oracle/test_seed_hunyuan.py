"""Seed-OSS and HunYuan (dense and MoE) beyond the shared oracle tests (test_families.py runs their
tiny models for logits, decode, FLOPs; test_sharding.py on 2 and 4 chips; test_round3_families.py
counts their parameters): each special part switched off moves the logits past the oracle's 1e-4,
HunYuan's alpha RoPE has transformers' frequencies, the defaults are transformers' classes', and a
bad HunYuan config is refused with one line naming the field."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import transformers

from tcp_compiler.frontend.config import Attention, Mlp, RawConfig, Rope
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
from tests.oracle.tiny_models import build, save

off = dataclasses.replace


@pytest.fixture(scope="module", params=["seed_oss", "hunyuan_v1_dense", "hunyuan_v1_moe"])
def tiny(request, tmp_path_factory):
    model = build(request.param)
    return request.param, model, load_model(save(model, tmp_path_factory.mktemp(request.param)))


def _switched_off(cfg, part: str):
    """The config with `part` off (or, for the norm's order, moved before RoPE)."""
    changes = {
        "q/k/v biases": lambda: off(cfg, attention=off(cfg.attention, qkv_bias=False)),
        "MLP biases": lambda: off(cfg, mlp=Mlp(cfg.mlp.activation)),
        "q/k norm after RoPE (moved before it)": lambda: off(
            cfg, attention=off(cfg.attention, qk_norm="per_head")
        ),
        "shared MLP": lambda: off(cfg, moe=off(cfg.moe, shared=None)),
    }
    return changes[part]()


PARTS = {
    "seed_oss": ["q/k/v biases", "MLP biases"],
    "hunyuan_v1_dense": ["q/k norm after RoPE (moved before it)"],
    "hunyuan_v1_moe": ["q/k norm after RoPE (moved before it)", "shared MLP", "q/k/v biases"],
}


def _max_gap(model, cfg, loaded) -> float:
    result = generate(cfg, loaded.checkpoint.load, [PROMPT], PRECISIONS["f32"], STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs = reference_logits(model, PROMPT, result.token_matrix[0].tolist()[:STEPS])
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))


def test_each_special_part_bites(tiny) -> None:
    """Switched off, each part moves the logits past 1e-3 (the oracle's 1e-4 passing with it on is
    then no accident)."""
    name, model, loaded = tiny
    for part in PARTS[name]:
        assert _max_gap(model, _switched_off(loaded.config, part), loaded) > 1e-3, (name, part)


def test_hunyuan_alpha_rope_bites_and_has_transformers_frequencies(tmp_path) -> None:
    """The tiny model's "dynamic" RoPE with alpha 10 is transformers' fixed ntk_alpha base
    (rope_type renamed there, so no length-dependent recomputation): the same inverse frequencies,
    and a plain theta moves the logits."""
    model = build("hunyuan_v1_dense")
    loaded = load_model(save(model, tmp_path))
    assert model.model.rotary_emb.rope_type == "ntk_alpha"
    rope = loaded.config.layers[0].rope
    assert rope.kind == "default" and rope.theta == 100.0 * 10.0 ** (16 / 14)
    np.testing.assert_array_equal(rope.inv_freq(16, 40), model.model.rotary_emb.inv_freq.numpy())
    plain = tuple(off(layer, rope=Rope(100.0)) for layer in loaded.config.layers)
    assert _max_gap(model, off(loaded.config, layers=plain), loaded) > 1e-3


def test_hunyuan_dynamic_without_alpha_is_dynamic_ntk() -> None:
    """Without an alpha, "dynamic" is transformers' length-dependent NTK scaling, as for Llama."""
    fields = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, head_dim=8, max_position_embeddings=16,
                  rope_scaling={"type": "dynamic", "factor": 2.0})  # fmt: skip
    cfg = read_model_config(RawConfig({"model_type": "hunyuan_v1_dense", **fields}, "config.json"), "m")
    assert cfg.layers[0].rope == Rope(10000.0, "dynamic", 2.0, max_positions=16)


@pytest.mark.parametrize(
    ("model_type", "config_class"),
    [("seed_oss", "SeedOssConfig"), ("hunyuan_v1_dense", "HunYuanDenseV1Config"),
     ("hunyuan_v1_moe", "HunYuanMoEV1Config")],
)  # fmt: skip
def test_fields_left_out_take_the_transformers_class_defaults(model_type: str, config_class: str) -> None:
    """A config naming only its model type: sizes, KV heads (HunYuan copies the query heads,
    Seed-OSS uses 8), head_dim (Seed-OSS 128; HunYuan hidden / heads, which transformers 5.23 cannot
    build: its attention reads the class's None) and biases as transformers' class sets them."""
    theirs = getattr(transformers, config_class)()
    cfg = read_model_config(RawConfig({"model_type": model_type}, "config.json"), "m")
    assert (cfg.vocab, cfg.hidden, cfg.intermediate, len(cfg.layers)) == (
        theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_hidden_layers
    )  # fmt: skip
    assert (cfg.heads, cfg.kv_heads) == (theirs.num_attention_heads, theirs.num_key_value_heads)
    assert cfg.head_dim == (theirs.head_dim or theirs.hidden_size // theirs.num_attention_heads)
    assert cfg.norms.eps == theirs.rms_norm_eps and cfg.max_positions == theirs.max_position_embeddings
    if model_type == "seed_oss":
        assert cfg.attention == Attention(qkv_bias=True, out_bias=False) and not cfg.mlp.bias
    else:
        assert cfg.attention == Attention(qk_norm="rotated")
    if model_type == "hunyuan_v1_moe":
        assert (cfg.moe.experts, cfg.moe.top_k) == (theirs.num_experts, theirs.moe_topk) == (1, 1)


A13B = json.loads((BUNDLED / "hunyuan-a13b-instruct.json").read_text())


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"moe_topk": [8] * 31}, "moe_topk has 31 entries but num_hidden_layers is 32"),
        ({"moe_topk": [8] * 31 + [4]}, "moe_topk: per-layer counts that differ ([4, 8]) are not supported"),
        ({"moe_topk": [8] * 31 + ["8"]}, "moe_topk[31]: expected an integer >= 1, got '8'"),
        ({"moe_topk": [8] * 31 + [0]}, "moe_topk[31]: expected an integer >= 1, got 0"),
        ({"moe_topk": 0}, "moe_topk: expected an integer >= 1, got 0"),
        ({"moe_topk": "8"}, 'moe_topk: expected int or list, got "8"'),
        ({"moe_topk": 65}, "moe_topk (65) exceeds num_experts (64)"),
        ({"rope_scaling": {"type": "dynamic", "alpha": "big"}}, "rope_scaling.alpha: expected int or float"),
        ({"rope_scaling": {"type": "dynamic", "alpha": -2.0}}, "rope_scaling.alpha: expected a number > 0"),
    ],
)  # fmt: skip
def test_bad_hunyuan_config_is_one_line_exit_2(change: dict, expected: str, tmp_path, capsys) -> None:
    from tcp_compiler.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**A13B, **change}))
    assert main(["compile", str(path), "--seq", "4", "-o", str(tmp_path / "out.tir")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "config.json" in err and expected in err, err
