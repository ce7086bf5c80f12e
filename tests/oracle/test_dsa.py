"""DeepSeek Sparse Attention (DeepSeek-V3.2 `deepseek_v32`, GLM-5 `glm_moe_dsa`) against transformers
5.23.0: tiny random-weight models whose index_topk (3) is shorter than the prompt (6), so the indexer's
choice decides what each query attends to; logits of prefill and 4 decode steps within 1e-4, greedy
tokens equal, 2 and 4 chips equal to 1, parameter counts equal. The selection bites: attending to
every key, or pairing the indexer's RoPE the other way, moves the logits far past the tolerance.
FLOPs: transformers' eager path attends densely and masks; tcpc attends to the picked keys only, so
the count is FlopCounterMode's with the dense attention (and kv_b_proj's expansion of every key)
swapped for the sparse form's einsums, each written out here."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import tcpc_params, transformers_params
from tests.oracle.test_families import PROMPT, STEPS, reference_logits

F32 = PRECISIONS["f32"]
TOPK = 3
# DeepSeek-V3's tiny sizes (tests/oracle/tiny_models.py) with an indexer of 8 heads of 8 dims (4 of
# them rotated); theta 100 so RoPE turns within the prompt.
SIZES = dict(
    vocab_size=97, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=4,
    max_position_embeddings=64, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
    v_head_dim=6, n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=24, n_shared_experts=2,
    n_group=4, topk_group=2, first_k_dense_replace=1, routed_scaling_factor=1.5, index_topk=TOPK,
    index_n_heads=8, index_head_dim=8, rope_parameters={"rope_type": "default", "rope_theta": 100.0},
)  # fmt: skip
# GLM-5: layers 1 and 3 reuse the picks of layers 0 and 2 (no indexer of their own)
MODELS = {
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM", dict(num_hidden_layers=3)),
    "glm_moe_dsa": (
        "GlmMoeDsaConfig",
        "GlmMoeDsaForCausalLM",
        dict(num_hidden_layers=4, indexer_types=["full", "shared", "full", "shared"]),
    ),
}


def _build(family: str) -> transformers.PreTrainedModel:
    """The tiny model with every weight random (norm scales near 1) and a random correction bias."""
    config_cls, model_cls, extra = MODELS[family]
    config = getattr(transformers, config_cls)(**{**SIZES, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.1 if "norm" in name else 0.3)
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.1)
    model.set_experts_implementation("eager")
    return model


@pytest.fixture(scope="module", params=sorted(MODELS))
def tiny(request, tmp_path_factory):
    model = _build(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory)
    return request.param, model, load_model(directory)


def _ours(config, loaded, chips: int = 1) -> tuple[list[np.ndarray], list[int]]:
    result = generate(config, loaded.checkpoint.load, [PROMPT], F32, STEPS, chips=chips)
    return [result.prefill_logits[0]] + [d[0] for d in result.decode_logits], result.token_matrix[0].tolist()


def test_prefill_and_decode_match_transformers(tiny) -> None:
    name, model, loaded = tiny
    assert loaded.config.family == name and loaded.config.dsa.topk == TOPK < len(PROMPT)
    ours, tokens = _ours(loaded.config, loaded)
    theirs = reference_logits(model, PROMPT, tokens[:STEPS])
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
        assert int(np.argmax(a)) == tokens[step]
    assert np.abs(theirs[0]).max() > 0.05


@pytest.mark.parametrize("change", ["every_key", "other_pairing"])
def test_the_selection_bites(tiny, change: str) -> None:
    """Attending to every key (top-k past the context), or rotating the indexer's RoPE in the
    other pairing, gives logits far from transformers': the test above would catch either."""
    name, model, loaded = tiny
    dsa = loaded.config.dsa
    changed = dataclasses.replace(dsa, topk=10_000) if change == "every_key" else (
        dataclasses.replace(dsa, interleave=not dsa.interleave))  # fmt: skip
    ours, tokens = _ours(dataclasses.replace(loaded.config, dsa=changed), loaded)
    theirs = reference_logits(model, PROMPT, tokens[:STEPS])
    assert max(np.abs(a - b).max() for a, b in zip(ours, theirs, strict=True)) > 1e-2, name


@pytest.mark.parametrize("chips", [2, 4])
def test_chips_compute_what_one_chip_computes(tiny, chips: int) -> None:
    name, _, loaded = tiny
    one, tokens = _ours(loaded.config, loaded)
    many, many_tokens = _ours(loaded.config, loaded, chips)
    assert many_tokens == tokens
    for a, b in zip(one, many, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=0, err_msg=name)


def test_batched_padded_prefill_matches_single_runs(tiny) -> None:
    name, _, loaded = tiny
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(
            batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5, err_msg=name
        )
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)


def test_parameter_count_equals_transformers(tiny) -> None:
    _, model, loaded = tiny
    assert tcpc_params(loaded.config) == transformers_params(model)


def _contraction_flops(graph: ir.Graph) -> int:
    """Einsum FLOPs without RoPE's rotations (element-wise in transformers)."""
    return sum(
        nc.cost.flops
        for nc in ir.analyze(graph).per_node
        if nc.node.kind in CONTRACTIONS and not nc.node.name.endswith(".rot")
    )


@pytest.mark.parametrize("seq", [1, 7])
def test_flops_are_transformers_with_attention_over_the_picked_keys(tiny, seq: int) -> None:
    _, model, loaded = tiny
    cfg = loaded.config
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    mla, H, n = cfg.mla, cfg.heads, len(cfg.layers)
    C, R, qk, v = mla.kv_lora_rank, mla.rope_dim, mla.nope_dim + mla.rope_dim, mla.v_dim
    picked = min(TOPK, seq)
    dense = 2 * seq * C * H * (mla.nope_dim + v) + 2 * H * seq * seq * (qk + v)  # kv_b on every key, QK, PV
    sparse = 2 * seq * H * mla.nope_dim * C + 2 * H * seq * picked * (C + R + C) + 2 * seq * H * C * v
    graph = build_prefill(cfg, F32, 1, seq).graph
    assert _contraction_flops(graph) == counter.get_total_flops() + n * (sparse - dense)
    attention = sum(nc.cost.flops for nc in ir.analyze(graph).per_node if nc.node.name == "l0.scores")
    assert attention == 2 * H * seq * picked * C


def test_decode_attends_to_index_topk_keys_of_a_long_context(tiny) -> None:
    """At a context of 1000 the attention's einsums read 3 latent rows per head (a gather of the
    picked rows), the indexer scores all 1001 keys, and the index keys join the cache."""
    name, _, loaded = tiny
    graph = build_decode(loaded.config, F32, 1, 1000).graph
    assert graph["l0.keys"].type.size("Sk") == TOPK
    assert graph["l0.index_scores"].type.size("Sk") == 1001
    assert graph["l0.index_cache"].type == ir.TensorType.of(ir.F32, B=1, P=1001, K=8)
    indexed = [i for i in range(len(loaded.config.layers)) if i not in loaded.config.dsa.shared]
    assert [o for o in graph.meta.kv_outputs if o.endswith("index_cache")] == [
        f"l{i}.index_cache" for i in indexed
    ]


BASE = {
    "model_type": "deepseek_v32",
    "num_hidden_layers": 4,
    **{k: v for k, v in SIZES.items() if k != "rope_parameters"},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"q_lora_rank": None}, "q_lora_rank: expected a rank"),
        ({"index_head_dim": 2}, "index_head_dim (2) is smaller than qk_rope_head_dim (4)"),
        ({"index_topk": 0}, "index_topk"),
        ({"layer_types": ["full_attention"] * 4}, "layer_types[0]: expected one of indexed_attention"),
        ({"mlp_layer_types": ["dense"] * 3}, "mlp_layer_types has 3 entries but num_hidden_layers is 4"),
        ({"model_type": "glm_moe_dsa", "indexer_types": ["shared", "full", "full", "full"]},
         "indexer_types[0]: expected 'full'"),
        ({"model_type": "glm_moe_dsa", "index_topk_pattern": "FSX"},
         "index_topk_pattern: expected letters F and S"),
        ({"model_type": "glm_moe_dsa", "indexer_types": ["full"]}, "indexer_types has 1 entries"),
    ],
)  # fmt: skip
def test_bad_fields_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        read_model_config(RawConfig({**BASE, **change}, "config.json"), "m")
    assert "\n" not in str(e.value) and "config.json" in str(e.value)


def test_glm_indexer_pattern_from_freq_and_offset_as_transformers_derives_it() -> None:
    """GLM-5.2's schedule (index_topk_freq 4, offset 3) and a pattern string, as GlmMoeDsaConfig
    lays them out; no indexer weights on the shared layers."""
    for fields in ({"index_topk_freq": 4, "index_skip_topk_offset": 3}, {"index_topk_pattern": "FFSF"}):
        config = transformers.GlmMoeDsaConfig(**{**SIZES, "num_hidden_layers": 4, **fields})
        cfg = read_model_config(RawConfig({**BASE, "model_type": "glm_moe_dsa", **fields}, "c.json"), "m")
        assert cfg.dsa.shared == {i for i, t in enumerate(config.indexer_types) if t == "shared"} != set()


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_online_softmax_in_query_tiles_equals_plain_attention(tiny, phase: str) -> None:
    """Each query's own picked keys are cut to the query tile with it (online_softmax's `rows`),
    so the tiled form computes what the plain one does."""
    from tcp_compiler.passes.online_softmax import find_attention, online_softmax

    _, _, loaded = tiny
    cfg, rng = loaded.config, np.random.default_rng(3)
    if phase == "prefill":
        built = build_prefill(cfg, F32, 2, 7, padded=True)
        feeds = {"ids": rng.integers(0, 97, (2, 7)), "lengths": np.array([7, 4])}
    else:
        built = build_decode(cfg, F32, 2, 9)
        feeds = {"ids": rng.integers(0, 97, (2, 1)), "pos": np.array([9, 4])}
        for name in built.graph.meta.kv_outputs:
            feeds[f"{name}_in"] = rng.standard_normal(built.graph[f"{name}_in"].type.shape).astype(np.float32)
    params = {n: b.make(loaded.checkpoint.load, 0) for n, b in built.bindings.items()}
    assert len(find_attention(built.graph)) == len(cfg.layers)
    plain = ir.interpret(built.graph, feeds, params)
    tiled = ir.interpret(online_softmax(built.graph, 2, rows=("Sq", 3)), feeds, params)
    for name in plain:
        np.testing.assert_allclose(tiled[name], plain[name], atol=1e-5, rtol=0, err_msg=name)
