"""Families transformers does not ship (remote code, issue 28), checked against references written
from their published modelling code: logits of prefill and 4 decode steps within 1e-4, greedy
tokens equal, 2 and 4 chips equal to 1, the parameter count equal to the published module's
parameter shapes (tiny and bundled), and each family's special part made to bite.

- `mimo`: XiaomiMiMo/MiMo, modeling_mimo.py at commit 051d98d073eee95ada84581d5a9ca55249bf45e2
  (the hub file XiaomiMiMo/MiMo-7B-RL ships the same classes). MiMoForCausalLM inherits
  Qwen2ForCausalLM's forward, which never calls `model.mtp_layers`, so transformers' Qwen2 on the
  same weights is the reference for the logits; each MiMoMTPLayers holds a Qwen2Attention, a
  Qwen2MLP, five Qwen2RMSNorms (input, post-attention, token, hidden, final) and a bias-free
  Linear(2 x hidden, hidden): its parameters are counted from those transformers modules here.
- `nemotron-nas` (DeciLM): the numpy reference in tests/oracle/remote_reference.py (which cites
  modeling_decilm.py); a tiny stack with every kind of block: attention kept with 2, 1 and 4 KV
  heads, skipped and replaced by a linear; MLPs of two widths (ffn_mult), skipped and replaced.
- `phi3small`: the numpy reference in tests/oracle/remote_reference.py (which cites
  modeling_phi3_small.py and its helpers); a tiny model whose blocks (2 positions), local span (2
  blocks) and vertical stride (3, each of the 4 heads its own stripes) cut the 10 positions the
  test runs, a dense second layer, a gegelu limit that clamps, and muP multipliers far from 1; and
  the 128k models' LongRoPE on it, with an original context of 8 positions the 4 decode steps
  cross (the short factors up to 8 tokens, the long ones past, keys in the cache keeping the
  rotation they were written with) and a 12-token prompt wholly past it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen2 import modeling_qwen2

from tcp_compiler.analysis.config_floor import unrun_weights
from tcp_compiler.cli import main
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle import remote_reference as ref
from tests.oracle.test_families import reference_logits
from tests.oracle.tiny_models import COMMON, FAMILIES, build

PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
F32, BF16 = PRECISIONS["f32"], PRECISIONS["bf16"]
MIMO_MTP = 2  # MTP layers in the tiny MiMo


def _params(cfg) -> int:
    """tcpc's count: the weights the graph binds from a checkpoint plus those it holds but never runs."""
    built = sum(p.type.numel for p in build_prefill(cfg, BF16, 1, 1).checkpoint_params())
    return built + unrun_weights(cfg, BF16)[0]


def _generation(directory: Path, chips: int = 1) -> tuple[list[np.ndarray], list[int]]:
    model = load_model(directory)
    result = generate(model.config, model.checkpoint.load, [PROMPT], F32, STEPS, chips=chips)
    return [result.prefill_logits[0]] + [d[0] for d in result.decode_logits], result.token_matrix[0].tolist()


def _assert_matches(ours: list[np.ndarray], tokens: list[int], theirs: list[np.ndarray], name: str) -> None:
    assert len(ours) == len(theirs) == STEPS + 1
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
        assert int(np.argmax(a)) == tokens[step]
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"


# --- mimo -------------------------------------------------------------------------------------


def _mtp_layer(config: transformers.Qwen2Config) -> torch.nn.ModuleDict:
    """One MiMoMTPLayers' parameters, as the published class builds them from transformers' Qwen2
    modules (names as in its state dict)."""
    norm = lambda: modeling_qwen2.Qwen2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)  # noqa: E731
    return torch.nn.ModuleDict({
        "input_layernorm": norm(), "post_attention_layernorm": norm(), "token_layernorm": norm(),
        "hidden_layernorm": norm(), "final_layernorm": norm(),
        "input_proj": torch.nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False),
        "self_attn": modeling_qwen2.Qwen2Attention(config, layer_idx=0),
        "mlp": modeling_qwen2.Qwen2MLP(config),
    })  # fmt: skip


def _mimo_config(data: dict) -> transformers.Qwen2Config:
    return transformers.Qwen2Config(**{k: v for k, v in data.items() if k not in ("model_type", "auto_map")})


def _save_mimo(directory: Path, mtp: int = MIMO_MTP, **overrides) -> tuple[transformers.PreTrainedModel, int]:
    """A tiny MiMo checkpoint: Qwen 2's tiny model (sliding window and biases) with `mtp` random MTP
    layers saved beside it, model_type mimo; returns the Qwen 2 model and the MTP parameters."""
    model = build("qwen2", seed=7, **overrides)
    torch.manual_seed(8)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    mtp_params = 0
    for j in range(mtp):
        layer = _mtp_layer(model.config)
        for name, p in layer.named_parameters():
            state[f"model.mtp_layers.{j}.{name}"] = 0.1 * torch.randn_like(p)
            mtp_params += p.numel()
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, directory / "model.safetensors")
    data = {**COMMON, **FAMILIES["qwen2"][2], **overrides, "model_type": "mimo", "torch_dtype": "float32",
            "architectures": ["MiMoForCausalLM"], "num_nextn_predict_layers": mtp}  # fmt: skip
    (directory / "config.json").write_text(json.dumps(data))
    return model, mtp_params


@pytest.fixture(scope="module")
def mimo(tmp_path_factory) -> tuple[transformers.PreTrainedModel, int, Path]:
    directory = tmp_path_factory.mktemp("mimo")
    model, mtp_params = _save_mimo(directory, vocab_size=96)  # 96: the LM head splits over 2 and 4 chips
    return model, mtp_params, directory


def test_mimo_generates_what_its_published_forward_computes(mimo) -> None:
    model, _, directory = mimo
    ours, tokens = _generation(directory)
    _assert_matches(ours, tokens, reference_logits(model, PROMPT, tokens[:STEPS]), "mimo")


@pytest.mark.parametrize("chips", [2, 4])
def test_mimo_on_chips_equals_one_chip(mimo, chips: int) -> None:
    one, tokens = _generation(mimo[2])
    many, many_tokens = _generation(mimo[2], chips)
    assert many_tokens == tokens
    for a, b in zip(one, many, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_mimo_parameter_count_holds_its_mtp_layers(mimo) -> None:
    """The count is the Qwen 2 model's plus every MTP layer's: without them it would be short."""
    model, mtp_params, directory = mimo
    cfg = load_model(directory).config
    assert cfg.mtp_layers == MIMO_MTP and mtp_params > 0
    assert _params(cfg) == sum(p.numel() for p in model.parameters()) + mtp_params
    assert unrun_weights(cfg, BF16)[0] == mtp_params


def test_bundled_mimo_counts_the_published_modules(capsys) -> None:
    """MiMo-7B-RL: Qwen2ForCausalLM plus one MTP layer, built on the meta device; `tcpc simulate`
    reports the MTP layer's parameters and bytes, and they are not in the weights it holds."""
    data = json.loads((BUNDLED / "mimo-7b-rl.json").read_text())
    config = _mimo_config(data)
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
        mtp = [_mtp_layer(config) for _ in range(data["num_nextn_predict_layers"])]
    run = sum(p.numel() for p in model.parameters())
    unrun = sum(p.numel() for layer in mtp for p in layer.parameters())
    cfg = load_model("mimo-7b-rl").config
    assert (_params(cfg), unrun_weights(cfg, BF16)) == (run + unrun, (unrun, unrun * 2.0))
    capsys.readouterr()
    assert main(["simulate", "mimo-7b-rl", "--prompt-len", "64", "--gen-len", "2", "--top", "1"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"not run: {unrun:,} parameters (422 MB) the checkpoint holds" in text


def test_a_wrongly_shaped_mtp_tensor_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    _save_mimo(tmp_path, mtp=1)
    from safetensors.torch import load_file

    state = load_file(tmp_path / "model.safetensors")
    state["model.mtp_layers.0.input_proj.weight"] = torch.zeros(32, 32)  # [D, D], not [D, 2D]
    save_file(state, tmp_path / "model.safetensors")
    assert main(["run", str(tmp_path), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'model.mtp_layers.0.input_proj.weight' has shape [32, 32]" in err
    assert "implies [32, 64]" in err


# --- shared by the numpy references -------------------------------------------------------------


def _save_random(directory: Path, config: dict, shapes: dict[str, tuple[int, ...]], seed: int) -> dict:
    """Random weights of `shapes` (0.1 x randn; norm weights around 1) saved with `config` as a
    float32 checkpoint; returns them in float64 for the reference."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in shapes.items():
        centre = 1.0 if name.endswith("norm.weight") else 0.0
        weights[name] = (centre + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.from_numpy(v) for k, v in weights.items()}, directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps({**config, "torch_dtype": "float32"}))
    return {k: v.astype(np.float64) for k, v in weights.items()}


def _reference_steps(logits_of, tokens: list[int]) -> list[np.ndarray]:
    """The reference's last-position logits for the prompt, then for each fed token."""
    return [logits_of(PROMPT + tokens[:step])[-1] for step in range(STEPS + 1)]


def _check_remote(directory: Path, logits_of, name: str) -> None:
    """Prefill + 4 decode steps equal to the reference, and 2 and 4 chips equal to 1."""
    ours, tokens = _generation(directory)
    _assert_matches(ours, tokens, _reference_steps(logits_of, tokens), name)
    for chips in (2, 4):
        many, many_tokens = _generation(directory, chips)
        assert many_tokens == tokens, f"{name} on {chips} chips"
        for a, b in zip(ours, many, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"{name} on {chips} chips")


# --- nemotron-nas (DeciLM) ----------------------------------------------------------------------


def _deci_block(group: int | None = None, attn: str = "", ffn_mult: float | None = None, ffn: str = "",
                ) -> dict:  # fmt: skip
    """A block_configs entry as the published files spell it: `attn` / `ffn` "no_op" or
    "replace_with_linear", else kept (n_heads_in_group / ffn_mult)."""
    return {
        "attention": {"n_heads_in_group": group, "no_op": attn == "no_op", "num_sink_tokens": None,
                      "replace_with_linear": attn == "replace_with_linear", "sparsify": None,
                      "unshifted_sink": False, "use_prefill_window_in_sink_attention": False,
                      "window_length": None},
        "ffn": {"ffn_mult": ffn_mult, "no_op": ffn == "no_op",
                "replace_with_linear": ffn == "replace_with_linear", "sparsify": None},
    }  # fmt: skip


DECI_BLOCKS = [
    _deci_block(2, ffn_mult=1.0),  # 2 KV heads, MLP 256 wide
    _deci_block(attn="no_op", ffn_mult=13.0),  # no attention (no norm, no cache), MLP 512 wide
    _deci_block(attn="replace_with_linear", ffn="replace_with_linear"),
    _deci_block(4, ffn="no_op"),  # 1 KV head, no MLP
    _deci_block(1, ffn_mult=1.0),  # 4 KV heads
]
DECI = {
    "architectures": ["DeciLMForCausalLM"], "model_type": "nemotron-nas", "vocab_size": 96, "hidden_size": 32,
    "num_attention_heads": 4, "num_key_value_heads": None, "intermediate_size": None,
    "num_hidden_layers": len(DECI_BLOCKS), "block_configs": DECI_BLOCKS, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 64, "hidden_act": "silu",
    "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def deci(tmp_path_factory) -> tuple[dict, Path]:
    directory = tmp_path_factory.mktemp("deci")
    return _save_random(directory, DECI, ref.decilm_shapes(DECI), seed=11), directory


def test_nemotron_nas_generates_what_decilm_computes(deci) -> None:
    weights, directory = deci
    _check_remote(directory, lambda ids: ref.decilm_logits(DECI, weights, ids), "nemotron-nas")


def test_nemotron_nas_layers_have_their_own_parts_and_sizes(deci) -> None:
    """What bites in the tiny stack: each layer's KV heads, MLP width and kept / skipped / linear
    parts as read, and a cache only for the layers that attend."""
    weights, directory = deci
    cfg = load_model(directory).config
    layers = cfg.layers
    assert [(layer.attention, layer.ffn) for layer in layers] == [
        ("standard", "standard"), ("skip", "standard"), ("linear", "linear"), ("standard", "skip"),
        ("standard", "standard"),
    ]  # fmt: skip
    assert [cfg.kv_heads_of(layers[i]) for i in (0, 3, 4)] == [2, 1, 4]
    assert [cfg.intermediate_of(layers[i]) for i in (0, 1, 4)] == [256, 512, 256]
    built = build_prefill(cfg, F32, 1, 4)
    assert len(built.graph.meta.kv_outputs) == 2 * 3
    assert _params(cfg) == sum(w.size for w in weights.values())


def test_bundled_nemotron_super_counts_the_published_modules() -> None:
    """Llama-3.3-Nemotron-Super-49B-v1: the parameter shapes DeciLM builds from its block_configs
    (49 attention layers with 8 KV heads, 31 without attention, MLPs from 0.5 to 5.25 x hidden)."""
    data = json.loads((BUNDLED / "llama-3.3-nemotron-super-49b-v1.json").read_text())
    cfg = load_model("llama-3.3-nemotron-super-49b-v1").config
    assert _params(cfg) == sum(math.prod(s) for s in ref.decilm_shapes(data).values())
    assert sum(layer.attends for layer in cfg.layers) == 49


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (_deci_block(3, ffn_mult=1.0), "block_configs[0].attention.n_heads_in_group: expected a divisor of "
                                       "num_attention_heads (4), got 3"),
        (_deci_block(attn="no_op", ffn_mult=None), "missing field 'block_configs[0].ffn.ffn_mult'"),
        ({**_deci_block(2, ffn_mult=1.0), "attention": {**_deci_block(2)["attention"], "window_length": 8}},
         "block_configs[0].attention.window_length: windowed and sink attention are not supported"),
        ({**_deci_block(2, ffn_mult=1.0), "ffn": {"no_op": True, "replace_with_linear": True}},
         "block_configs[0].ffn.no_op and block_configs[0].ffn.replace_with_linear cannot both be true"),
    ],
)
def test_bad_block_configs_are_one_line_errors(block: dict, message: str, tmp_path: Path, capsys) -> None:
    config = {**DECI, "num_hidden_layers": 1, "block_configs": [block]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["simulate", str(tmp_path / "config.json"), "--prompt-len", "4", "--gen-len", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


# --- phi3small ----------------------------------------------------------------------------------

PHI3SMALL = {
    "architectures": ["Phi3SmallForCausalLM"], "model_type": "phi3small", "vocab_size": 96, "hidden_size": 32,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3, "ff_intermediate_size": 48,
    "ff_dim_multiplier": None, "hidden_act": "gegelu", "gegelu_limit": 0.5, "gegelu_pad_to_256": True,
    "blocksparse_block_size": 2, "blocksparse_num_local_blocks": 2, "blocksparse_vert_stride": 3,
    "blocksparse_homo_head_pattern": False, "blocksparse_triton_kernel_block_size": 2,
    "dense_attention_every_n_layers": 2, "layer_norm_epsilon": 1e-5, "max_position_embeddings": 64,
    "rope_embedding_base": 100.0, "rope_position_scale": 1.0, "mup_use_scaling": True,
    "mup_attn_multiplier": 16.0, "mup_embedding_multiplier": 10.0, "mup_width_multiplier": 8.0,
}  # fmt: skip


@pytest.fixture(scope="module")
def phi3small(tmp_path_factory) -> tuple[dict, Path]:
    directory = tmp_path_factory.mktemp("phi3small")
    return _save_random(directory, PHI3SMALL, ref.phi3small_shapes(PHI3SMALL), seed=13), directory


def test_phi3small_generates_what_its_published_code_computes(phi3small) -> None:
    weights, directory = phi3small
    _check_remote(directory, lambda ids: ref.phi3small_logits(PHI3SMALL, weights, ids), "phi3small")


@pytest.mark.parametrize(
    "change",
    [
        {"dense_attention_every_n_layers": 1},  # every layer dense: the block pattern off
        {"blocksparse_homo_head_pattern": True},  # one pattern for all heads
        {"gegelu_limit": 1e3},  # nothing clamped
        {"mup_use_scaling": False},  # 1/sqrt(head_dim), not mup_attn_multiplier / head_dim
    ],
)
def test_phi3small_special_parts_bite(phi3small, change: dict) -> None:
    """The reference with one part changed moves the prompt's logits by more than the tolerance:
    each part is exercised by the tiny model's config."""
    weights, _ = phi3small
    ours = ref.phi3small_logits(PHI3SMALL, weights, PROMPT + [7, 1, 60, 33])
    changed = ref.phi3small_logits({**PHI3SMALL, **change}, weights, PROMPT + [7, 1, 60, 33])
    assert np.abs(ours - changed).max() > 1e-2


def test_phi3small_parameter_count_and_layers(phi3small) -> None:
    weights, directory = phi3small
    cfg = load_model(directory).config
    assert _params(cfg) == sum(w.size for w in weights.values())
    assert [layer.block_sparse is None for layer in cfg.layers] == [False, True, False]


def test_bundled_phi3small_counts_the_published_modules() -> None:
    data = json.loads((BUNDLED / "phi-3-small-8k-instruct.json").read_text())
    cfg = load_model("phi-3-small-8k-instruct").config
    assert _params(cfg) == sum(math.prod(s) for s in ref.phi3small_shapes(data).values()) == 7_392_272_384


# Phi-3-small-128k's longrope on the tiny model: 4 factor pairs (head_dim 8), an original context of
# 8 positions against max_position_embeddings 64; short_mscale given, long_mscale left to the
# default (sqrt(1 + ln 8 / ln 8), far from 1)
LONGROPE = {"type": "su", "original_max_position_embeddings": 8, "short_factor": [1.0, 1.3, 2.1, 3.7],
            "long_factor": [1.5, 4.0, 9.0, 17.0], "short_mscale": 1.1}  # fmt: skip
PHI3SMALL_LONG = {**PHI3SMALL, "rope_scaling": LONGROPE}
LONG_PROMPT = [5, 17, 3, 88, 42, 9, 61, 2, 30, 77, 14, 50]  # 12 tokens: past the original 8


def _written(prompt_len: int, total: int) -> list[int]:
    """The sequence length each position was computed in: the prompt's in the prefill, each fed
    token's in its decode step."""
    return [max(prompt_len, p + 1) for p in range(total)]


@pytest.fixture(scope="module")
def phi3small_long(tmp_path_factory) -> tuple[dict, Path]:
    directory = tmp_path_factory.mktemp("phi3small_long")
    return _save_random(directory, PHI3SMALL_LONG, ref.phi3small_shapes(PHI3SMALL_LONG), seed=17), directory


def test_phi3small_longrope_decode_crosses_the_original_context_as_published(phi3small_long) -> None:
    """Prefill of 6, decode steps at 7 and 8 tokens (short factors) then 9 and 10 (long ones, the
    keys written before keeping their short rotation), on 1, 2 and 4 chips."""
    weights, directory = phi3small_long
    assert len(PROMPT) + STEPS > LONGROPE["original_max_position_embeddings"] >= len(PROMPT) + 2

    def logits_of(ids: list[int]) -> np.ndarray:
        return ref.phi3small_logits(PHI3SMALL_LONG, weights, ids, _written(len(PROMPT), len(ids)))

    _check_remote(directory, logits_of, "phi3small longrope")


def test_phi3small_longrope_prefill_past_the_original_context(phi3small_long) -> None:
    weights, directory = phi3small_long
    model = load_model(directory)
    result = generate(model.config, model.checkpoint.load, [LONG_PROMPT], F32, 2)
    tokens = result.token_matrix[0].tolist()
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    for step, logits in enumerate(ours):
        ids = LONG_PROMPT + tokens[:step]
        theirs = ref.phi3small_logits(PHI3SMALL_LONG, weights, ids, _written(len(LONG_PROMPT), len(ids)))[-1]
        np.testing.assert_allclose(logits, theirs, atol=1e-4, rtol=0, err_msg=f"step {step}")
    assert np.abs(ours[0]).max() > 0.05


@pytest.mark.parametrize(
    ("change", "ids"),
    [
        ({"rope_scaling": None}, LONG_PROMPT),  # plain RoPE
        ({"rope_scaling": {**LONGROPE, "long_mscale": 1.0}}, LONG_PROMPT),  # the default long_mscale
        ({"rope_scaling": {**LONGROPE, "long_factor": LONGROPE["short_factor"]}}, LONG_PROMPT),
        ({"rope_scaling": {**LONGROPE, "short_factor": [1.0] * 4}}, PROMPT),  # short factors
        ({"rope_scaling": {**LONGROPE, "short_mscale": 1.0}}, PROMPT),
    ],
)
def test_phi3small_longrope_parts_bite(phi3small_long, change: dict, ids: list[int]) -> None:
    weights, _ = phi3small_long
    ours = ref.phi3small_logits(PHI3SMALL_LONG, weights, ids)
    changed = ref.phi3small_logits({**PHI3SMALL_LONG, **change}, weights, ids)
    assert np.abs(ours - changed).max() > 1e-2


def test_phi3small_longrope_tables_switch_past_the_original_context() -> None:
    """tcpc's RoPE for the config: short factors and short_mscale up to 8 tokens, long factors and
    the default long_mscale past them, rope_position_scale not applied (as the published branch)."""
    raw = RawConfig({**PHI3SMALL_LONG, "rope_position_scale": 0.5}, "config.json")
    rope = read_model_config(raw, "m").layers[0].rope
    base = np.float32(100.0) ** (np.arange(0, 8, 2, dtype=np.float32) / np.float32(8))
    short, long = (np.float32(LONGROPE[k]) for k in ("short_factor", "long_factor"))
    np.testing.assert_allclose(rope.inv_freq(8, 8), 1 / (short * base), rtol=1e-6)
    np.testing.assert_allclose(rope.inv_freq(8, 9), 1 / (long * base), rtol=1e-6)
    assert rope.table(8, 8)[0, 0, 0, 0] == np.float32(1.1)
    assert rope.table(8, 9)[0, 0, 0, 0] == pytest.approx(math.sqrt(2), rel=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_act": "gelu"}, "hidden_act: Phi-3-small supports only 'gegelu', got 'gelu'"),
        ({"rope_scaling": {"type": "longrope"}},
         "missing field 'rope_scaling.original_max_position_embeddings'"),
        ({"rope_scaling": {**LONGROPE, "factor": 2.0}},
         "rope_scaling.factor: not a field of Phi-3-small's longrope"),
        ({"rope_scaling": {**LONGROPE, "type": "yarn"}},
         "rope_scaling.type: expected 'longrope' or 'su', got 'yarn'"),
        ({"rope_scaling": {**LONGROPE, "short_factor": [1.0] * 3, "long_factor": [1.0] * 3}},
         "rope_scaling.short_factor: expected 4 entries (one per pair of the 8 rotary dims), got 3"),
        ({"rope_scaling": {**LONGROPE, "long_factor": [1.0] * 3}},
         "rope_scaling.long_factor: expected 4 entries like short_factor, got 3"),
        ({"ff_intermediate_size": None, "ff_dim_multiplier": None}, "missing field 'ff_dim_multiplier'"),
        ({"num_key_value_heads": 3}, "num_attention_heads (4) and num_key_value_heads (3) must divide"),
    ],
)
def test_bad_phi3small_configs_are_one_line_errors(change: dict, message: str, tmp_path: Path,
                                                   capsys) -> None:  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({**PHI3SMALL, **change}))
    assert main(["simulate", str(tmp_path / "config.json"), "--prompt-len", "4", "--gen-len", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
