"""The state-space families (issue 29) against transformers 5.23.0's slow torch path (no CUDA
kernels here): Mamba, Falcon-Mamba and Mamba-2 on tiny random-weight models.

- prefill plus 4 decode steps within 1e-4 of transformers (which decodes from its own cache:
  conv_states and ssm_states), greedy tokens equal;
- decode from the carried state (our decode graphs, fed each step's state and conv window) equals
  the full recompute (a prefill of the whole sequence so far);
- parameter counts equal transformers' own, tiny and bundled;
- matmul FLOPs: our einsums equal FlopCounterMode's `aten.mm` (every nn.Linear and Mamba-1's
  `dt_proj.weight @ dt`). transformers' scan is not a matmul of the model: Mamba-1's slow path
  multiplies the state by C per step (`aten.bmm`) and Mamba-2's chunked form runs einsums
  (`aten.bmm`), and the convolution is `aten.convolution`; here the scan and the convolution are
  the IR's `scan` / `conv1d` ops with their own counts (ir/ops/scan.py), so those are not compared.

Each family's special part bites: Falcon-Mamba's B/C/dt norms (eps 1e-3, large enough to move the
logits), Mamba-2's groups (2, so B and C differ between heads), its chunk (4, shorter than the
prompt, so the chunked form crosses chunks) and a time_step_limit that clamps dt in prefill.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

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
MAMBA1 = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, state_size=6, expand=2, conv_kernel=4,
              time_step_rank=5)  # fmt: skip
SSM = {
    "mamba": ("MambaConfig", "MambaForCausalLM", MAMBA1),
    "falcon_mamba": ("FalconMambaConfig", "FalconMambaForCausalLM", dict(MAMBA1, mixer_rms_eps=1e-3)),
    "mamba2": (
        "Mamba2Config",
        "Mamba2ForCausalLM",
        dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8, state_size=6,
             n_groups=2, expand=2, conv_kernel=4, chunk_size=4, time_step_limit=(0.0, 0.9),
             tie_word_embeddings=False),
    ),  # fmt: skip
}
BUNDLED_CLASSES = {
    "mamba-130m": ("MambaConfig", "MambaForCausalLM"),
    "mamba-codestral-7b-v0.1": ("Mamba2Config", "Mamba2ForCausalLM"),
}


def build(name: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config_cls, model_cls, extra = SSM[name]
    config = getattr(transformers, config_cls)(**{**extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():  # norm weights around 1, the rest (A_log, D, dt_bias, conv too) random
        for n, p in model.named_parameters():
            centre = 1.0 if n.endswith(("norm.weight", "norm_f.weight")) else 0.0
            p.copy_(0.1 * torch.randn_like(p) + centre)
    return model


@pytest.fixture(scope="module", params=sorted(SSM))
def family(request, tmp_path_factory):
    model = build(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory)
    return request.param, model, load_model(directory)


def reference_logits(model, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """transformers' last-position logits for the prompt, then one per fed token, decoding from its
    own cache (conv and SSM states)."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits, cache = [out.logits[0, -1].numpy()], out.cache_params
        for t in tokens:
            out = model(torch.tensor([[t]]), cache_params=cache, use_cache=True)
            cache = out.cache_params
            logits.append(out.logits[0, -1].numpy())
    return logits


def test_prefill_and_decode_match_transformers(family) -> None:
    name, model, loaded = family
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, STEPS, name)


def test_decode_from_the_carried_state_equals_the_full_recompute(family, tmp_path) -> None:
    """Mamba-2 without its time_step_limit: transformers (as mamba_ssm) clamps dt in the chunked
    prefill scan only, not in the decode step, so with a limit that bites the two differ there as
    they do here (the match with transformers is the test above)."""
    name, _, loaded = family
    if name == "mamba2":
        build(name, time_step_limit=(0.0, float("inf"))).save_pretrained(tmp_path)
        loaded = load_model(tmp_path)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"{name} step {step}")  # fmt: skip


@pytest.mark.parametrize(
    "name, plain",
    [("falcon_mamba", ("mamba", {})), ("mamba2", ("mamba2", dict(n_groups=1))),
     ("mamba2", ("mamba2", dict(time_step_limit=(0.0, float("inf")))))],
)  # fmt: skip
def test_the_special_parts_bite(name: str, plain: tuple[str, dict]) -> None:
    """Switched off (Falcon-Mamba without its B/C/dt norms is Mamba-1 on the same weights; Mamba-2
    with one group, or without the dt clamp), transformers' prefill logits move past the tolerance,
    so matching them within 1e-4 checks each part."""
    base, overrides = plain
    on = reference_logits(build(name), PROMPT, [])[0]
    off = reference_logits(build(base, **overrides), PROMPT, [])[0]
    assert np.abs(on - off).max() > 1e-3


def test_cache_is_the_state_and_window_at_every_length(family) -> None:
    """Each layer carries its SSM state and conv window, the same size at any context."""
    _, _, loaded = family
    cfg = loaded.config
    sizes = []
    for past in (8, 800):
        graph = build_decode(cfg, F32, 2, past).graph
        sizes.append(sum(graph[o].type.nbytes for o in graph.meta.kv_outputs))
    ssm = cfg.ssm
    per_layer = 2 * (ssm.state_elements + ssm.window_elements) * 4  # f32, batch 2
    assert sizes == [len(cfg.layers) * per_layer] * 2


def test_tiny_parameter_count_equals_transformers(family) -> None:
    _, model, loaded = family
    assert tcpc_params(loaded.config) == transformers_params(model)


@pytest.mark.parametrize("name", sorted(BUNDLED_CLASSES))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    model = bundled_on_meta(name, *BUNDLED_CLASSES[name])
    assert tcpc_params(load_model(name).config) == transformers_params(model)


@pytest.mark.parametrize("seq", [1, 7])
def test_projection_flops_equal_flop_counter_mm(family, seq) -> None:
    _, model, loaded = family
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    counts = counter.get_flop_counts()["Global"]
    mm = sum(v for op, v in counts.items() if str(op) == "aten.mm")
    assert sum(v for op, v in counts.items() if str(op) == "aten.bmm") > 0  # the scan, not compared
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    ours = sum(nc.cost.flops for nc in ir.analyze(graph).per_node if nc.node.kind in CONTRACTIONS)
    assert ours == mm


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(family, chips: int) -> None:
    """Channels (Mamba-1) or whole groups of heads (Mamba-2) split over the chips give one chip's
    logits; Mamba-2's 2 groups do not split over 4 chips, refused in one line."""
    name, _, loaded = family
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    if name == "mamba2" and chips == 4:
        with pytest.raises(FrontendError, match=r"8 heads in 2 groups \(n_groups\) do not split over 4"):
            generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
        return
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)
    graph = build_decode(loaded.config, F32, 1, 6, chips=chips).graph
    assert graph.of_kind("all_reduce")  # out_proj (and Mamba-1's x_proj) are row-parallel


def test_batched_padded_prefill_matches_single_runs(family) -> None:
    """Right-padded prompts of 6, 3 (shorter than the conv kernel's window) and 5 tokens: each
    row's logits and decode steps are its own run's (padded steps leave the state, dt = 0; the
    window is each row's last inputs before its length)."""
    name, _, loaded = family
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5,
                                   err_msg=name)  # fmt: skip
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][b], single.decode_logits[k][0], atol=1e-5)
        assert batched.token_matrix[b].tolist() == single.token_matrix[0].tolist()


def test_packed_documents_and_unsplittable_chips_are_refused_in_one_line(family) -> None:
    _, _, loaded = family
    with pytest.raises(FrontendError, match="take no packed documents"):
        build_prefill(loaded.config, F32, 1, 6, documents=2)
    with pytest.raises(FrontendError, match="does not split over 3 chips|do not split over 3 chips"):
        build_decode(loaded.config, F32, 1, 6, chips=3)
