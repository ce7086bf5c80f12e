"""Zamba2 (issue 29) against transformers 5.23.0's Zamba2ForCausalLM (slow torch path, eager
attention) on tiny random-weight models: Mamba-2 layers, three of five running a shared
transformer block, two blocks used in turn (uses 0 and 2 run block 0, use 1 block 1).

- prefill plus 4 decode steps within 1e-4 of transformers decoding from its own cache, greedy
  tokens equal; decode from the carried caches (K and V of each shared-block use, the Mamba state
  and window of every layer) equals the full recompute;
- parameter counts equal transformers' own (the shared blocks once), tiny and bundled; the graph
  binds each shared weight once and every use reads it;
- matmul FLOPs: our einsums equal FlopCounterMode's `aten.mm` and `aten.addmm` (with biases) plus the
  attention modules' `aten.bmm`;
- 2 chips equal 1.

Each special part bites (transformers' logits move past the tolerance when it is switched off on
the same weights): the sharing (the third use running a copy of block 0 with its o_proj
changed), the adapters on q, k, v and on the MLP, the embeddings joined to the block's input,
the mem RoPE, and the prefill's dt floor.
"""

from __future__ import annotations

import copy
from functools import partial

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from tcp_compiler.analysis.config_floor import matmul_weights
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.runtime.generate import generate
from tests.oracle.decode_match import assert_prefill_and_decode_match
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params
from tests.oracle.test_families import _einsum_flops
from tests.oracle.test_hybrid_families import reference_logits

F32 = PRECISIONS["f32"]
PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
TINY = dict(
    vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=5, num_attention_heads=4,
    layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"], n_mamba_heads=8, mamba_ngroups=2,
    mamba_d_state=6, chunk_size=4, adapter_rank=3, num_mem_blocks=2, use_shared_attention_adapter=True,
    use_mem_rope=True, time_step_min=0.6,
)  # fmt: skip
VARIANTS = {
    "adapters-rope": {},
    # GQA, no attention adapters, no RoPE, one block for every use, biases, silu MLP
    "gqa-plain": dict(num_key_value_heads=2, use_shared_attention_adapter=False, use_mem_rope=False,
                      num_mem_blocks=1, add_bias_linear=True, hidden_act="silu"),
}  # fmt: skip
NO_FLOOR = dict(time_step_min=1e-6)  # a dt floor that never bites (transformers' init takes its log)


def build(seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config = transformers.Zamba2Config(**{**TINY, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.Zamba2ForCausalLM(config).eval()
    with torch.no_grad():  # norm weights around 1, the rest (A_log, D, dt_bias, conv too) random
        for n, p in model.named_parameters():
            centre = 1.0 if n.endswith(("norm.weight", "layernorm.weight")) else 0.0
            p.copy_(0.1 * torch.randn_like(p) + centre)
    return model


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request, tmp_path_factory):
    model = build(**VARIANTS[request.param])
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory)
    return request.param, model, load_model(directory)


def test_prefill_and_decode_match_transformers(variant) -> None:
    name, model, loaded = variant
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, STEPS, name)


def test_decode_from_the_carried_caches_equals_the_full_recompute(variant, tmp_path) -> None:
    """Without the dt floor, which transformers applies in the chunked prefill scan only."""
    name, _, _ = variant
    build(**VARIANTS[name], **NO_FLOOR).save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"{name} step {step}")  # fmt: skip


def _prompt_logits(model) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([PROMPT]), use_cache=False).logits[0].numpy()


def _unshare_third_use(model) -> None:
    """Layer 4 (use 2) runs its own copy of block 0 with o_proj changed, the first use keeping it."""
    layer = model.model.layers[4]
    layer.shared_transformer = copy.deepcopy(layer.shared_transformer)
    with torch.no_grad():
        layer.shared_transformer.self_attn.o_proj.weight.add_(0.1)


BLOCK0, BLOCK1 = "model.layers.1.shared_transformer", "model.layers.3.shared_transformer"
SWITCHED_OFF = {
    "sharing": ({}, _unshare_third_use),
    "q adapter": ({}, f"{BLOCK0}.self_attn.linear_q_adapter_list.0.1.weight"),
    "k adapter": ({}, f"{BLOCK0}.self_attn.linear_k_adapter_list.2.1.weight"),
    "v adapter": ({}, f"{BLOCK0}.self_attn.linear_v_adapter_list.0.1.weight"),
    "mlp adapter": ({}, f"{BLOCK1}.feed_forward.gate_up_proj_adapter_list.1.1.weight"),
    "mem rope": (dict(use_mem_rope=False), None),
    "dt floor": (NO_FLOOR, None),
    "embeddings joined": ({}, "embeddings"),
}


@pytest.mark.parametrize("part", sorted(SWITCHED_OFF))
def test_the_special_parts_bite(part: str) -> None:
    """Each part switched off on the same weights moves transformers' prompt logits past the
    tolerance, so matching them within 1e-4 checks it."""
    overrides, change = SWITCHED_OFF[part]
    off = build(**overrides)
    with torch.no_grad():
        if callable(change):
            change(off)
        elif change == "embeddings":  # the embedding half of each block's input norm zeroed
            for block in (BLOCK0, BLOCK1):
                off.get_parameter(f"{block}.input_layernorm.weight")[TINY["hidden_size"] :] = 0.0
        elif change is not None:
            off.get_parameter(change).zero_()
    assert np.abs(_prompt_logits(build()) - _prompt_logits(off)).max() > 1e-3


def test_shared_weights_are_bound_once_and_read_by_every_use(variant) -> None:
    """One param per shared weight; q_proj of block 0 feeds the einsums of layers 1 and 4 (uses 0
    and 2) in the adapters-rope model, and every hybrid layer's in the one-block model."""
    name, _, loaded = variant
    graph = build_prefill(loaded.config, F32, 1, 4).graph
    q = graph[f"{BLOCK0}.self_attn.q_proj.weight"]
    readers = sorted(graph.meta.layers[n.name] for n in graph.nodes if q.name in n.operands)
    assert readers == ([1, 4] if name == "adapters-rope" else [1, 3, 4])
    assert not any("layers.4.shared_transformer" in n.name for n in graph.nodes if n.kind == "param")


def test_each_hybrid_layer_caches_keys_values_and_its_state(variant) -> None:
    _, _, loaded = variant
    cfg = loaded.config
    for past in (8, 80):
        graph = build_decode(cfg, F32, 2, past).graph
        for i, layer in enumerate(cfg.layers):
            mine = sorted(o.split(".", 1)[1] for o in graph.meta.kv_outputs if o.startswith(f"l{i}."))
            kinds = ["conv_window", "ssm_state"]
            assert mine == (sorted(["k_cache", "v_cache", *kinds]) if layer.shared is not None else kinds)


def test_tiny_parameter_count_equals_transformers(variant) -> None:
    _, model, loaded = variant
    assert tcpc_params(loaded.config) == transformers_params(model)


def test_bundled_parameter_count_equals_transformers() -> None:
    model = bundled_on_meta("zamba2-2.7b", "Zamba2Config", "Zamba2ForCausalLM")
    assert tcpc_params(load_model("zamba2-2.7b").config) == transformers_params(model) == 2_662_214_560


@pytest.mark.parametrize("seq", [1, 7])
def test_matmul_flops_equal_flop_counter(variant, seq) -> None:
    _, model, loaded = variant
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    counts = counter.get_flop_counts()
    mm = sum(v for op, v in counts["Global"].items() if str(op) in ("aten.mm", "aten.addmm"))  # addmm: biases
    attention = sum(
        v for module, ops in counts.items() if module.endswith(".self_attn")
        for op, v in ops.items() if str(op) == "aten.bmm"
    )  # fmt: skip
    assert attention > 0
    assert _einsum_flops(build_prefill(loaded.config, F32, 1, seq).graph) == mm + attention


def test_two_chips_equal_one(variant) -> None:
    """Heads and Mamba groups split; an all-reduce after each Mamba mixer and after each shared
    block's attention and MLP (the adapters' A and the per-layer linear are whole on every chip)."""
    name, _, loaded = variant
    graph = build_decode(loaded.config, F32, 1, 4, chips=2).graph
    assert len(graph.of_kind("all_reduce")) == 5 + 2 * 3  # the vocab (97) does not split
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=2)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_key_value_heads=2, use_shared_attention_adapter=True),
         "num_key_value_heads \\(2\\) must equal num_attention_heads \\(4\\)"),
        (dict(num_hidden_layers=4), "layers_block_type has 5 entries but num_hidden_layers is 4"),
        (dict(layers_block_type=["mamba", "attention", "mamba", "hybrid", "hybrid"]),
         "layers_block_type\\[1\\]: expected one of mamba, linear_attention, hybrid, got 'attention'"),
        (dict(num_attention_heads=5), "must be a multiple of num_attention_heads \\(5\\)"),
        (dict(num_mem_blocks=0), "num_mem_blocks"),
        (dict(adapter_rank=-1), "adapter_rank"),
    ],
)  # fmt: skip
def test_bad_configs_are_refused_in_one_line(overrides: dict, message: str) -> None:
    data = {"model_type": "zamba2", **TINY, **overrides}
    with pytest.raises(FrontendError, match=message) as e:
        read_model_config(RawConfig(data, "config.json"), "bad")
    assert "\n" not in str(e.value)


def test_the_config_floor_multiplies_by_each_use_and_reads_once(variant) -> None:
    """The floor's per-token weights count a shared block at every use (a one-token prefill's
    einsums: projections, the head and one key per attending use), its weight reads once."""
    _, model, loaded = variant
    cfg = loaded.config
    per_token, read = matmul_weights(cfg)
    attending = sum(layer.attends for layer in cfg.layers)
    head = 2 * cfg.vocab * cfg.hidden
    attention = attending * 4 * cfg.heads * cfg.head_dim
    assert _einsum_flops(build_prefill(cfg, F32, 1, 1).graph) == 2 * per_token + head + attention
    once = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)
    assert read == once < per_token


def test_a_later_pipeline_stage_is_refused_in_one_line(variant) -> None:
    """A stage after the first has no embeddings for its shared blocks to read (not sent yet)."""
    _, _, loaded = variant
    first, second = pipeline_stages(loaded.config, 2)
    assert build_prefill(loaded.config, F32, 1, 4, stage=first).graph.outputs
    with pytest.raises(FrontendError, match="shared blocks read the embeddings: no pipeline stages yet"):
        build_prefill(loaded.config, F32, 1, 4, stage=second)


def test_batched_padded_prefill_matches_single_runs(variant) -> None:
    """Right-padded prompts of 6, 3 and 5 tokens: each row's logits and decode steps are its own
    run's (the shared blocks' attention masks the padding, the Mamba layers leave their state)."""
    name, _, loaded = variant
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5,
                                   err_msg=name)  # fmt: skip
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)


@pytest.mark.parametrize("fields", [{}, dict(use_long_context=True, num_key_value_heads=8, num_mem_blocks=3)])
def test_class_defaults_are_transformers(fields: dict) -> None:
    """A config of (almost) nothing is transformers' Zamba2Config(): the same parameters, layer
    pattern, derived widths and (with use_long_context) context."""
    cfg = read_model_config(RawConfig({"model_type": "zamba2", **fields}, "config.json"), "defaults")
    config = transformers.Zamba2Config(**fields)
    with torch.device("meta"):
        model = transformers.Zamba2ForCausalLM(config)
    assert tcpc_params(cfg) == transformers_params(model)
    assert [i for i, layer in enumerate(cfg.layers) if layer.shared is not None] == config.hybrid_layer_ids
    assert (cfg.head_dim, cfg.intermediate, cfg.kv_heads) == (
        config.attention_head_dim, config.intermediate_size, config.num_key_value_heads
    )
    assert (cfg.ssm.head_dim, cfg.max_positions, cfg.embedding.tied) == (
        config.mamba_headdim, config.max_position_embeddings, config.tie_word_embeddings
    )
