"""Pipeline parallelism computes what one chip computes: TP x PP logits equal one chip's.

The layers split into stages (tcp_compiler.frontend.stages), each stage's graph runs SPMD over its
tensor-parallel ranks, and the hidden state passes from stage to stage. One chip's logits are
themselves checked against transformers (tests/oracle/test_families.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import Model, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.runtime.generate import Generation, generate
from tests.oracle.tiny_models import build, save

# plain, windows + tied embeddings (the last stage needs the table), MoE, parallel block, ALiBi
FAMILIES = ["llama", "gemma3", "qwen3_moe", "gpt_neox", "bloom"]
SPLITS = [(1, 2), (1, 3), (2, 2), (2, 3)]  # (tp, pp): the tiny models have 3 layers
PROMPTS = [[5, 17, 3, 88, 42, 9], [7, 1, 60]]  # right-padded batch
STEPS = 3


def _generate(model: Model, tp: int, pp: int, precision: str = "f32") -> Generation:
    prec = PRECISIONS[precision]
    return generate(model.config, model.checkpoint.load, PROMPTS, prec, STEPS, chips=tp, pp=pp)


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory) -> tuple[str, Model, Generation]:
    model = load_model(save(build(request.param, vocab_size=96), tmp_path_factory.mktemp(request.param)))
    return request.param, model, _generate(model, 1, 1)


@pytest.mark.parametrize(("tp", "pp"), SPLITS)
def test_tp_x_pp_logits_equal_one_chip(tiny, tp: int, pp: int) -> None:
    name, model, one = tiny
    split = _generate(model, tp, pp)
    what = f"{name} tp {tp} x pp {pp}"
    # Pipeline stages alone change no arithmetic; tensor parallelism reorders sums (f32 rounding).
    atol = 0 if tp == 1 else 1e-5
    np.testing.assert_allclose(split.prefill_logits, one.prefill_logits, atol=atol, rtol=0, err_msg=what)
    for step, (x, y) in enumerate(zip(split.decode_logits, one.decode_logits, strict=True)):
        np.testing.assert_allclose(x, y, atol=atol, rtol=0, err_msg=f"{what} decode {step}")
    assert split.token_matrix.tolist() == one.token_matrix.tolist(), what
    assert np.abs(one.prefill_logits).max() > 0.05, "logits too small to tell a bug from noise"


def test_bf16_stages_send_bf16_and_stay_close(tmp_path) -> None:
    """In bf16 the hidden state crosses stages in bf16 (as the all-reduces do): close, not equal."""
    model = load_model(save(build("llama", vocab_size=96), tmp_path))
    one, split = _generate(model, 1, 1, "bf16"), _generate(model, 1, 3, "bf16")
    scale = np.abs(one.prefill_logits).max()
    np.testing.assert_allclose(split.prefill_logits, one.prefill_logits, atol=0.05 * scale, rtol=0)
    stage = pipeline_stages(model.config, 3)[1]
    graph = build_decode(model.config, PRECISIONS["bf16"], 1, 4, stage=stage).graph
    assert graph["hidden"].type.dtype.name == "bf16" and graph["hidden.sent"].kind == "send"


def test_each_stage_holds_only_its_layers(tmp_path) -> None:
    model = load_model(save(build("llama", vocab_size=96), tmp_path))
    cfg = model.config
    stages = pipeline_stages(cfg, 2)
    graphs = [build_prefill(cfg, PRECISIONS["f32"], 1, 6, stage=s).graph for s in stages]
    first, last = graphs
    assert "ids" in first and "ids" not in last and "hidden" in last and "hidden" not in first
    assert "logits" in last.outputs and "logits" not in first.outputs
    assert first.outputs[0] == "hidden.sent"
    for s, g in zip(stages, graphs, strict=True):
        layers = {g.meta.layers[n] for n in g.meta.kv_outputs}
        assert layers == set(s.layers)
        params = {n.name for n in g.of_kind("param") if n.name.startswith("model.layers.")}
        assert {int(p.split(".")[2]) for p in params} == set(s.layers)


def test_a_sequence_parallel_stage_sends_only_its_own_tokens(tmp_path) -> None:
    """With the residual stream split by tokens over a stage's tensor-parallel ranks, each rank
    sends its S / tp tokens to its peer in the next stage (1/tp of the bytes); without the split,
    every token. The logits are one chip's either way (test_tp_x_pp_logits_equal_one_chip)."""
    model = load_model(save(build("llama", vocab_size=96), tmp_path))
    stages = pipeline_stages(model.config, 2)
    for split, tokens in ((True, 3), (False, 6)):
        first, last = (build_prefill(model.config, PRECISIONS["f32"], 2, 6, chips=2, stage=s,
                                     sequence_parallel=split).graph for s in stages)  # fmt: skip
        assert first["hidden.sent"].type.size("S") == tokens
        assert last["hidden"].type.size("S") == tokens
