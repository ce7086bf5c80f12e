"""Qwen3.5, dense and MoE, against transformers 5.23.0 (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM and
the image-text Qwen3_5ForConditionalGeneration, their slow torch paths) on tiny random-weight models.

- prefill plus 4 decode steps within 1e-4 (transformers decodes from its own conv, recurrent and
  KV caches), greedy tokens equal; decode from the carried state equals the full recompute;
- parameter counts equal transformers' own, tiny and bundled;
- matmul FLOPs: our contractions equal FlopCounterMode's `aten.mm` (RoPE's rotation and
  attention's scores and weighted sum left out: transformers runs them, and its chunked delta
  rule, as `aten.bmm`);
- 2 chips give one chip's logits (whole key heads with their value heads per chip, so in_proj_qkv
  is cut as the convolution's channels and z, b, a by value head); 4 chips do not split 2 key heads;
- the image-text model (text_config nested, weights under model.language_model) on text-only
  input: transformers computes M-RoPE's time/height/width positions (get_rope_index, interleaved
  mrope_section) and we run ordinary partial RoPE; its logits equal ours, and a shuffled
  mrope_section changes nothing for text (the reduction the family module relies on).

The tiny models have 2 key heads each serving 2 value heads (the split projections' layout: a
value head's rows in in_proj_z, b and a, and q/k broadcast to value heads), a full-attention layer
every second layer, and every weight random. What differs from Qwen3-Next bites: reading the split
projections as Qwen3-Next's fused per-key-head layout, or the MoE model's top-k weights left
unnormalised (norm_topk_prob false, which Qwen3.5-MoE ignores), misses transformers' logits.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from functools import partial

import numpy as np
import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForImageTextToText

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.decode_match import assert_prefill_and_decode_match
from tests.oracle.param_counts import tcpc_params, transformers_params
from tests.oracle.test_linear_families import BMM_ROLES, reference_logits
from tests.oracle.test_published_configs import transformers_count

F32 = PRECISIONS["f32"]
PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
TEXT = dict(
    vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
    linear_num_key_heads=2, linear_num_value_heads=4, full_attention_interval=2,
    rope_parameters=dict(rope_type="default", rope_theta=10_000.0, partial_rotary_factor=0.5,
                         mrope_section=[2, 1, 1], mrope_interleaved=True),
)  # fmt: skip
DENSE = dict(TEXT, intermediate_size=48)
MOE = dict(TEXT, moe_intermediate_size=12, shared_expert_intermediate_size=20, num_experts=6,
           num_experts_per_tok=2)  # fmt: skip
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2, temporal_patch_size=1,
              spatial_merge_size=1, out_hidden_size=32, num_position_embeddings=16)  # fmt: skip


def randomised(model: transformers.PreTrainedModel, seed: int = 1) -> transformers.PreTrainedModel:
    """Every weight random (the gated norm's around 1: it scales by w), in eval mode. Seed 1: seed
    0's tiny MoE model is ill-conditioned (its prefill logits move 5e-4 between two float32
    evaluation orders, where seeds 1 to 3 agree within 1e-5)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) + (1.0 if n.endswith("linear_attn.norm.weight") else 0.0))
    return model.eval()


def build(moe: bool = False, **overrides) -> transformers.PreTrainedModel:
    if moe:
        config = transformers.Qwen3_5MoeTextConfig(**{**MOE, **overrides}, attn_implementation="eager")
        model = transformers.Qwen3_5MoeForCausalLM(config)
        model.set_experts_implementation("eager")
    else:
        config = transformers.Qwen3_5TextConfig(**{**DENSE, **overrides}, attn_implementation="eager")
        model = transformers.Qwen3_5ForCausalLM(config)
    return randomised(model)


@pytest.fixture(scope="module", params=["dense", "moe"])
def tiny(request, tmp_path_factory):
    model = build(moe=request.param == "moe")
    directory = tmp_path_factory.mktemp(f"qwen3_5_{request.param}")
    model.save_pretrained(directory)
    return model, load_model(directory)


def test_prefill_and_decode_match_transformers(tiny) -> None:
    model, loaded = tiny
    reference = partial(reference_logits, model)
    assert_prefill_and_decode_match(loaded, reference, PROMPT, STEPS, loaded.config.family)


def test_decode_from_the_carried_state_equals_the_full_recompute(tiny) -> None:
    _, loaded = tiny
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = generate(loaded.config, loaded.checkpoint.load, [sequence[: len(PROMPT) + step + 1]], F32, 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"step {step}")  # fmt: skip


def test_layers_mlps_and_projections(tiny) -> None:
    """DeltaNet and attention alternate (full_attention_interval 2); the dense model's MLPs are
    all dense, the MoE model's all MoE; the DeltaNet reads the four split projections."""
    model, loaded = tiny
    cfg = loaded.config
    assert [layer.mixer for layer in cfg.layers] == ["deltanet", "attention"] * 2
    assert [layer.moe for layer in cfg.layers] == [cfg.family == "qwen3_5_moe"] * 4
    assert cfg.ssm is not None and not cfg.ssm.fused_projections
    assert cfg.positions.rotary_dim == 8  # partial_rotary_factor 0.5 of head_dim 16
    names = {n for n, _ in model.named_parameters()}
    assert {f"model.layers.0.linear_attn.in_proj_{p}.weight" for p in ("qkv", "z", "b", "a")} <= names


def test_tiny_parameter_count_equals_transformers(tiny) -> None:
    model, loaded = tiny
    assert tcpc_params(loaded.config) == transformers_params(model)


@pytest.mark.parametrize(
    ("name", "count"), [("qwen3.5-0.8b", 752_393_024), ("qwen3.5-35b-a3b", 34_660_610_688)]
)
def test_bundled_parameter_count_equals_transformers(name: str, count: int) -> None:
    """transformers' causal LM of the bundled image-text config's text model; the vision encoder
    and merger tcpc does not build (the cards' totals count them) are model_cards.toml's
    unbuilt_params, the rest of transformers' image-text model."""
    data = json.loads((BUNDLED / f"{name}.json").read_text())
    assert tcpc_params(load_model(name).config) == transformers_count(data, data["model_type"]) == count
    fields = {k: v for k, v in data.items() if k != "model_type"}
    with torch.device("meta"):
        whole = AutoModelForImageTextToText.from_config(AutoConfig.for_model(data["model_type"], **fields))
    card = next(c for c in tomllib.loads((BUNDLED / "model_cards.toml").read_text()).values()
                if c["file"] == f"{name}.json")  # fmt: skip
    assert count + card["unbuilt_params"] == transformers_params(whole)


@pytest.mark.parametrize("seq", [1, 7])
def test_projection_flops_equal_flop_counter_mm(tiny, seq) -> None:
    model, loaded = tiny
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


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(tiny, chips: int) -> None:
    _, loaded = tiny
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2)
    if chips == 4:
        with pytest.raises(FrontendError, match=r"2 key heads \(linear_num_key_heads\) do not split"):
            build_decode(loaded.config, F32, 1, 6, chips=chips)
        return
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_fused_layout_misses_transformers(tiny) -> None:
    """Read as Qwen3-Next's per-key-head in_proj_qkvz / in_proj_ba (the same rows, regrouped), the
    split projections give other logits: the layout is what tcpc must get right."""
    model, loaded = tiny
    ssm = loaded.config.ssm
    fused = dataclasses.replace(loaded.config, ssm=dataclasses.replace(ssm, fused_projections=True))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    Hk, Hr, K, V = ssm.groups, ssm.heads // ssm.groups, ssm.state, ssm.head_dim

    def as_fused(name: str) -> np.ndarray:
        if name.endswith("in_proj_qkvz.weight") or name.endswith("in_proj_ba.weight"):
            pre = name.rsplit(".", 2)[0]
            if name.endswith("ba.weight"):
                return np.concatenate([state[f"{pre}.in_proj_b.weight"], state[f"{pre}.in_proj_a.weight"]])
            return np.concatenate([state[f"{pre}.in_proj_qkv.weight"], state[f"{pre}.in_proj_z.weight"]])
        return loaded.checkpoint.load(name)

    assert state["model.layers.0.linear_attn.in_proj_qkv.weight"].shape[0] == 2 * Hk * K + Hk * Hr * V
    ours = generate(fused, as_fused, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(ours - reference_logits(model, PROMPT, [])[0]).max() > 1e-3


def test_moe_renormalises_top_k_whatever_norm_topk_prob_says(tmp_path) -> None:
    """Qwen3.5-MoE's router always renormalises its top-k weights: a config saying
    norm_topk_prob false still matches transformers, and our MoE without the renormalisation
    misses it."""
    model = build(moe=True)
    model.config.norm_topk_prob = False
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config.moe is not None and loaded.config.moe.normalize_top_k
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, 1, "unnormalised")
    unnormalised = dataclasses.replace(loaded.config.moe, normalize_top_k=False)
    plain = dataclasses.replace(loaded.config, moe=unnormalised)
    ours = generate(plain, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(ours - reference_logits(model, PROMPT, [])[0]).max() > 1e-3


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_image_text_model_on_text_matches_transformers(tmp_path, moe: bool) -> None:
    """The published form: Qwen3_5(Moe)ForConditionalGeneration, text_config nested, weights under
    model.language_model. transformers positions text with M-RoPE; our partial RoPE matches it,
    and M-RoPE with its sections shuffled gives text the same logits."""
    text = MOE if moe else DENSE
    kind = "Qwen3_5Moe" if moe else "Qwen3_5"
    config_class = getattr(transformers, f"{kind}Config")
    model_class = getattr(transformers, f"{kind}ForConditionalGeneration")
    config = config_class(text_config=text, vision_config=VISION, attn_implementation="eager")
    model = randomised(model_class(config))
    if moe:
        model.set_experts_implementation("eager")
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config.family == ("qwen3_5_moe" if moe else "qwen3_5")
    assert_prefill_and_decode_match(loaded, partial(reference_logits, model), PROMPT, STEPS, kind)
    shuffled = model_class(config_class(
        text_config={**text, "rope_parameters": {**text["rope_parameters"], "mrope_section": [1, 1, 2]}},
        vision_config=VISION, attn_implementation="eager",
    ))  # fmt: skip
    shuffled.load_state_dict(model.state_dict())
    if moe:
        shuffled.set_experts_implementation("eager")
    np.testing.assert_allclose(reference_logits(shuffled.eval(), PROMPT, [])[0],
                               reference_logits(model, PROMPT, [])[0], atol=1e-6)  # fmt: skip


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "qwen3_5_moe"}, "missing field 'text_config' (a qwen3_5_moe config nests"),
        ({"model_type": "qwen3_5", "text_config": 5}, "text_config: expected an object, got 5"),
        ({"model_type": "qwen3_5", "text_config": {"num_hidden_layers": 3,
                                              "layer_types": ["linear_attention"]}},
         "text_config.layer_types has 1 entries but num_hidden_layers is 3"),
        ({"model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 5},
         "num_experts_per_tok (5) exceeds num_experts (4)"),
    ],
)  # fmt: skip
def test_bad_configs_are_one_line_errors(tmp_path, config: dict, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(FrontendError) as refusal:
        load_model(path)
    assert str(refusal.value).startswith(f"{path}: ") and message in str(refusal.value)
    assert "\n" not in str(refusal.value)
