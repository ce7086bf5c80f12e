"""bf16, fp8 and w4: the bytes they cost and the rounding the interpreter emulates."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from tcp_compiler.errors import OptionError, TcpcError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision
from tcp_compiler.runtime.generate import generate
from tests.oracle.tiny_models import build, save

PROMPT = [5, 17, 3, 88, 42, 9]


@pytest.fixture(scope="module", params=["llama", "qwen3_moe"])
def tiny(request, tmp_path_factory):
    return load_model(save(build(request.param), tmp_path_factory.mktemp(request.param)))


def _run(model, prec):
    return generate(model.config, model.checkpoint.load, [PROMPT], prec, 2)


@pytest.mark.parametrize("name", ["bf16", "fp8", "w4"])
def test_lower_precision_rounds_but_stays_close(tiny, name: str) -> None:
    prec = precision(name, 8 if name == "w4" else None)
    exact = _run(tiny, PRECISIONS["f32"]).prefill_logits[0]
    low = _run(tiny, prec).prefill_logits[0]
    error = np.abs(low - exact).max() / np.abs(exact).max()
    assert 0 < error < {"bf16": 0.05, "fp8": 0.25, "w4": 0.35}[name], error
    assert np.corrcoef(low, exact)[0, 1] > {"bf16": 0.999, "fp8": 0.97, "w4": 0.95}[name]


def test_bound_values_lie_on_their_dtype_grid(tiny) -> None:
    built = build_prefill(tiny.config, precision("w4", 8), 1, 4)
    params = built.bind(tiny.checkpoint.load)
    q = params["model.layers.0.self_attn.q_proj.weight"]
    scale = params["model.layers.0.self_attn.q_proj.weight.scale"]
    assert built.graph["model.layers.0.self_attn.q_proj.weight"].type.dtype == ir.I4
    assert np.array_equal(q, np.rint(q)) and q.min() >= -8 and q.max() <= 7
    assert np.abs(q).max() == 7  # each group's largest weight maps to +-7 (symmetric scales)
    np.testing.assert_array_equal(ir.BF16.round(scale), scale)
    # Dequantised weights reproduce the checkpoint within half a quantisation step.
    w = tiny.checkpoint.load("model.layers.0.self_attn.q_proj.weight").reshape(-1, 8)
    deq = q.reshape(-1, 8) * scale.reshape(-1, 1)
    assert np.all(np.abs(deq - w) <= scale.reshape(-1, 1) / 2 + 1e-7)


def test_weight_bytes_follow_the_precision(tiny) -> None:
    def weight_bytes(name: str) -> int:
        built = build_decode(tiny.config, precision(name, 8 if name == "w4" else None), 1, 8)
        return sum(built.graph[n].type.nbytes for n in built.bindings if not n.startswith("rope"))

    params = sum(
        p.type.numel for p in build_prefill(tiny.config, PRECISIONS["bf16"], 1, 1).checkpoint_params()
    )
    assert weight_bytes("f32") == 4 * params
    assert weight_bytes("bf16") == 2 * params
    assert weight_bytes("fp8") < weight_bytes("bf16") < weight_bytes("f32")
    assert weight_bytes("w4") < weight_bytes("fp8")


def test_fp8_mode_feeds_fp8_operands_to_projection_einsums(tiny) -> None:
    graph = build_decode(tiny.config, PRECISIONS["fp8"], 1, 8).graph
    q = graph["l0.q"]
    assert [graph[o].type.dtype for o in q.operands] == [ir.FP8E4M3, ir.FP8E4M3]
    assert graph["l0.k_cache"].type.dtype == ir.BF16  # the KV cache stays bf16
    assert q.type.dtype == ir.F32  # accumulation


def test_group_size_that_does_not_tile_is_an_error(tiny) -> None:
    with pytest.raises(TcpcError, match="group size 7 does not tile its input axes D=32"):
        build_prefill(tiny.config, precision("w4", 7), 1, 2)
    with pytest.raises(OptionError, match="^group_size applies to integer weights"):
        precision("bf16", 16)
