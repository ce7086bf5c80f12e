"""Remote-code families (EXAONE 3.x, InternLM2, MiniCPM and its MoE) against numpy references
written from their published modelling code (tests/oracle/remote_code.py says which file and
commit): logits of prefill and 4 decode steps within 1e-4, greedy tokens equal, 2 and 4 chips equal
to 1, parameter counts equal to the published modules' parameter shapes (tiny and bundled), and
each family's special part shown to matter: switched off in tcpc's reading, the logits leave the
reference."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import numpy as np
import pytest

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import ModelConfig, RawConfig, Rope
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import tcpc_params
from tests.oracle.remote_code import SHAPES, random_checkpoint, reference_logits

PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
F32 = PRECISIONS["f32"]
SIZES = {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64}  # fmt: skip
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}  # fmt: skip
# Each special part is made to bite: EXAONE's llama3 scaling with an original context (8) the
# positions pass; InternLM2's grouped wqkv (2 KV heads of 2 query heads each), biases, and
# dynamic NTK from max_position_embeddings 8, which prefill (6) stays under and decode passes;
# MiniCPM's three multipliers far from 1.
CONFIGS = {
    "exaone": dict(SIZES, model_type="exaone", num_layers=3, layer_norm_epsilon=1e-5, rope_theta=10000.0,
                   rope_scaling=LLAMA3, tie_word_embeddings=False),
    # ExaoneConfig's defaults: tied head, MLP 4 x hidden, one KV head per query head, no scaling
    "exaone_defaults": {"model_type": "exaone", "vocab_size": 97, "hidden_size": 32, "num_layers": 2,
                        "num_attention_heads": 4},
    "internlm2": dict(SIZES, model_type="internlm2", num_hidden_layers=3, max_position_embeddings=8,
                      rope_theta=100.0, rope_scaling={"type": "dynamic", "factor": 4.0}),
    "internlm2_linear": dict(SIZES, model_type="internlm2", num_hidden_layers=2, bias=False,
                             rope_scaling={"type": "linear", "factor": 3.0}),
    "minicpm": dict(SIZES, model_type="minicpm", num_hidden_layers=3, scale_emb=3.0, scale_depth=1.4,
                    dim_model_base=8),
    "minicpm_moe": dict(SIZES, model_type="minicpm", num_hidden_layers=2, scale_emb=3.0, scale_depth=1.4,
                        dim_model_base=8, num_experts=4, num_experts_per_tok=2, tie_word_embeddings=False),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    raw = CONFIGS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    weights = random_checkpoint(raw, directory)
    return request.param, raw, weights, load_model(directory)


def _ours(cfg: ModelConfig, get: Callable, chips: int = 1) -> tuple[list[np.ndarray], list[int]]:
    result = generate(cfg, get, [PROMPT], F32, STEPS, chips=chips)
    return [result.prefill_logits[0]] + [d[0] for d in result.decode_logits], result.token_matrix[0].tolist()


def _max_error(raw: dict, weights: dict, cfg: ModelConfig, get: Callable) -> float:
    ours, tokens = _ours(cfg, get)
    theirs = reference_logits(raw, weights, PROMPT, tokens[:STEPS])
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))


def test_prefill_and_decode_match_the_published_code(tiny) -> None:
    name, raw, weights, model = tiny
    ours, tokens = _ours(model.config, model.checkpoint.load)
    theirs = reference_logits(raw, weights, PROMPT, tokens[:STEPS])
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
        assert int(np.argmax(a)) == tokens[step]
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"


@pytest.mark.parametrize("chips", [2, 4])
def test_sharded_generation_matches_one_chip(tiny, chips: int) -> None:
    name, _, _, model = tiny
    one = generate(model.config, model.checkpoint.load, [PROMPT, [7, 1, 60]], F32, 3)
    many = generate(model.config, model.checkpoint.load, [PROMPT, [7, 1, 60]], F32, 3, chips=chips)
    np.testing.assert_allclose(many.prefill_logits, one.prefill_logits, atol=1e-5, rtol=0, err_msg=name)
    for a, b in zip(many.decode_logits, one.decode_logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=name)
    assert many.token_matrix.tolist() == one.token_matrix.tolist()


def test_parameter_count_equals_the_published_modules(tiny) -> None:
    _, raw, weights, model = tiny
    assert tcpc_params(model.config) == sum(w.size for w in weights.values())


BUNDLED_REMOTE = [
    "exaone-3.5-7.8b-instruct",
    "internlm2_5-7b-chat",
    "minicpm-2b-sft-bf16",
    "minicpm-moe-8x2b",
]


@pytest.mark.parametrize("name", BUNDLED_REMOTE)
def test_bundled_parameter_count_equals_the_published_modules(name: str) -> None:
    raw = json.loads((BUNDLED / f"{name}.json").read_text())
    published = sum(int(np.prod(shape)) for shape in SHAPES[raw["model_type"]](raw).values())
    assert tcpc_params(load_model(name).config) == published


# Each special part switched off in tcpc's reading must move the logits off the reference.
OFF: dict[str, dict[str, Callable[[ModelConfig], ModelConfig]]] = {
    "exaone": {
        "llama3 scaling": lambda c: dataclasses.replace(
            c, layers=tuple(dataclasses.replace(layer, rope=Rope(layer.rope.theta)) for layer in c.layers)
        ),
    },
    "internlm2": {
        "dynamic NTK": lambda c: dataclasses.replace(
            c, layers=tuple(dataclasses.replace(layer, rope=Rope(layer.rope.theta)) for layer in c.layers)
        ),
        "q/k/v/o biases": lambda c: dataclasses.replace(
            c, attention=dataclasses.replace(c.attention, qkv_bias=False, out_bias=False)
        ),
    },
    "minicpm": {
        "scale_emb": lambda c: dataclasses.replace(c, embedding=dataclasses.replace(c.embedding, scale=None)),
        "scale_depth": lambda c: dataclasses.replace(
            c, residual=dataclasses.replace(c.residual, branch_scale=1.0)
        ),
        "dim_model_base": lambda c: dataclasses.replace(
            c, embedding=dataclasses.replace(c.embedding, logits_divisor=1.0)
        ),
    },
    "minicpm_moe": {
        "renormalised top-k": lambda c: dataclasses.replace(
            c, moe=dataclasses.replace(c.moe, normalize_top_k=False)
        ),
    },
}  # fmt: skip


@pytest.mark.parametrize(("name", "part"), [(n, p) for n, parts in OFF.items() for p in parts])
def test_each_special_part_bites(name: str, part: str, tmp_path) -> None:
    raw = CONFIGS[name]
    weights = random_checkpoint(raw, tmp_path)
    model = load_model(tmp_path)
    assert _max_error(raw, weights, model.config, model.checkpoint.load) < 1e-4
    assert _max_error(raw, weights, OFF[name][part](model.config), model.checkpoint.load) > 1e-3, part


def test_internlm2_wqkv_is_split_per_kv_group(tmp_path) -> None:
    """Reading the fused rows in GPT-2's (q, k, v) block order instead gives other logits: the
    grouped layout is what the reference follows."""
    from tcp_compiler.frontend.layout import FusedQkv, TensorMap

    raw = CONFIGS["internlm2"]
    weights = random_checkpoint(raw, tmp_path)
    model = load_model(tmp_path)
    rules = tuple(
        (p, dataclasses.replace(r, order="blocks") if isinstance(r, FusedQkv) else r)
        for p, r in model.config.tensors.rules
    )
    blocks = dataclasses.replace(model.config, tensors=TensorMap(rules))
    assert _max_error(raw, weights, blocks, model.checkpoint.load) > 1e-3


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (dict(CONFIGS["internlm2"], rope_scaling={"type": "yarn", "factor": 2.0}),
         "rope_scaling: type 'yarn' is not one InternLM2 has"),
        (dict(CONFIGS["minicpm_moe"], num_experts_per_tok=5),
         "num_experts_per_tok (5) exceeds num_experts (4)"),
        (dict(CONFIGS["minicpm"], scale_depth=0), "scale_depth: expected a number > 0"),
        (dict(CONFIGS["exaone"], layer_norm_epsilon=2.0),
         "layer_norm_epsilon: expected a number > 0 and < 1"),
        ({k: v for k, v in CONFIGS["exaone"].items() if k != "num_layers"}, "missing field 'num_layers'"),
    ],
)  # fmt: skip
def test_bad_remote_configs_are_one_line_errors(raw: dict, message: str) -> None:
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig(raw, "r.json"), "r")
    assert str(e.value).startswith("r.json: ") and message in str(e.value) and "\n" not in str(e.value)
