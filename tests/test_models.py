"""The bundled real-model configs compile, count the parameters their model cards state, and bad
configs fail with one line naming the field."""

from __future__ import annotations

import json
import tomllib
from decimal import Decimal
from pathlib import Path

import pytest

import ir
from tcp_compiler.analysis.config_floor import unrun_weights
from tcp_compiler.cli import main
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.families import supported
from tcp_compiler.frontend.model import BUNDLED, bundled_models, load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision

CARDS = tomllib.loads((BUNDLED / "model_cards.toml").read_text())
BY_FILE = {card["file"]: card for card in CARDS.values()}
REQUIRED = {
    "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
    "gemma-3-1b", "gemma-3-27b", "mistral-7b-v0.1", "mixtral-8x7b",
    "gpt2", "opt-1.3b", "bloom-560m", "pythia-1.4b", "falcon-7b",
    "gemma-2-2b", "phi-3-mini-4k-instruct", "olmo-2-1124-7b", "starcoder2-3b", "granite-3.1-2b-instruct",
    "smollm3-3b", "falcon-rw-1b", "gpt-oss-20b", "gpt-oss-120b", "qwen1.5-moe-a2.7b", "deepseek-v3",
    "phi-2", "starcoderbase-1b", "glm-4-9b-chat-hf", "glm-4-9b-0414", "glm-4.5-air", "chatglm3-6b",
    "llama-4-scout-17b-16e-instruct", "mimo-7b-rl", "llama-3.3-nemotron-super-49b-v1",
    "phi-3-small-8k-instruct", "phi-3.5-moe-instruct",
    "deepseek-v3.2", "glm-5",
}  # fmt: skip


def test_the_required_models_are_bundled_with_card_figures() -> None:
    assert set(bundled_models()) >= REQUIRED
    assert {f"{m}.json" for m in bundled_models()} == set(BY_FILE)


@pytest.mark.parametrize("name", bundled_models())
@pytest.mark.parametrize("dtype", ["bf16", "fp8", "w4"])
def test_every_bundled_model_compiles_both_phases(name: str, dtype: str) -> None:
    cfg = load_model(name).config
    prec = PRECISIONS[dtype]
    # Falcon-7B: hidden 4544 = 64 x 71; Phi-3-mini: o_proj's input is 32 heads x 96, which 128 cuts
    if prec.quantised and not _group_tiles(cfg, prec.group_size):
        with pytest.raises(OptionError, match=f"group size {prec.group_size} does not tile"):
            build_prefill(cfg, prec, 2, 16)  # GLM-4.7-Flash's prefill builds: its decode's absorbed
            build_decode(cfg, prec, 2, 40)  # key contracts the 192-wide nope head
        prec = precision(dtype, group_size=next(g for g in (64, 32, 16) if _group_tiles(cfg, g)))
    for built in (build_prefill(cfg, prec, 2, 16), build_decode(cfg, prec, 2, 40)):
        ir.verify(built.graph)
        assert built.graph.outputs[0] == "logits"
        assert built.graph["logits"].type == ir.TensorType.of(ir.F32, B=2, V=cfg.vocab)
        caches = sum(_caches(cfg, i, layer) for i, layer in enumerate(cfg.layers))
        assert len(built.graph.outputs) == 1 + caches


def _caches(cfg, i: int, layer) -> int:
    """K and V, a Mamba or DeltaNet layer's state and window (both in Falcon-H1's layers, which run
    attention beside their Mamba mixer, and in a Zamba2 layer running a shared block), an RWKV-4
    block's two sums, two lagged inputs and two token shifts (RWKV-5's one state, lagged k and v,
    two token shifts; RWKV-6's lagged decay too), or nothing (a layer that skips or
    replaces its attention); sparse attention's index keys where the layer runs its indexer."""
    if layer.mixer == "rwkv":
        return {"rwkv4": 6, "rwkv5": 5, "rwkv6": 6}[cfg.ssm.kind]
    indexer = cfg.dsa is not None and i not in cfg.dsa.shared
    return 2 * layer.attends + 2 * layer.recurrent + indexer


def _group_tiles(cfg, group: int) -> bool:
    """Quantisation groups tile every projection's input: the hidden size, a head's K whole or whole
    heads per group, and the Mamba mixers' inner widths (x_proj and out_proj contract the inner width,
    dt_proj dt's rank; Mamba-2's out_proj a group's). MLP and expert widths need not: a width the
    groups do not tile (GLM-4.5-Air's dense 10944 = 64 x 171) is zero-padded to whole groups
    (Sharding.plan), on one chip as under tensor parallelism.
    """
    heads = (cfg.mla.v_dim, cfg.mla.nope_dim) if cfg.mla is not None else (cfg.head_dim,)  # MLA's contracted
    if not any(layer.mixer == "attention" or layer.attends for layer in cfg.layers):
        heads = ()
    widths = [cfg.hidden]
    if cfg.shared is not None:  # Zamba2's shared blocks: q, k, v read 2 x hidden, B's the adapter rank
        widths += [2 * cfg.hidden, cfg.shared.rank]
    if cfg.ssm is not None:
        ssm = cfg.ssm
        widths += [ssm.inner, ssm.dt_rank] if ssm.kind == "mamba" else [ssm.inner // ssm.groups]
    return all(w % group == 0 for w in widths) and all(k % group == 0 or group % k == 0 for k in heads)


def _agrees(count: int, figure: str) -> bool:
    """Within one unit of the figure's last digit: cards round ("7.61B") or truncate ("1.23B"), in
    billions or trillions ("1T")."""
    value = Decimal(figure[:-1])
    unit = Decimal(1).scaleb(value.as_tuple().exponent)
    return abs(Decimal(count) / Decimal(10 ** {"B": 9, "T": 12}[figure[-1]]) - value) < unit


@pytest.mark.parametrize("name", bundled_models())
def test_parameter_count_matches_the_model_card(name: str) -> None:
    cfg = load_model(name).config
    built = build_prefill(cfg, PRECISIONS["bf16"], 1, 1)
    card = BY_FILE[f"{name}.json"]
    # unbuilt_params: what the card's total holds that tcpc does not build (Llama 4's vision encoder)
    # unrun_weights: what the checkpoint holds and generation does not run (MiMo's MTP layers)
    count = sum(p.type.numel for p in built.checkpoint_params()) + card.get("unbuilt_params", 0)
    count += unrun_weights(cfg, PRECISIONS["bf16"])[0]
    assert _agrees(count, card["params"]), f"{name}: {count / 1e9:.3f}B vs card {card['params']}"


def test_agreement_rule() -> None:
    assert _agrees(1_236_000_000, "1.23B") and not _agrees(1_245_000_000, "1.23B")
    assert _agrees(8_030_000_000, "8B") and not _agrees(9_100_000_000, "8B")
    assert _agrees(1_026_408_232_448, "1T") and not _agrees(2_000_000_000_000, "1T")


def test_moe_active_parameters_match_the_card() -> None:
    moe = ("qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b", "gpt-oss-120b", "qwen1.5-moe-a2.7b", "deepseek-v3",
           "glm-4.5-air", "glm-5",
           "deepseek-moe-16b-base", "llama-4-scout-17b-16e-instruct", "k-exaone-236b-a23b",
           "minicpm-moe-8x2b", "ai21-jamba-1.5-mini", "nvidia-nemotron-3-nano-30b-a3b",
           "phi-3.5-moe-instruct", "qwen3.5-35b-a3b", "ernie-4.5-21b-a3b-pt", "dots.llm1.inst",
           "minimax-m2", "hunyuan-a13b-instruct", "qwen3-vl-30b-a3b-instruct", "glm-4.7-flash",
           "kimi-k2.5")  # fmt: skip
    for name in moe:
        cfg = load_model(name).config
        built = build_prefill(cfg, PRECISIONS["bf16"], 1, 1)
        total = sum(p.type.numel for p in built.checkpoint_params())
        per_expert = (3 if cfg.moe.gated else 2) * cfg.hidden * cfg.moe.intermediate  # Nemotron 3: no gate
        if cfg.moe.expert_bias:
            per_expert += 2 * cfg.moe.intermediate + cfg.hidden
        moe_layers = sum(layer.moe for layer in cfg.layers)  # DeepSeek's first layers are dense
        inactive = moe_layers * (cfg.moe.experts - cfg.moe.top_k) * per_expert
        if name.startswith("gpt-oss"):  # OpenAI counts the unembedding as active, not the embedding
            inactive += cfg.vocab * cfg.hidden
        # their active figures leave out the embedding and LM head
        if name in ("glm-4.5-air", "minimax-m2", "glm-4.7-flash", "glm-5"):
            inactive += 2 * cfg.vocab * cfg.hidden
        card = BY_FILE[f"{name}.json"]
        assert _agrees(total - inactive, card["active_params"]), name


def _write(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


LLAMA = json.loads((BUNDLED / "llama-3.2-1b.json").read_text())


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"model_type": "xlstm", "architectures": ["xLSTMForCausalLM"]},
            "model_type 'xlstm' is not supported and no entry of 'architectures' is (supported model types",
        ),
        ({"model_type": None}, f"missing field 'model_type' (supported: {', '.join(supported())})"),
        ({"hidden_size": None}, "missing field 'hidden_size' (needed for llama models)"),
        ({"num_attention_heads": "32"}, 'num_attention_heads: expected an integer from 1 to 16,384, got "32'),
        (
            {"num_key_value_heads": 5},
            "num_attention_heads (32) must be a multiple of num_key_value_heads (5)",
        ),
        ({"rope_scaling": {"rope_type": "ntk", "factor": 4.0}}, "rope_type 'ntk' is not supported"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 1.0, "beta_slow": 2.0}},
            "rope_scaling.beta_fast: expected a number >= beta_slow (2), got 1",
        ),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": 1}}, "truncate: expected true or"),
        ({"rope_scaling": {"rope_type": "dynamic"}}, "missing field 'rope_scaling.factor'"),
        (
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1, "2"], "long_factor": [1, 2]}},
            "rope_scaling.short_factor: expected a list of numbers, each > 0 and <= 1e+06",
        ),
        (
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [1.0]}},
            "rope_scaling.long_factor: expected 2 entries like short_factor, got 1",
        ),
        (
            {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
            "missing field 'rope_scaling.low_freq_factor'",
        ),
        ({"hidden_act": "tanh"}, "field 'hidden_act' = 'tanh' is not supported"),
        ({"vocab_size": 0}, "vocab_size: expected an integer from 1 to 16,777,216, got 0"),
        (
            {"model_type": "opt", "ffn_dim": 8192, "word_embed_proj_dim": 512},
            "word_embed_proj_dim (512) differs from hidden_size (2048)",
        ),
        ({"model_type": "falcon", "alibi": "yes"}, 'alibi: expected true or false, got "yes"'),
        ({"model_type": "gemma2", "attn_logit_softcapping": -1}, "attn_logit_softcapping: expected a num"),
        ({"model_type": "smollm3", "no_rope_layers": [1, 0]}, "no_rope_layers: expected 16 entries of 0 or"),
        ({"model_type": "gpt_neox", "rotary_pct": 0.001}, "rotary_pct 0.001 gives 0 rotary dims of 64"),
        (
            {"model_type": "gpt2", "hidden_size": None},
            "missing field 'n_embd' (or hidden_size; needed for gpt2",
        ),
        (
            {"model_type": "bloom", "num_attention_heads": 30},
            "hidden_size (2048) must be a multiple of n_head (30)",
        ),
        ({"model_type": "gpt_oss"}, "missing field 'num_local_experts' (needed for gpt_oss models)"),
        (
            {"model_type": "gpt_oss", "num_local_experts": 2, "num_experts_per_tok": 4},
            "num_experts_per_tok (4) exceeds num_local_experts (2)",
        ),
        (
            {"model_type": "gpt_oss", "num_local_experts": 8, "num_experts_per_tok": 2, "swiglu_limit": -1},
            "swiglu_limit: expected a number > 0",
        ),
        (
            {"model_type": "gptj", "rotary_dim": 66},
            "rotary_dim: expected an even count up to the head size 64",
        ),
        ({"model_type": "gptj", "tie_word_embeddings": True}, "its LM head has a bias of its own"),
        ({"model_type": "cohere", "logit_scale": 0}, "logit_scale: expected a number > 0"),
    ],
)
def test_bad_config_is_one_line_exit_2(change: dict, expected: str, tmp_path: Path, capsys) -> None:
    config = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    out = tmp_path / "out.tir"
    assert main(["compile", _write(tmp_path, config), "--seq", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1, err
    assert "config.json" in err and expected in err, err
    assert not out.exists()


PHI3 = json.loads((BUNDLED / "phi-3-mini-4k-instruct.json").read_text())


@pytest.mark.parametrize("factors", [47, 96])  # head_dim 96: 48 pairs of rotary dims
@pytest.mark.parametrize(
    "argv", [["compile", "--seq", "4"], ["simulate", "--prompt-len", "8", "--gen-len", "2"]]
)
def test_phi3_longrope_factor_lists_of_the_wrong_length_are_refused_at_load(
    factors: int, argv: list[str], tmp_path: Path, capsys
) -> None:
    """Only `run` met the lists' length (at its first RoPE table), naming neither file nor field."""
    rope = {"rope_type": "longrope", "short_factor": [1.0] * factors, "long_factor": [2.0] * factors}
    config = _write(tmp_path, {**PHI3, "rope_scaling": rope})
    out = tmp_path / "out.json"
    assert main([argv[0], config, *argv[1:], "-o" if argv[0] == "compile" else "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and config in err, err
    expected = "rope_scaling.short_factor: expected 48 entries (one per pair of the 96 rotary dims), got"
    assert f"{expected} {factors}" in err
    assert not out.exists()


def test_not_json_and_unknown_model(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert main(["compile", str(bad)]) == 2
    assert "config.json: not valid JSON" in capsys.readouterr().err
    assert main(["compile", "llama-9"]) == 2
    err = capsys.readouterr().err
    assert "bundled: " in err and "gemma-3-1b" in err


def test_old_and_new_field_names_give_the_same_model(tmp_path: Path) -> None:
    """transformers 5 names (rope_parameters, layer_types) and the old ones read alike."""
    old = {
        "model_type": "gemma3_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "sliding_window": 3, "sliding_window_pattern": 2, "rope_theta": 50000.0,
        "rope_local_base_freq": 500.0, "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    }  # fmt: skip
    old_only = ("sliding_window_pattern", "rope_theta", "rope_local_base_freq", "rope_scaling")
    new = {k: v for k, v in old.items() if k not in old_only}
    new["layer_types"] = ["sliding_attention", "full_attention"] * 2
    new["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "rope_theta": 50000.0, "factor": 4.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
    }
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    a = load_model(_write(tmp_path / "old", old)).config
    b = load_model(_write(tmp_path / "new", new)).config
    assert a.layers == b.layers
    assert [layer.sliding_window for layer in a.layers] == [3, None, 3, None]
    assert a.layers[1].rope.kind == "linear" and a.layers[0].rope.theta == 500.0


def test_compile_emits_ir_that_parses_back(tmp_path: Path, capsys) -> None:
    out = tmp_path / "decode.tir"
    assert (
        main(["compile", "qwen3-30b-a3b", "--phase", "decode", "--past", "7", "--batch", "2", "-o", str(out)])
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    graph = ir.load(out)
    assert graph["l0.k_cache"].type == ir.TensorType.of(ir.BF16, B=2, Hkv=4, P=8, K=128)
    assert graph["l0.experts"].kind == "topk"
    assert main(["compile", "llama-3.2-1b", "--seq", "3"]) == 0
    assert capsys.readouterr().out.startswith('graph "llama-3.2-1b.prefill" {')


def test_compile_packed_prefill_and_its_bad_options(tmp_path: Path, capsys) -> None:
    out = tmp_path / "packed.tir"
    assert main(["compile", "gpt2", "--seq", "16", "--documents", "3", "-o", str(out)]) == 0
    graph = ir.parse(out.read_text())
    assert graph["ends"].type == ir.TensorType.of(ir.I32, B=1, N=3)
    assert graph["logits"].type == ir.TensorType.of(ir.F32, B=1, N=3, V=50257)
    capsys.readouterr()
    for args, message in (
        (["--phase", "decode", "--documents", "2"], "--documents applies to --phase prefill"),
        (["--documents", "-1"], "argument --documents: expected an integer from 0 to 1,048,576, got '-1'"),
        (["--documents", "9"], "--documents 9 exceeds --seq 8: each document needs a token"),
    ):
        bad = tmp_path / "bad.tir"
        assert main(["compile", "gpt2", "--seq", "8", *args, "-o", str(bad)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and not bad.exists()
