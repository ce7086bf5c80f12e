"""Every supported family against transformers: logits of prefill and 4 decode steps within 1e-4,
batched prefill with padding equal to per-sequence runs, and einsum FLOPs equal to FlopCounterMode.

These are live oracle tests: transformers and torch are test dependencies, and a missing one fails
the run instead of skipping it. ALiBi Falcon (`falcon_alibi`) is checked against transformers' SDPA
path, which adds the ALiBi bias once as the original model does; its eager path adds it twice
(tests/oracle/test_family_extensions.py shows the two differ). Its FLOPs are counted on the eager path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.remote_code import SHAPES as REMOTE_SHAPES
from tests.oracle.tiny_models import (
    DENSE,
    DENSE_EXPERTS,
    FAMILIES,
    MOE,
    REMOTE,
    SDPA,
    build,
    model_type,
    save,
)

PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
F32 = PRECISIONS["f32"]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    model = build(request.param)
    directory = save(model, tmp_path_factory.mktemp(request.param))
    return request.param, model, directory


def reference_logits(model, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """transformers' last-position logits for the prompt, then one per fed token, with its KV cache."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits = [out.logits[0, -1].numpy()]
        past = out.past_key_values
        for t in tokens:
            out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits.append(out.logits[0, -1].numpy())
    return logits


def test_prefill_and_decode_match_transformers(family) -> None:
    name, model, directory = family
    loaded = load_model(directory)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    tokens = result.token_matrix[0].tolist()
    assert len(ours) == STEPS + 1 and len(tokens) == STEPS + 1
    theirs = reference_logits(model, PROMPT, tokens[:STEPS])
    assert model.config._attn_implementation == ("sdpa" if name in SDPA else "eager")
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
        assert int(np.argmax(a)) == tokens[step]
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"


def test_batched_padded_prefill_matches_single_runs(family) -> None:
    name, _, directory = family
    loaded = load_model(directory)
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(
            batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5, err_msg=name
        )
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)
        assert batched.token_matrix[b].tolist() == single.token_matrix[0].tolist()


def _einsum_flops(graph: ir.Graph, exclude_rope: bool = True) -> int:
    """Contraction FLOPs (einsums and MoE's grouped einsums); RoPE's rotation is an einsum here
    (seed 001) but element-wise in transformers."""
    cost = ir.analyze(graph)
    return sum(
        nc.cost.flops
        for nc in cost.per_node
        if nc.node.kind in CONTRACTIONS and not (exclude_rope and nc.node.name.endswith(".rot"))
    )


def _hf_flops(model, seq: int) -> int:
    """FLOPs of transformers' eager attention path (a family checked against SDPA switches to eager
    for the count and back; Falcon reads the choice from its config at each forward)."""
    chosen = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    finally:
        model.config._attn_implementation = chosen
    return counter.get_total_flops()


def _unrouted_expert_flops(name: str, cfg, seq: int) -> int:
    """What transformers spends on experts a token is not routed to: Llama 4's experts run every
    token through every expert (the unrouted ones on zero rows, so they add nothing), with no
    experts implementation that routes; tcpc runs each token's top-k only."""
    if name not in DENSE_EXPERTS:
        return 0
    moe_layers = sum(layer.moe for layer in cfg.layers)
    return moe_layers * (cfg.moe.experts - cfg.moe.top_k) * seq * 3 * 2 * cfg.hidden * cfg.moe.intermediate


@pytest.mark.parametrize("seq", [1, 7])
def test_einsum_flops_equal_flop_counter(family, seq) -> None:
    name, model, directory = family
    if name in MOE:
        model.set_experts_implementation("eager")
    cfg = load_model(directory).config
    graph = build_prefill(cfg, F32, 1, seq).graph
    assert _einsum_flops(graph) == _hf_flops(model, seq) - _unrouted_expert_flops(name, cfg, seq), name
    rope = _einsum_flops(graph, exclude_rope=False) - _einsum_flops(graph)
    rotated = sum(layer.rope is not None for layer in cfg.layers)  # SmolLM3 leaves some out
    keys = 1 if cfg.mla is not None else cfg.kv_heads  # MLA rotates one key all heads share
    assert rope == rotated * 2 * seq * (cfg.heads + keys) * cfg.rotary * 2


@pytest.mark.parametrize("name", MOE)
def test_moe_expert_flops_are_tokens_times_top_k_experts(name, tmp_path) -> None:
    cfg = load_model(save(build(name), tmp_path)).config
    batch, seq = 2, 5
    graph = build_prefill(cfg, F32, batch, seq).graph
    experts = sum(
        nc.cost.flops
        for nc in ir.analyze(graph).per_node
        if nc.node.name.split(".")[-1].startswith("expert_") and nc.node.kind in CONTRACTIONS
    )
    per_expert = 3 * 2 * cfg.hidden * cfg.moe.intermediate
    moe_layers = sum(layer.moe for layer in cfg.layers)  # Qwen2-MoE and DeepSeek keep dense layers
    assert experts == moe_layers * batch * seq * cfg.moe.top_k * per_expert


def test_dense_and_moe_lists_cover_every_family() -> None:
    assert sorted(DENSE + MOE) == sorted(FAMILIES)
    from tcp_compiler.frontend.families import FAMILIES as SUPPORTED

    # tcpc_decoder has no transformers model: tests/test_variants.py checks it against numpy;
    # chatglm and deepseek (V1) (remote code) are checked against numpy references in
    # tests/oracle/test_chatglm.py and tests/oracle/test_deepseek_v1.py, the other remote-code
    # families in tests/oracle/test_remote_families.py and (REMOTE)
    # tests/oracle/test_remote_mimo_nas_phi3small.py; gemma3 and llama4 are the
    # multimodal configs, whose text_config the tiny text models are; the state-space families
    # the attention / Mamba hybrids and the linear-attention families (qwen3_next, rwkv) have oracle
    # tests of their own (tests/oracle/test_ssm_families.py, tests/oracle/test_hybrid_families.py,
    # tests/oracle/test_linear_families.py); zamba2, rwkv5, rwkv6 and the Qwen3.5 families in files
    # of their own (tests/oracle/test_zamba2.py, test_rwkv5.py, test_rwkv6.py, test_qwen3_5.py);
    # deepseek_v32 and glm_moe_dsa, whose sparse attention costs what it reads, not transformers'
    # masked dense attention, in tests/oracle/test_dsa.py.
    from tests.oracle.test_hybrid_families import HYBRID
    from tests.oracle.test_ssm_families import SSM

    hybrids = {name.split("-")[0] for name in HYBRID}  # granitemoehybrid-dense is granitemoehybrid
    others = {"gemma3", "llama4", "tcpc_decoder", "chatglm", "deepseek", *SSM, *hybrids}
    others |= {"qwen3_next", "rwkv", "rwkv5", "rwkv6", "zamba2", *REMOTE_SHAPES, *REMOTE}
    others |= {"qwen3_vl", "qwen3_vl_moe", "kimi_k25"}  # image-text: tests/oracle/test_vl_families.py
    others |= {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
    others |= {"deepseek_v32", "glm_moe_dsa"}
    assert set(SUPPORTED) == {model_type(f) for f in FAMILIES} | others


def test_tcpc_run_writes_the_logits_transformers_computes(tmp_path: Path) -> None:
    from tcp_compiler.cli import main

    model = build("llama", seed=3)
    directory = save(model, tmp_path / "ckpt")
    out = tmp_path / "logits.npz"
    assert (
        main(
            ["run", str(directory), "--prompt-ids", "1,2,3", "--decode-steps", "3", "--logits-out", str(out)]
        )
        == 0
    )
    saved = np.load(out)
    assert sorted(saved.files) == ["decode_0", "decode_1", "decode_2", "prefill", "tokens"]
    assert saved["prefill"].shape == (97,) and saved["tokens"].shape == (4,)
    theirs = reference_logits(model, [1, 2, 3], saved["tokens"][:3].tolist())
    ours = [saved["prefill"]] + [saved[f"decode_{k}"] for k in range(3)]
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)


def test_checkpoint_saved_from_the_bare_base_model_loads(tmp_path: Path) -> None:
    """GPT-2's hub files hold `h.0.attn.c_attn.weight`, not `transformer.h.0...`: the base model
    alone was saved. Names resolve without the base-model prefix, and the tied head still works."""
    from safetensors import safe_open

    model = build("gpt2", seed=5)
    model.transformer.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "np") as f:
        names = list(f.keys())  # noqa: SIM118 (safe_open is not a dict)
    assert "h.0.attn.c_attn.weight" in names and not any(k.startswith("transformer.") for k in names)
    loaded = load_model(tmp_path)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 1)
    theirs = reference_logits(model, PROMPT, [])
    np.testing.assert_allclose(result.prefill_logits[0], theirs[0], atol=1e-4, rtol=0)
