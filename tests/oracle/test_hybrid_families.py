"""The attention / Mamba hybrid families (issue 29) against transformers 5.23.0's slow torch path
on tiny random-weight models, eager attention and experts: Bamba, Nemotron-H (with Nemotron 3's
MoE blocks too, Nano's and Super's latent ones), Granite 4's GraniteMoeHybrid, Jamba (its own
parts switched off on tcpc's side: test_jamba.py) and Falcon-H1 (attention and a Mamba-2 mixer
side by side in every layer).

- prefill plus 4 decode steps within 1e-4 of transformers decoding from its own cache (KV on the
  attention layers, conv and SSM states on the Mamba layers), greedy tokens equal. transformers'
  hybrid models default position_ids to 0.. of the new tokens only, so the reference passes each
  step's position as generate() does;
- decode from the carried caches equals the full recompute;
- each layer's cache is of its kind: K and V growing with the context on attention layers, the
  state and the window of one size on Mamba layers;
- parameter counts equal transformers' own, tiny and bundled;
- matmul FLOPs: our einsums (projections and attention; RoPE's rotation excluded, element-wise
  in transformers) equal FlopCounterMode's `aten.mm` (and `aten.addmm`, a Linear with a bias) plus
  the `aten.bmm` of the attention modules (eager scores and values); transformers' Mamba-2 scan
  is its own bmm, not compared (the IR's `scan` op has its own count, see test_ssm_families);
- 2 and 4 chips equal 1;
- right-padded batches equal single runs.

Each family's special parts bite: the attention layers (their output zeroed on the same weights),
Bamba's RoPE on half of each head, the Mamba groups, the prefill's dt clamp (Bamba's
time_step_limit, Nemotron-H's time_step_min), Nemotron-H's squared relu, Nemotron 3's group limit,
correction bias (a random buffer here; transformers initialises it to zero), routed_scaling_factor,
top-k renormalisation, the experts' squared relu and the shared expert, Granite's RoPE, four
multipliers, top-k and shared MLP, Jamba's top-k and its dt, B and C norm weights; Falcon-H1's
parallel mixers (either one's output zeroed), its muP multipliers (each set back to 1, each of
ssm_multipliers' five spans too), its gated norm and its placement before the gate, its out_proj
bias switch; and, the other way round, our Falcon-H1 graph with each of those parts switched off
in its ModelConfig misses transformers' logits (so the matching test would fail without it).
Bamba's chunking is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.decode_match import assert_prefill_and_decode_match
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params
from tests.oracle.test_families import _einsum_flops

F32 = PRECISIONS["f32"]
PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
ATTENTION = dict(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
# Falcon-H1's muP multipliers, each its own value so that any one misplaced shows
FALCON_MUP = dict(embedding_multiplier=2.0, lm_head_multiplier=0.5, key_multiplier=0.7,
                  attention_in_multiplier=1.3, attention_out_multiplier=0.8, ssm_in_multiplier=1.2,
                  ssm_out_multiplier=0.6, ssm_multipliers=[0.9, 1.1, 0.8, 1.25, 1.3],
                  mlp_multipliers=[1.5, 0.7])  # fmt: skip
# family -> (config class, model class, tiny config, the overrides that lift its prefill's dt clamp)
HYBRID = {
    "bamba": (
        "BambaConfig",
        "BambaForCausalLM",
        dict(ATTENTION, attn_layer_indices=[1], mamba_n_heads=8, mamba_n_groups=4, mamba_d_state=6,
             mamba_chunk_size=4, time_step_limit=(0.0, 0.9)),
        dict(time_step_limit=(0.0, float("inf"))),
    ),
    "nemotron_h": (
        "NemotronHConfig",
        "NemotronHForCausalLM",
        dict(ATTENTION, head_dim=8, hybrid_override_pattern="M-*-M", mamba_num_heads=8, mamba_head_dim=8,
             n_groups=4, ssm_state_size=6, chunk_size=4, time_step_min=0.75),
        dict(time_step_min=1e-6),  # 0 breaks transformers' init (log 0); a floor that never bites
    ),
    "nemotron_h-moe": (  # Nemotron 3's MoE blocks: 8 experts in 4 groups, the best 2 groups eligible
        "NemotronHConfig",
        "NemotronHForCausalLM",
        dict(ATTENTION, head_dim=8, hybrid_override_pattern="ME*E-M", mamba_num_heads=8, mamba_head_dim=8,
             n_groups=4, ssm_state_size=6, chunk_size=4, n_routed_experts=8, num_experts_per_tok=2,
             moe_intermediate_size=12, moe_shared_expert_intermediate_size=20, n_group=4, topk_group=2,
             routed_scaling_factor=2.5),
        {},
    ),
    "nemotron_h-latent": (  # Nemotron 3 Super's experts: in a 16-wide latent space, one group
        "NemotronHConfig",
        "NemotronHForCausalLM",
        dict(ATTENTION, head_dim=8, hybrid_override_pattern="ME*E", mamba_num_heads=8, mamba_head_dim=8,
             n_groups=4, ssm_state_size=6, chunk_size=4, n_routed_experts=8, num_experts_per_tok=3,
             moe_intermediate_size=12, moe_shared_expert_intermediate_size=20, moe_latent_size=16,
             routed_scaling_factor=5.0),
        {},
    ),
    "granitemoehybrid": (
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        dict(ATTENTION, intermediate_size=12, layer_types=["mamba", "attention", "mamba"], mamba_n_heads=8,
             mamba_n_groups=4, mamba_d_state=6, mamba_chunk_size=4, time_step_limit=(0.0, 0.9),
             num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=20,
             position_embedding_type="rope", embedding_multiplier=3.0, attention_multiplier=0.3,
             residual_multiplier=0.5, logits_scaling=2.0),
        dict(time_step_limit=(0.0, float("inf"))),
    ),
    "falcon_h1": (  # every multiplier away from 1; the gated norm before the gate
        "FalconH1Config",
        "FalconH1ForCausalLM",
        dict(ATTENTION, mamba_d_ssm=48, mamba_n_heads=8, mamba_n_groups=4, mamba_d_state=6,
             mamba_chunk_size=4, time_step_limit=(0.0, 0.9), mamba_rms_norm=True, **FALCON_MUP),
        dict(time_step_limit=(0.0, float("inf"))),
    ),
    "falcon_h1-plain": (  # the class defaults: no gated norm, multipliers 1; inner = expand x hidden; biases
        "FalconH1Config",
        "FalconH1ForCausalLM",
        dict(ATTENTION, mamba_d_ssm=None, mamba_expand=1, mamba_n_heads=4, mamba_n_groups=4, mamba_d_state=6,
             mamba_chunk_size=4, mamba_proj_bias=True, projectors_bias=True, attention_bias=True,
             mlp_bias=True),
        {},
    ),
    "granitemoehybrid-dense": (  # no experts (Granite-4.0-H-1B): the shared MLP alone
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        dict(ATTENTION, layer_types=["attention", "mamba", "mamba"], mamba_n_heads=8, mamba_n_groups=4,
             mamba_d_state=6, mamba_chunk_size=4, num_local_experts=0, shared_intermediate_size=20,
             position_embedding_type="rope", embedding_multiplier=3.0, attention_multiplier=0.3,
             residual_multiplier=0.5, logits_scaling=2.0),
        {},
    ),
    "jamba": (  # attention at 1 and 4, experts at 1 and 3: each mixer with both kinds of MLP
        "JambaConfig",
        "JambaForCausalLM",
        dict(ATTENTION, num_hidden_layers=5, attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2,
             expert_layer_offset=1, num_experts=4, num_experts_per_tok=2, mamba_d_state=6, rms_norm_eps=1e-3),
        {},
    ),
}  # fmt: skip
BUNDLED_CLASSES = {
    "bamba-9b": ("BambaConfig", "BambaForCausalLM"),
    "nemotron-h-8b-base-8k": ("NemotronHConfig", "NemotronHForCausalLM"),
    "nvidia-nemotron-3-nano-30b-a3b": ("NemotronHConfig", "NemotronHForCausalLM"),
    "granite-4.0-h-tiny": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM"),
    "ai21-jamba-1.5-mini": ("JambaConfig", "JambaForCausalLM"),
    "falcon-h1-0.5b-base": ("FalconH1Config", "FalconH1ForCausalLM"),
}
MOE = {"granitemoehybrid", "nemotron_h-moe", "nemotron_h-latent", "jamba"}


def build(name: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config_cls, model_cls, extra, _ = HYBRID[name]
    config = getattr(transformers, config_cls)(**{**extra, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    if name in MOE:
        model.set_experts_implementation("eager")
    biases = [(n, b) for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
    with torch.no_grad():  # norm weights around 1, the rest (A_log, D, dt_bias, conv, correction bias) random
        for n, p in [*model.named_parameters(), *biases]:
            centre = 1.0 if n.endswith(("norm.weight", "layernorm.weight")) else 0.0
            p.copy_(0.1 * torch.randn_like(p) + centre)
    return model


@pytest.fixture(scope="module", params=sorted(HYBRID))
def family(request, tmp_path_factory):
    model = build(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(directory)
    return request.param, model, load_model(directory)


def reference_logits(model, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """transformers' last-position logits for the prompt, then one per fed token, decoding from its
    own cache at the token's position."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits, cache = [out.logits[0, -1].numpy()], out.past_key_values
        for step, t in enumerate(tokens):
            position = torch.tensor([[len(prompt) + step]])
            out = model(torch.tensor([[t]]), past_key_values=cache, use_cache=True, position_ids=position)
            cache = out.past_key_values
            logits.append(out.logits[0, -1].numpy())
    return logits


def test_prefill_and_decode_match_transformers(family) -> None:
    name, model, loaded = family
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, STEPS, name)


def test_decode_from_the_carried_caches_equals_the_full_recompute(family, tmp_path) -> None:
    """Without the dt clamp: transformers clamps dt in the chunked prefill scan only, so with a
    clamp that bites a step and a recompute differ there as they do here."""
    name, _, loaded = family
    build(name, **HYBRID[name][3]).save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"{name} step {step}")  # fmt: skip


# (family, config overrides, a parameter zeroed on the same weights)
SWITCHED_OFF = [
    ("bamba", {}, "layers.1.self_attn.o_proj.weight"),  # the attention layer's output
    ("bamba", dict(rope_parameters=dict(rope_type="default", rope_theta=1e4, partial_rotary_factor=1)), None),
    ("bamba", dict(mamba_n_groups=1), None),
    ("bamba", dict(mamba_chunk_size=256), None),  # one chunk: the inter-chunk recurrence unused
    ("bamba", HYBRID["bamba"][3], None),
    ("nemotron_h", {}, "layers.2.mixer.o_proj.weight"),  # the attention block's output
    ("nemotron_h", dict(mlp_hidden_act="relu"), None),  # relu, not squared
    ("nemotron_h", dict(n_groups=1), None),
    ("nemotron_h", HYBRID["nemotron_h"][3], None),  # time_step_min: the prefill's dt floor
    ("nemotron_h-moe", dict(n_group=1, topk_group=1), None),  # no group limit
    ("nemotron_h-moe", {}, "layers.1.mixer.gate.e_score_correction_bias"),
    ("nemotron_h-moe", dict(routed_scaling_factor=1.0), None),
    ("nemotron_h-moe", dict(norm_topk_prob=False), None),
    ("nemotron_h-moe", dict(mlp_hidden_act="relu"), None),  # the experts' relu, not squared
    ("nemotron_h-moe", {}, "layers.1.mixer.shared_experts.down_proj.weight"),  # the shared expert's output
    ("nemotron_h-latent", {}, "layers.1.mixer.fc2_latent_proj.weight"),  # the routed experts' way back
    ("granitemoehybrid", {}, "layers.1.self_attn.o_proj.weight"),
    ("granitemoehybrid", dict(position_embedding_type=None), None),  # no RoPE
    *[("granitemoehybrid", {key: 1.0}, None)
      for key in ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling")],
    ("granitemoehybrid", dict(num_experts_per_tok=1), None),
    ("granitemoehybrid", {}, "layers.0.shared_mlp.output_linear.weight"),  # the shared MLP's output
    ("granitemoehybrid", HYBRID["granitemoehybrid"][3], None),
    ("jamba", {}, "layers.1.self_attn.o_proj.weight"),
    ("jamba", dict(num_experts_per_tok=1), None),
    *[("jamba", {}, f"layers.0.mamba.{norm}_layernorm.weight") for norm in ("dt", "b", "c")],
    ("falcon_h1", {}, "layers.1.self_attn.o_proj.weight"),  # the parallel sum: attention's share
    ("falcon_h1", {}, "layers.1.mamba.out_proj.weight"),  # and the Mamba mixer's
    *[("falcon_h1", {key: 1.0}, None) for key, value in FALCON_MUP.items() if not isinstance(value, list)],
    *[("falcon_h1", {key: [1.0 if k == i else v for k, v in enumerate(FALCON_MUP[key])]}, None)
      for key in ("ssm_multipliers", "mlp_multipliers") for i in range(len(FALCON_MUP[key]))],
    ("falcon_h1", dict(mamba_rms_norm=False), None),
    ("falcon_h1", dict(mamba_norm_before_gate=False), None),
    ("falcon_h1", dict(mamba_n_groups=1), None),
    ("falcon_h1", HYBRID["falcon_h1"][3], None),
    ("falcon_h1-plain", dict(projectors_bias=False), None),  # out_proj's own bias switch
]


@pytest.mark.parametrize("name, overrides, zeroed", SWITCHED_OFF)
def test_the_special_parts_bite(name: str, overrides: dict, zeroed: str | None) -> None:
    """Switched off on the same weights where they exist, transformers' prompt logits (no cache:
    an all-Mamba Bamba has none to decode from there) move past the tolerance, so matching them
    within 1e-4 checks each part. The chunk size moves nothing in exact arithmetic: that one is
    checked to agree (the chunked form is exact; the 4-token chunks cross the 6-token prompt)."""

    def logits(model) -> np.ndarray:
        with torch.no_grad():
            return model(torch.tensor([PROMPT]), use_cache=False).logits[0].numpy()

    on, off = build(name), build(name, **overrides)
    with torch.no_grad():  # every tensor both have from `on`: a switch that drops one shifts no other
        weights = dict(on.named_parameters())
        for n, p in off.named_parameters():
            if n in weights and weights[n].shape == p.shape:
                p.copy_(weights[n])
        if zeroed is not None:
            off.state_dict()[f"model.{zeroed}"].zero_()  # a parameter or a buffer (the correction bias)
    moved = np.abs(logits(on) - logits(off)).max()
    if "mamba_chunk_size" in overrides:
        assert moved < 1e-5
    else:
        assert moved > 1e-3


def test_each_layer_caches_its_own_kind(family) -> None:
    """Attention layers carry K and V over the context, Mamba layers their state and window, the
    same size at any context."""
    _, _, loaded = family
    cfg = loaded.config
    kinds = {mixer for layer in cfg.layers for mixer in layer.mixers}
    assert {"attention", "mamba"} <= kinds
    sizes = {}
    for past in (8, 800):
        graph = build_decode(cfg, F32, 2, past).graph
        for o in graph.meta.kv_outputs:
            sizes.setdefault(o, []).append(graph[o].type.nbytes)
    ssm = cfg.ssm
    for i, layer in enumerate(cfg.layers):
        mine = {o: s for o, s in sizes.items() if o.startswith(f"l{i}.")}
        recurrent = {o: s for o, s in mine.items() if o.split(".")[1].startswith(("ssm", "conv"))}
        if layer.recurrent:
            assert sum(s[0] for s in recurrent.values()) == 2 * (ssm.state_elements + ssm.window_elements) * 4
            assert all(s[0] == s[1] for s in recurrent.values())
        if layer.recurrent and not layer.attends:
            assert mine == recurrent
        elif layer.attention == "skip":
            assert not mine  # an MLP-only block caches nothing
        else:  # attention's K and V (Falcon-H1's beside its Mamba mixer's state)
            kv = {o: s for o, s in mine.items() if o not in recurrent}
            assert len(kv) == 2 and all(s[1] == s[0] * 801 // 9 for s in kv.values())
    assert build_decode(cfg, F32, 1, 8).graph.meta  # builds at batch 1 too


def test_batched_padded_prefill_matches_single_runs(family) -> None:
    """Right-padded prompts of 6, 3 and 5 tokens: each row's logits and decode steps are its own
    run's (attention masks the padded keys; a padded Mamba step leaves the state, dt = 0)."""
    name, _, loaded = family
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for row, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[row], single.prefill_logits[0], atol=1e-5,
                                   err_msg=name)  # fmt: skip
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][row], single.decode_logits[k][0], atol=1e-5)
        assert batched.token_matrix[row].tolist() == single.token_matrix[0].tolist()


def test_tiny_parameter_count_equals_transformers(family) -> None:
    _, model, loaded = family
    assert tcpc_params(loaded.config) == transformers_params(model)


@pytest.mark.parametrize("name", sorted(BUNDLED_CLASSES))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    model = bundled_on_meta(name, *BUNDLED_CLASSES[name])
    assert tcpc_params(load_model(name).config) == transformers_params(model)


@pytest.mark.parametrize("seq", [1, 7])
def test_matmul_flops_equal_flop_counter(family, seq) -> None:
    _, model, loaded = family
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    counts = counter.get_flop_counts()
    linears = ("aten.mm", "aten.addmm")  # addmm: a Linear with a bias
    mm = sum(v for op, v in counts["Global"].items() if str(op) in linears)
    attends = tuple(f".{n}" for n, m in model.named_modules() if type(m).__name__.endswith("Attention"))
    attention = sum(
        v for module, ops in counts.items() if module.endswith(attends)
        for op, v in ops.items() if str(op) == "aten.bmm"
    )  # fmt: skip
    assert attention > 0
    assert _einsum_flops(build_prefill(loaded.config, F32, 1, seq).graph) == mm + attention


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(family, chips: int) -> None:
    """Attention heads and Mamba groups split over the chips give one chip's logits."""
    name, _, loaded = family
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)


def _set(group: str, **fields) -> Callable[[ModelConfig], ModelConfig]:
    """A config with `fields` of its part `group` (attention, ssm, mlp, embedding) replaced."""
    return lambda c: replace(c, **{group: replace(getattr(c, group), **fields)})


def _layers(**fields) -> Callable[[ModelConfig], ModelConfig]:
    return lambda c: replace(c, layers=tuple(replace(layer, **fields) for layer in c.layers))


def _span_off(i: int) -> Callable[[ModelConfig], ModelConfig]:
    """ssm_multipliers' span i set back to 1."""
    return lambda c: _set("ssm", projection_scales=tuple(
        1.0 if k == i else s for k, s in enumerate(c.ssm.projection_scales)))(c)  # fmt: skip


# each special part of our Falcon-H1 switched off in the config read from the checkpoint
FALCON_OFF = {
    "embedding_multiplier": _set("embedding", scale=None),
    "lm_head_multiplier": _set("embedding", logits_scale=1.0),
    "the gated norm after the gate": _set("ssm", gated_norm="gated"),
    "no gated norm": _set("ssm", gated_norm="none"),
    "attention alone": _layers(beside=()),
    "mamba alone": _layers(mixer="mamba", beside=()),
    **{f"attention.{f}": _set("attention", **{f: 1.0}) for f in ("in_scale", "out_scale", "key_scale")},
    **{f"ssm.{f}": _set("ssm", **{f: 1.0}) for f in ("in_scale", "out_scale")},
    **{f"mlp.{f}": _set("mlp", **{f: 1.0}) for f in ("gate_scale", "down_scale")},
    **{f"ssm_multipliers[{i}]": _span_off(i) for i in range(5)},
}


@pytest.fixture(scope="module")
def falcon(tmp_path_factory):
    model = build("falcon_h1")
    directory = tmp_path_factory.mktemp("falcon_h1_off")
    model.save_pretrained(directory)
    return model, load_model(directory)


@pytest.mark.parametrize("part", sorted(FALCON_OFF))
def test_falcon_h1_without_each_part_misses_transformers(falcon, part: str) -> None:
    """Our graph with one of Falcon-H1's parts switched off in its ModelConfig misses transformers'
    prompt logits by far more than the tolerance the matching test holds it to."""
    model, loaded = falcon
    theirs = reference_logits(model, PROMPT, [])[0]
    switched_off = FALCON_OFF[part](loaded.config)
    ours = generate(switched_off, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(ours - theirs).max() > 1e-3, part
