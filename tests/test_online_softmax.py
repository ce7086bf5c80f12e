"""Online-softmax attention equals the plain form, and the mapper picks it when scores would spill."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.attention import choose_attention
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes.online_softmax import find_attention, online_softmax

TINY = {
    "model_type": "gemma3_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
}  # fmt: skip


def _params(built, rng) -> dict:
    params = {
        p.name: (0.3 * rng.standard_normal(p.type.shape)).astype(np.float32)
        for p in built.graph.of_kind("param")
    }
    params.update({n: b.make(None, 0) for n, b in built.bindings.items() if not b.sources})  # RoPE tables
    return params


def _compare(built, feeds: dict, block: int, rng, rows: tuple[str, int] | None = None) -> float:
    params = _params(built, rng)
    plain = ir.interpret(built.graph, feeds, params)
    online = online_softmax(built.graph, block, rows=rows)
    assert len(find_attention(built.graph)) == len(built.config.layers) and not find_attention(online)
    blocked = ir.interpret(online, feeds, params)
    for name in plain:
        assert not np.isnan(blocked[name]).any()
        np.testing.assert_allclose(blocked[name], plain[name], atol=1e-5, rtol=0, err_msg=name)
    return max(float(np.abs(blocked[k] - plain[k]).max()) for k in plain)


@pytest.mark.parametrize("block", [2, 4, 8, 5])  # 5: three blocks of 5 keys and a last one of 1
@pytest.mark.parametrize("rows", [None, 4, 6])  # query tiles too; 6: two of 6 rows and one of 4
def test_prefill_with_padding_and_sliding_windows(block: int, rows: int | None) -> None:
    rng = np.random.default_rng(block)
    cfg = read_model_config(RawConfig(TINY, "tiny.json"), "tiny")
    built = build_prefill(cfg, PRECISIONS["f32"], 2, 16, padded=True)
    feeds = {"ids": rng.integers(0, 64, (2, 16)), "lengths": np.array([16, 5])}
    _compare(built, feeds, block, rng, rows and ("Sq", rows))


@pytest.mark.parametrize("config", ["plain", "attention sinks"])
def test_decode_with_fully_masked_blocks(config: str) -> None:
    """Sequence 1 sits at position 3 of a 16-slot cache: blocks 1-3 hold no visible key (with
    gpt-oss's sinks, the sink's share of the softmax must survive the empty blocks)."""
    rng = np.random.default_rng(7)
    raw = {"plain": TINY, "attention sinks": GPT_OSS}[config]
    cfg = read_model_config(RawConfig(raw, "tiny.json"), "tiny")
    built = build_decode(cfg, PRECISIONS["f32"], 2, 15)
    feeds = {"ids": rng.integers(0, 64, (2, 1)), "pos": np.array([15, 3])}
    for n in built.graph.of_kind("input"):
        if n.name.endswith("_in"):
            feeds[n.name] = rng.standard_normal(n.type.shape).astype(np.float32)
    _compare(built, feeds, 4, rng)


def test_the_mapper_uses_online_softmax_only_where_scores_spill() -> None:
    machine = load_hardware("rngd")
    cfg = load_model("llama-3.1-8b").config
    short, notes = choose_attention(build_prefill(cfg, PRECISIONS["bf16"], 1, 256).graph, machine)
    assert {n["form"] for n in notes} == {"plain"} and find_attention(short)
    long, notes = choose_attention(build_prefill(cfg, PRECISIONS["bf16"], 1, 2048).graph, machine)
    assert {n["form"] for n in notes} == {"online"} and not find_attention(long)
    assert all("exceed DM" in n["reason"] and n["block"] < 2048 for n in notes)


def test_odd_prompt_lengths_get_power_of_two_blocks() -> None:
    machine = load_hardware("rngd")
    cfg = load_model("llama-3.1-8b").config
    graph, notes = choose_attention(build_prefill(cfg, PRECISIONS["bf16"], 1, 2047).graph, machine)
    assert {n["form"] for n in notes} == {"online"} and not find_attention(graph)
    ((block, rows),) = {(n["block"], n["rows"]) for n in notes}
    assert block & (block - 1) == 0 and rows & (rows - 1) == 0 and 2047 % block and 2047 % rows
    assert f"l0.attn.Sq{2047 // rows * rows}.blk{2047 // block}.scores" in graph  # the short last tile


def test_simulate_reports_the_attention_form() -> None:
    from tcp_compiler.report.build import build_report
    from tcp_compiler.simulate import simulate_generation

    sim = simulate_generation(
        load_model("llama-3.2-1b").config, load_hardware("rngd"), PRECISIONS["bf16"], 1, 4096, 2
    )
    report = build_report(sim, top=3)
    attention = [a for a in report.attention.prefill if a.form != "tiled"]  # tiled: token tiles' notes
    assert {a.form for a in attention} == {"online"} and len(attention) == 16
    assert report.prefill.seconds >= report.prefill.roofline_seconds


BLOOM = {"model_type": "bloom", "vocab_size": 64, "hidden_size": 32, "n_layer": 2, "n_head": 4}


def test_alibi_bias_is_sliced_with_its_key_block() -> None:
    """ALiBi adds a [heads, Sk] bias between the scale and the mask: each block takes its slice."""
    rng = np.random.default_rng(3)
    cfg = read_model_config(RawConfig(BLOOM, "bloom.json"), "tiny-bloom")
    built = build_prefill(cfg, PRECISIONS["f32"], 2, 16, padded=True)
    (match, _) = find_attention(built.graph)
    assert [m.kind for m in match.modifiers] == ["mul", "add"]
    online = online_softmax(built.graph, 4)
    assert "alibi.bias.Sk4" in online and online["l0.attn.blk1.biased"].operands[1] == "alibi.bias.Sk4"
    _compare(built, {"ids": rng.integers(0, 64, (2, 16)), "lengths": np.array([16, 5])}, 4, rng)


@pytest.mark.parametrize(
    ("phase", "block", "rows"), [("decode", 2, None), ("decode", 8, None), ("prefill", 4, 4)]
)
def test_log_sum_exp_output_equals_the_plain_scores_logsumexp(
    phase: str, block: int, rows: int | None
) -> None:
    rng = np.random.default_rng(block)
    cfg = read_model_config(RawConfig(TINY, "tiny.json"), "tiny")
    if phase == "decode":
        built = build_decode(cfg, PRECISIONS["f32"], 2, 15)
        feeds = {"ids": rng.integers(0, 64, (2, 1)), "pos": np.array([15, 3])}
    else:
        built = build_prefill(cfg, PRECISIONS["f32"], 2, 16, padded=True)
        feeds = {"ids": rng.integers(0, 64, (2, 16)), "lengths": np.array([16, 5])}
    for n in built.graph.of_kind("input"):
        if n.name.endswith("_in"):
            feeds[n.name] = rng.standard_normal(n.type.shape).astype(np.float32)
    params = _params(built, rng)
    probe = ir.parse(ir.print_graph(built.graph))
    probe.set_outputs(*built.graph.outputs, "l0.masked", "l1.masked")
    plain = ir.interpret(probe, feeds, params)
    online = online_softmax(built.graph, block, lse=True, rows=rows and ("Sq", rows))
    assert list(online.outputs[-3:]) == ["l0.attn.lse", "l1.attn.lse", "l2.attn.lse"]
    got = ir.interpret(online, feeds, params)
    for i in (0, 1):
        masked = plain[f"l{i}.masked"].astype(np.float64)  # [B, Hkv, G, Sq, Sk]
        top = masked.max(axis=-1, keepdims=True)
        expected = (top + np.log(np.exp(masked - top).sum(axis=-1, keepdims=True)))[..., 0]
        np.testing.assert_allclose(got[f"l{i}.attn.lse"], expected, atol=1e-5, rtol=0)


GEMMA2 = {
    "model_type": "gemma2", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "sliding_window": 3, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0,
    "query_pre_attn_scalar": 8, "layer_types": ["sliding_attention", "full_attention"],
}  # fmt: skip


@pytest.mark.parametrize("rows", [None, 4])
def test_soft_capped_scores_run_as_online_softmax(rows: int | None) -> None:
    """Gemma 2's cap * tanh(scores / cap) sits between the scores and the mask: the rewrite keeps it
    per block, so long Gemma 2 prompts need not spill their scores."""
    rng = np.random.default_rng(3)
    cfg = read_model_config(RawConfig(GEMMA2, "tiny.json"), "tiny")
    built = build_prefill(cfg, PRECISIONS["f32"], 2, 16, padded=True)
    (match, _) = find_attention(built.graph)
    assert [m.kind for m in match.modifiers] == ["mul", "div", "tanh", "mul"]
    feeds = {"ids": rng.integers(0, 64, (2, 16)), "lengths": np.array([16, 5])}
    _compare(built, feeds, 4, rng, rows and ("Sq", rows))


GPT_OSS = {
    "model_type": "gpt_oss", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "sliding_window": 3, "num_local_experts": 4, "num_experts_per_tok": 2, "swiglu_limit": 0.5,
}  # fmt: skip


@pytest.mark.parametrize("rows", [None, 4])
def test_attention_sinks_run_as_online_softmax(rows: int | None) -> None:
    """gpt-oss's sink joins the max and the sum of the softmax: the rewrite folds it in after the
    last key block, with padding, sliding windows and query tiles."""
    rng = np.random.default_rng(5)
    cfg = read_model_config(RawConfig(GPT_OSS, "tiny.json"), "tiny")
    built = build_prefill(cfg, PRECISIONS["f32"], 2, 16, padded=True)
    (match, _) = find_attention(built.graph)
    assert match.sink is not None and match.sink.value.name == "model.layers.0.self_attn.sinks"
    feeds = {"ids": rng.integers(0, 64, (2, 16)), "lengths": np.array([16, 5])}
    _compare(built, feeds, 4, rng, rows and ("Sq", rows))

