"""DeepSeek-V3's latent attention beyond the transformers oracle (tests/oracle/test_families.py):
the KV cache is the latent plus one rope key per position, as capacity and the config floor count
it; the online-softmax rewrite takes both MLA forms (expanded prefill, absorbed decode) unchanged
in value; bad routing and attention fields are one-line errors naming the field."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ir
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.capacity import capacity
from simulator.targets.rngd.mapping.steps import resize_graph
from tcp_compiler.analysis.config_floor import kv_elements_per_token
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes.online_softmax import find_attention, online_softmax
from tests.oracle.tiny_models import DEEPSEEK

TINY = {
    **{k: v for k, v in DEEPSEEK.items() if k != "rope_parameters"},
    "model_type": "deepseek_v3", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 3, "num_attention_heads": 4,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 0.7, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 8},
}  # fmt: skip


def _tiny(**changes):
    return read_model_config(RawConfig({**TINY, **changes}, "tiny.json"), "tiny")


def test_the_cache_is_the_latent_and_one_rope_key_per_position() -> None:
    cfg = load_model("deepseek-v3").config
    graph = build_decode(cfg, PRECISIONS["bf16"], 1, 8, chips=16).graph
    assert graph.meta.kv_outputs[:2] == ("l0.latent_cache", "l0.rope_cache")
    assert graph["l0.latent_cache"].type == ir.TensorType.of(ir.BF16, B=1, P=9, C=512)
    assert graph["l0.rope_cache"].type == ir.TensorType.of(ir.BF16, B=1, P=9, K=64)
    one, two = (capacity(resize_graph(graph, graph.meta.kv_sizes(n)), (), load_hardware("rngd")).kv_cache
                for n in (1, 2))  # fmt: skip
    per_token = two - one  # every chip holds the whole latent cache
    assert per_token == 61 * (512 + 64) * 2 == len(cfg.layers) * kv_elements_per_token(cfg) * 2
    per_head_kv = 61 * 128 * (128 + 64 + 128) * 2  # K (nope + rope) and V of every head
    assert per_head_kv / per_token > 70


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_online_softmax_equals_plain_attention(phase: str) -> None:
    rng = np.random.default_rng(3)
    cfg = _tiny()
    if phase == "prefill":
        built = build_prefill(cfg, PRECISIONS["f32"], 2, 12, padded=True)
        feeds = {"ids": rng.integers(0, 64, (2, 12)), "lengths": np.array([12, 5])}
    else:
        built = build_decode(cfg, PRECISIONS["f32"], 2, 11)
        feeds = {"ids": rng.integers(0, 64, (2, 1)), "pos": np.array([11, 3])}
        for name in built.graph.meta.kv_outputs:
            t = built.graph[f"{name}_in"].type
            feeds[f"{name}_in"] = rng.standard_normal(t.shape).astype(np.float32)
    params = {p.name: (0.3 * rng.standard_normal(p.type.shape)).astype(np.float32)
              for p in built.graph.of_kind("param")}  # fmt: skip
    params.update({n: b.make(None, 0) for n, b in built.bindings.items() if not b.sources})
    assert len(find_attention(built.graph)) == len(cfg.layers)
    plain = ir.interpret(built.graph, feeds, params)
    blocked = ir.interpret(online_softmax(built.graph, 4), feeds, params)
    for name in plain:
        np.testing.assert_allclose(blocked[name], plain[name], atol=1e-5, rtol=0, err_msg=name)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_group": 3}, "n_group (3) must split n_routed_experts (8)"),
        ({"topk_group": 5}, "topk_group (5) exceeds n_group (4)"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok (5) exceeds the 4 experts"),
        ({"attention_bias": True}, "attention_bias: true is not supported"),
        ({"scoring_func": "softmax"}, "scoring_func: expected 'sigmoid', got 'softmax'"),
        ({"qk_rope_head_dim": 5}, "qk_rope_head_dim must be even"),
        ({"kv_lora_rank": None}, "missing field 'kv_lora_rank'"),
    ],
)
def test_bad_fields_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        _tiny(**change)
    assert "\n" not in str(e.value)


def test_a_shared_expert_that_does_not_split_over_the_chips_is_padded() -> None:
    qwen = {"model_type": "qwen2_moe", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 42}  # fmt: skip
    cfg = read_model_config(RawConfig(qwen, "qwen.json"), "qwen")
    graph = build_prefill(cfg, PRECISIONS["f32"], 1, 4, chips=4).graph  # 42 / 4: 11 columns per chip
    assert graph["model.layers.0.mlp.shared_expert.down_proj.weight"].type.size("F") == 11
