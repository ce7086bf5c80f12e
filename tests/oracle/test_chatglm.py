"""ChatGLM (`model_type: chatglm`, remote code) against the numpy reference of THUDM's published
modeling_chatglm.py (tests/oracle/chatglm_reference.py cites the file and commit): logits of a
prefill and 4 greedy decode steps within 1e-4, the same tokens, matrix-product FLOPs equal to the
reference's, a padded batch equal to each prompt alone, 2 and 4 chips equal to one, and parameter
counts equal to the shapes its modules build, on tiny random checkpoints in its own tensor names
and on the bundled ChatGLM3-6B config; each part made to bite; bad configs refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.chatglm_reference import (
    VARIANTS,
    greedy,
    parameter_shapes,
    prefill_flops,
    random_checkpoint,
)
from tests.oracle.param_counts import tcpc_params
from tests.oracle.test_families import _einsum_flops

PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
F32 = PRECISIONS["f32"]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request, tmp_path_factory):
    config = VARIANTS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    weights = random_checkpoint(config, directory)
    return request.param, config, weights, load_model(directory)


def _ours(model, chips: int = 1):
    return generate(model.config, model.checkpoint.load, [PROMPT], F32, STEPS, chips=chips)


def test_prefill_and_decode_match_the_reference(tiny) -> None:
    name, config, weights, model = tiny
    result = _ours(model)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs, tokens = greedy(config, weights, PROMPT, STEPS)
    assert result.token_matrix[0].tolist() == tokens
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"


def test_batched_padded_prefill_matches_single_runs(tiny) -> None:
    name, _, _, model = tiny
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(model.config, model.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(model.config, model.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(
            batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5, err_msg=name
        )
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)
        assert batched.token_matrix[b].tolist() == single.token_matrix[0].tolist()


@pytest.mark.parametrize("seq", [1, 7])
def test_einsum_flops_equal_the_references(tiny, seq: int) -> None:
    _, config, weights, model = tiny
    assert _einsum_flops(build_prefill(model.config, F32, 1, seq).graph) == prefill_flops(
        config, weights, seq
    )


@pytest.mark.parametrize("chips", [2, 4])
def test_sharded_generation_matches_one_chip(tiny, chips: int) -> None:
    name, _, _, model = tiny
    one, many = _ours(model), _ours(model, chips)
    np.testing.assert_allclose(many.prefill_logits, one.prefill_logits, atol=1e-5, rtol=0, err_msg=name)
    for a, b in zip(many.decode_logits, one.decode_logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=name)
    assert many.token_matrix.tolist() == one.token_matrix.tolist()


def test_tiny_parameter_count_equals_the_modules(tiny) -> None:
    _, config, _, model = tiny
    assert tcpc_params(model.config) == sum(int(np.prod(s)) for s in parameter_shapes(config).values())


# GLM-4-9B-chat's remote-code config.json (THUDM/glm-4-9b-chat, from memory of the published file):
# the model bundled in transformers' form as glm-4-9b-chat-hf
GLM4_9B_CHAT = dict(
    model_type="chatglm",
    architectures=["ChatGLMModel"],
    add_bias_linear=False,
    add_qkv_bias=True,
    apply_residual_connection_post_layernorm=False,
    ffn_hidden_size=13696,
    hidden_size=4096,
    kv_channels=128,
    layernorm_epsilon=1.5625e-07,
    multi_query_attention=True,
    multi_query_group_num=2,
    num_attention_heads=32,
    num_layers=40,
    original_rope=True,
    padded_vocab_size=151552,
    post_layer_norm=True,
    rmsnorm=True,
    rope_ratio=500,
    seq_length=131072,
    torch_dtype="bfloat16",
)


def test_glm_4_9b_chat_reads_as_its_transformers_form(tmp_path) -> None:
    """The remote-code config and transformers' GlmForCausalLM form of GLM-4-9B-chat are one model:
    the same sizes, RoPE (base 10000 x rope_ratio 500 = rope_theta 5e6, on interleaved pairs of half
    of each head) and parameter count."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GLM4_9B_CHAT))
    remote, hf = load_model(path).config, load_model("glm-4-9b-chat-hf").config
    for field in (
        "vocab",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "intermediate",
        "positions",
        "attention",
    ):
        assert getattr(remote, field) == getattr(hf, field), field
    assert [layer.rope for layer in remote.layers] == [layer.rope for layer in hf.layers]
    assert remote.norms.eps == hf.norms.eps and remote.max_positions == hf.max_positions
    published = sum(int(np.prod(s)) for s in parameter_shapes(GLM4_9B_CHAT).values())
    assert tcpc_params(remote) == tcpc_params(hf) == published


def test_bundled_parameter_count_equals_the_modules() -> None:
    config = json.loads((BUNDLED / "chatglm3-6b.json").read_text())
    expected = sum(int(np.prod(s)) for s in parameter_shapes({**config, "add_bias_linear": False}).values())
    assert tcpc_params(load_model("chatglm3-6b").config) == expected


# (variant, group, field, value in tcpc's config): each part the variant has, switched the other way
SWITCHES = [
    ("chatglm", "positions", "interleave", False),  # rotate-half pairs, not (x0, x1), (x2, x3), ...
    ("chatglm", "positions", "rotary_dim", None),  # RoPE on the whole head, not its first half
    ("chatglm", "attention", "qkv_bias", False),
    ("chatglm", "residual", "from_norm", True),
    ("chatglm", "norms", "final", False),
    ("chatglm_switches", "attention", "qkv_bias", False),
    ("chatglm_switches", "attention", "out_bias", False),
    ("chatglm_switches", "mlp", "bias", False),
    ("chatglm_switches", "residual", "from_norm", False),
    ("chatglm_switches", "norms", "kind", "rms"),
]


@pytest.mark.parametrize(("variant", "group", "field", "value"), SWITCHES)
def test_each_part_moves_the_logits(variant: str, group: str, field: str, value, tmp_path) -> None:
    """Each part ChatGLM has, switched the other way, moves the logits past the tolerance, so the
    comparison above checks it."""
    config = VARIANTS[variant]
    weights = random_checkpoint(config, tmp_path)
    cfg = load_model(tmp_path).config
    assert getattr(getattr(cfg, group), field) != value
    changed = dataclasses.replace(cfg, **{group: dataclasses.replace(getattr(cfg, group), **{field: value})})
    result = generate(changed, load_model(tmp_path).checkpoint.load, [PROMPT], F32, 0)
    theirs, _ = greedy(config, weights, PROMPT, 0)
    assert np.abs(result.prefill_logits[0] - theirs[0]).max() > 1e-3, (variant, group, field)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"position_encoding_2d": True},
            "the first ChatGLM-6B (position_encoding_2d, inner_hidden_size) is not supported",
        ),
        ({"pre_seq_len": 128}, "pre_seq_len: P-tuning prefixes are not supported; expected null"),
        ({"kv_channels": 18}, "kv_channels: expected a multiple of 4"),
        (
            {"multi_query_group_num": 3},
            "num_attention_heads (32) must be a multiple of multi_query_group_num (3)",
        ),
        ({"rope_ratio": -1}, "rope_ratio: expected a number > 0"),
        ({"padded_vocab_size": "65024"}, "padded_vocab_size: expected an integer"),
        ({"seq_length": 0}, "seq_length: expected an integer from 1"),
        ({"rmsnorm": "yes"}, "rmsnorm: expected true or false"),
    ],
)
def test_bad_chatglm_configs_are_one_line_errors(change: dict, message: str, tmp_path) -> None:
    config = {**json.loads((BUNDLED / "chatglm3-6b.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(FrontendError) as error:
        load_model(path)
    assert message in str(error.value) and "\n" not in str(error.value)
