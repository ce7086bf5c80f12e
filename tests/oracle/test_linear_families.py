"""The linear-attention families Qwen3-Next and RWKV-4 (issue 29) against transformers 5.23.0's
slow torch paths (no flash-linear-attention, causal-conv1d or WKV CUDA kernels here) on tiny
random-weight models.

- prefill plus 4 decode steps within 1e-4 of transformers (which decodes from its own cache: the
  DeltaNet layers' conv and recurrent states, the attention layers' K and V), greedy tokens equal;
- decode from the carried state equals the full recompute;
- parameter counts equal transformers' own, tiny and bundled;
- matmul FLOPs: our contractions equal FlopCounterMode's `aten.mm` (every nn.Linear, the experts
  and the LM head) once RoPE's rotation and attention's scores and weighted sum are left out:
  transformers runs those, and its chunked delta rule, as `aten.bmm`; the delta rule and the
  convolution are the IR's `delta_scan` / `conv1d` ops here, with their own counts.

The tiny model has 2 key heads each serving 2 value heads (the grouped q/k/v/z layout of
in_proj_qkvz and the broadcast of q and k onto the value heads), a full-attention layer every
second layer, a dense-MLP layer (mlp_only_layers) beside MoE layers, and every weight random
(the zero-centred norms' weights too, so their (1 + w) counts). Each part the reference has and a
plain transformer lacks bites: the attention output gate, partial RoPE, the shared expert's gate.

RWKV-4 (RwkvForCausalLM, its CPU path `rwkv_linear_attention_cpu` with the running maximum): the
same checks, its WKV here the ratio of two scans over lagged inputs (builder/rwkv.py); the token
shift, the bonus time_first and transformers' eval rescaling (rescale_every, made to bite by a
LayerNorm eps large enough for the halved hidden state to move the logits) each bite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers.models.qwen3_next import modeling_qwen3_next

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.decode_match import assert_prefill_and_decode_match
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params

F32 = PRECISIONS["f32"]
PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
QWEN3_NEXT = dict(
    vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=8,
    linear_value_head_dim=6, linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=12,
    shared_expert_intermediate_size=20, num_experts=6, num_experts_per_tok=2, full_attention_interval=2,
    mlp_only_layers=[1],
)  # fmt: skip
# roles transformers counts as aten.bmm (beside its delta rule), not aten.mm
BMM_ROLES = ("rot", "scores", "attn")


RWKV = dict(vocab_size=97, hidden_size=32, num_hidden_layers=3, intermediate_size=40, context_length=64)
LAYER_NORMS = ("pre_ln", "ln1", "ln2", "ln_out")


def build(seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config = transformers.Qwen3NextConfig(**{**QWEN3_NEXT, **overrides}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.Qwen3NextForCausalLM(config).eval()
    model.set_experts_implementation("eager")
    with torch.no_grad():  # the gated norm's weight around 1 (it scales by w), the rest random
        for n, p in model.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) + (1.0 if n.endswith("linear_attn.norm.weight") else 0.0))
    return model


@pytest.fixture(scope="module")
def qwen3_next(tmp_path_factory):
    model = build()
    directory = tmp_path_factory.mktemp("qwen3_next")
    model.save_pretrained(directory)
    return model, load_model(directory)


def reference_logits(model, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """transformers' last-position logits for the prompt, then one per fed token from its cache."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits, cache = [out.logits[0, -1].numpy()], out.past_key_values
        for t in tokens:
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits[0, -1].numpy())
    return logits


def test_prefill_and_decode_match_transformers(qwen3_next) -> None:
    model, loaded = qwen3_next
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, STEPS, "qwen3_next")


def test_decode_from_the_carried_state_equals_the_full_recompute(qwen3_next) -> None:
    _, loaded = qwen3_next
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"step {step}")  # fmt: skip


@contextmanager
def _without(name: str, module: object) -> Iterator[None]:
    """transformers' Qwen3-Next with `module`.sigmoid (torch's or torch.nn.functional's, as the
    modelling file calls it) returning ones: the attention output gate (torch.sigmoid) or the
    shared expert's gate (F.sigmoid) switched off; beta's Tensor.sigmoid is untouched."""
    original = getattr(modeling_qwen3_next, name)
    shim = SimpleNamespace(**{k: getattr(module, k) for k in dir(module) if not k.startswith("__")})
    shim.sigmoid = torch.ones_like
    setattr(modeling_qwen3_next, name, shim)
    try:
        yield
    finally:
        setattr(modeling_qwen3_next, name, original)


@pytest.mark.parametrize("part", ["output gate", "shared expert gate", "partial rotary"])
def test_the_special_parts_bite(part: str) -> None:
    """Switched off in transformers, each part moves its prefill logits past the tolerance, so
    matching them within 1e-4 checks it."""
    on = reference_logits(build(), PROMPT, [])[0]
    if part == "partial rotary":
        off = reference_logits(build(partial_rotary_factor=1.0), PROMPT, [])[0]
    else:
        name, module = ("torch", torch) if part == "output gate" else ("F", torch.nn.functional)
        with _without(name, module):
            off = reference_logits(build(), PROMPT, [])[0]
    assert np.abs(on - off).max() > 1e-3


def test_our_zero_centred_norms_bite(qwen3_next) -> None:
    """Our norms without Qwen3-Next's (1 + w) miss transformers' logits."""
    model, loaded = qwen3_next
    plain = dataclasses.replace(loaded.config, norms=dataclasses.replace(loaded.config.norms, offset=0.0))
    ours = generate(plain, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(ours - reference_logits(model, PROMPT, [])[0]).max() > 1e-3


def test_layers_and_cache(qwen3_next) -> None:
    """Layers 1 and 3 attend (full_attention_interval 2), 0 and 2 are DeltaNet layers carrying a
    state [4 value heads x 8 x 6] and a conv window [3 x (2 x 2 x 8 + 24)] each at any context;
    the attention layers' KV cache grows with it."""
    _, loaded = qwen3_next
    cfg = loaded.config
    assert [layer.mixer for layer in cfg.layers] == ["deltanet", "attention"] * 2
    assert cfg.state_elements() == 2 * (4 * 8 * 6 + 3 * 56)
    for past in (8, 800):
        graph = build_decode(cfg, F32, 1, past).graph
        outputs = graph.meta.kv_outputs
        state = sum(graph[o].type.nbytes for o in outputs if "ssm_state" in o or "conv_window" in o)
        assert state == cfg.state_elements() * 4
        kv = sum(graph[o].type.nbytes for o in outputs) - state
        assert kv == 2 * 2 * (past + 1) * 2 * 16 * 4  # 2 layers, K and V, 2 KV heads of 16, f32


def test_tiny_parameter_count_equals_transformers(qwen3_next) -> None:
    model, loaded = qwen3_next
    assert tcpc_params(loaded.config) == transformers_params(model)


def test_bundled_parameter_count_equals_transformers() -> None:
    name = "qwen3-next-80b-a3b-instruct"
    model = bundled_on_meta(name, "Qwen3NextConfig", "Qwen3NextForCausalLM")
    assert tcpc_params(load_model(name).config) == transformers_params(model) == 79_674_391_296


@pytest.mark.parametrize("seq", [1, 7])
def test_projection_flops_equal_flop_counter_mm(qwen3_next, seq) -> None:
    model, loaded = qwen3_next
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    counts = {str(op): v for op, v in counter.get_flop_counts()["Global"].items()}
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    ours = sum(
        nc.cost.flops
        for nc in ir.analyze(graph).per_node
        if nc.node.kind in CONTRACTIONS and nc.node.name.split(".")[-1] not in BMM_ROLES
    )
    assert ours == counts["aten.mm"]
    assert graph.of_kind("delta_scan") and graph.of_kind("conv1d")


def test_batched_padded_prefill_matches_single_runs(qwen3_next) -> None:
    """Right-padded prompts: padded steps leave each DeltaNet state (beta = 0 and g = 0 there)."""
    _, loaded = qwen3_next
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5)
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(qwen3_next, chips: int) -> None:
    """Whole key heads (with their value heads) per chip give one chip's logits; 2 key heads do not
    split over 4 chips, refused in one line."""
    _, loaded = qwen3_next
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    if chips == 4:
        with pytest.raises(FrontendError, match=r"2 key heads \(linear_num_key_heads\) do not split"):
            build_decode(loaded.config, F32, 1, 6, chips=chips)
        return
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5)
    graph = build_decode(loaded.config, F32, 1, 6, chips=chips).graph
    assert any(n.name.endswith("out_proj.sum") for n in graph.of_kind("all_reduce"))


# -- RWKV-4 ------------------------------------------------------------------------------------


def build_rwkv(**overrides) -> transformers.PreTrainedModel:
    """A tiny RWKV-4 (attention_hidden_size left to hidden_size: transformers' CPU path sizes its
    state by hidden_size), every weight random, LayerNorm weights around 1."""
    torch.manual_seed(0)
    model = transformers.RwkvForCausalLM(transformers.RwkvConfig(**{**RWKV, **overrides})).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            centre = 1.0 if n.endswith("weight") and n.split(".")[-2] in LAYER_NORMS else 0.0
            p.copy_(0.3 * torch.randn_like(p) + centre)
    return model


@pytest.fixture(scope="module")
def rwkv(tmp_path_factory):
    """Saved before any forward: transformers rescales the weights in place on its first eval call."""
    model = build_rwkv(rescale_every=2)
    directory = tmp_path_factory.mktemp("rwkv")
    model.save_pretrained(directory)
    return model, load_model(directory)


def rwkv_logits(model, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """transformers' last-position logits for the prompt, then one per fed token from its state."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits, state = [out.logits[0, -1].numpy()], out.state
        for t in tokens:
            out = model(torch.tensor([[t]]), state=state, use_cache=True)
            state = out.state
            logits.append(out.logits[0, -1].numpy())
    return logits


def test_rwkv_prefill_and_decode_match_transformers(rwkv) -> None:
    model, loaded = rwkv
    assert_prefill_and_decode_match(loaded, partial(rwkv_logits, model), PROMPT, STEPS, "rwkv")


def test_rwkv_decode_from_the_carried_state_equals_the_full_recompute(rwkv) -> None:
    _, loaded = rwkv
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5)


@pytest.mark.parametrize("part", ["token shift", "time_first"])
def test_rwkv_special_parts_bite(part: str) -> None:
    """Switched off in transformers (every mix 1: no previous token; time_first -inf: no bonus
    term for the current token, which then only enters through later steps), the logits move."""
    on = rwkv_logits(build_rwkv(), PROMPT, [])[0]
    model = build_rwkv()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if part == "token shift" and "time_mix" in n:
                p.fill_(1.0)
            if part == "time_first" and n.endswith("time_first"):
                p.fill_(-30.0)
    assert np.abs(on - rwkv_logits(model, PROMPT, [])[0]).max() > 1e-3


def test_rwkv_rescaling_bites(tmp_path) -> None:
    """With a LayerNorm eps of 0.5 the halved hidden state moves the logits: ours without the
    rescaling miss transformers', ours with it match (and so does ln_out's own eps, torch's default
    1e-5 whatever layer_norm_epsilon says)."""
    model = build_rwkv(rescale_every=1, layer_norm_epsilon=0.5)
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    theirs = rwkv_logits(model, PROMPT, [])[0]
    ours = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    plain = dataclasses.replace(loaded.config, ssm=dataclasses.replace(loaded.config.ssm, rescale_every=0))
    unscaled = generate(plain, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(unscaled - theirs).max() > 1e-3


def test_rwkv_cache_is_fixed_at_every_length(rwkv) -> None:
    """Per layer: the numerator and denominator sums and the two lagged inputs (32 channels each)
    and the two token shifts' previous inputs (32 each), the same at any context."""
    _, loaded = rwkv
    cfg = loaded.config
    assert cfg.state_elements() == 3 * (2 * 32 + 2 * 32 + 2 * 32)
    for past in (8, 800):
        graph = build_decode(cfg, F32, 1, past).graph
        assert sum(graph[o].type.nbytes for o in graph.meta.kv_outputs) == cfg.state_elements() * 4


def test_rwkv_parameter_counts_equal_transformers(rwkv) -> None:
    model, loaded = rwkv
    assert tcpc_params(loaded.config) == transformers_params(model)
    big = bundled_on_meta("rwkv-4-169m-pile", "RwkvConfig", "RwkvForCausalLM")
    assert tcpc_params(load_model("rwkv-4-169m-pile").config) == transformers_params(big) == 169_342_464


@pytest.mark.parametrize("seq", [1, 7])
def test_rwkv_projection_flops_equal_flop_counter_mm(rwkv, seq) -> None:
    """Every nn.Linear is an aten.mm; the WKV recurrence is two `scan` ops here, elementwise there.
    RwkvForCausalLM takes no logits_to_keep: its head runs on every position, ours on the last."""
    model, loaded = rwkv
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long))
    counts = {str(op): v for op, v in counter.get_flop_counts()["Global"].items()}
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    ours = sum(nc.cost.flops for nc in ir.analyze(graph).per_node if nc.node.kind in CONTRACTIONS)
    head_elsewhere = 2 * RWKV["hidden_size"] * RWKV["vocab_size"] * (seq - 1)
    assert ours + head_elsewhere == counts["aten.mm"]
    assert len(graph.of_kind("scan")) == 2 * 3


@pytest.mark.parametrize("chips", [2, 4])
def test_rwkv_tensor_parallel_equals_one_chip(rwkv, chips: int) -> None:
    """The WKV channels split over the chips (key, value and receptance rows, decay and bonus, the
    output's columns), the channel mixing as an MLP: one chip's logits; 32 channels do not split
    over 64 chips, refused in one line."""
    _, loaded = rwkv
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5)
    graph = build_decode(loaded.config, F32, 1, 6, chips=chips).graph
    assert {"l0.output.sum", "l0.ffn_value.sum"} <= {n.name for n in graph.of_kind("all_reduce")}
    assert graph["l0.num_ssm_state"].type.size("A") == 32 // chips
    cached = sum(graph[o].type.nbytes for o in graph.meta.kv_outputs)
    assert cached == loaded.config.state_elements(chips=chips) * 4  # the token shifts whole on each chip
    with pytest.raises(FrontendError, match="RWKV's 32 WKV channels do not split over 64 chips"):
        build_decode(loaded.config, F32, 1, 6, chips=64)


def test_rwkv_refuses_padding_in_one_line(rwkv) -> None:
    _, loaded = rwkv
    with pytest.raises(FrontendError, match="RWKV blocks take no padded batches"):
        build_prefill(loaded.config, F32, 2, 6, padded=True)
