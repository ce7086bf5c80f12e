"""OLMo 3, Arcee and Apertus beyond the shared oracle tests (test_families.py runs their tiny
models against transformers, test_sharding.py OLMo 3's and Apertus's on 2 and 4 chips): each
special part switched off moves the logits past the oracle's tolerance, the bundled published
configs count transformers' parameters, and the configs are read as transformers 5.23's classes
read them (OLMo 3's per-layer-type RoPE, Apertus's RoPE defaults, xIELU's formula and scalars)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers
from transformers.activations import XIELUActivation

import ir
from tcp_compiler.frontend.builder.ffn import XIELU_BETA, XIELU_EPS
from tcp_compiler.frontend.config import RawConfig, Rope
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params
from tests.oracle.test_families import PROMPT, STEPS, reference_logits
from tests.oracle.tiny_models import build, save

F32 = PRECISIONS["f32"]
BUNDLED_CLASSES = {
    "olmo-3-1025-7b": ("Olmo3Config", "Olmo3ForCausalLM"),
    "apertus-8b-2509": ("ApertusConfig", "ApertusForCausalLM"),
    "afm-4.5b": ("ArceeConfig", "ArceeForCausalLM"),
}


@pytest.mark.parametrize("name", sorted(BUNDLED_CLASSES))
def test_bundled_parameter_count_equals_transformers(name: str) -> None:
    model = bundled_on_meta(name, *BUNDLED_CLASSES[name])
    assert tcpc_params(load_model(name).config) == transformers_params(model)


def _worst(model, loaded, cfg, load=None) -> float:
    """The largest logit gap to `model` over the prompt and 4 decode steps, running `cfg`."""
    result = generate(cfg, load or loaded.checkpoint.load, [PROMPT], F32, STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    theirs = reference_logits(model, PROMPT, result.token_matrix[0].tolist()[:STEPS])
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))


def _off(cfg, part: str):
    """`cfg` with one family part switched off."""
    replace = dataclasses.replace

    def layers(**change):
        return tuple(replace(layer, **{k: f(layer) for k, f in change.items()}) for layer in cfg.layers)

    full_rope = next(layer.rope for layer in cfg.layers if layer.sliding_window is None)
    return {
        "sliding window": lambda: replace(cfg, layers=layers(sliding_window=lambda layer: None)),
        "per-type RoPE": lambda: replace(cfg, layers=layers(rope=lambda layer: full_rope)),
        "RoPE scaling": lambda: replace(cfg, layers=layers(rope=lambda layer: Rope(layer.rope.theta))),
        "ReLU squared": lambda: replace(cfg, mlp=replace(cfg.mlp, activation="relu")),
        "xIELU": lambda: replace(cfg, mlp=replace(cfg.mlp, activation="relu2")),
        "q/k norm": lambda: replace(cfg, attention=replace(cfg.attention, qk_norm="none")),
    }[part]()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """name -> (transformers model, tcpc's load of its checkpoint), built once per family."""
    built = {}

    def get(name: str):
        if name not in built:
            model = build(name)
            built[name] = model, load_model(save(model, tmp_path_factory.mktemp(name)))
        return built[name]

    return get


PARTS = {
    "olmo3": ["sliding window", "per-type RoPE", "RoPE scaling", "q/k norm"],
    "arcee": ["ReLU squared", "RoPE scaling"],
    "apertus": ["xIELU", "RoPE scaling", "q/k norm"],
}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_each_special_part_bites(tiny, name: str) -> None:
    """The oracle test passes with each part on (checked here too) and fails with it off."""
    model, loaded = tiny(name)
    assert _worst(model, loaded, loaded.config) < 1e-4
    for part in PARTS[name]:
        assert _worst(model, loaded, _off(loaded.config, part)) > 1e-3, f"{name}: {part}"


def test_olmo3_tiny_model_slides_and_rotates_by_layer_type(tiny) -> None:
    layers = tiny("olmo3")[1].config.layers
    assert [layer.sliding_window for layer in layers] == [3, None, 3]  # shorter than the prompt
    assert [layer.rope.kind for layer in layers] == ["default", "yarn", "default"]
    assert [layer.rope.theta for layer in layers] == [1000.0, 100.0, 1000.0]


def test_apertus_xielu_scalars_are_read_from_the_checkpoint(tiny) -> None:
    """Moving one layer's alpha_p or alpha_n in transformers' model moves its logits away from
    tcpc's run on the checkpoint: the scalars are read, not the initial 0.8."""
    loaded = tiny("apertus")[1]
    for scalar in ("alpha_p", "alpha_n"):
        moved = build("apertus")
        with torch.no_grad():
            getattr(moved.model.layers[1].mlp.act_fn, scalar).add_(0.5)
        assert _worst(moved, loaded, loaded.config) > 1e-3, scalar


def test_xielu_op_equals_transformers_activation() -> None:
    """The IR op against transformers' XIELUActivation (python path) with moved scalars, on both
    sides of zero and around eps, where its negative side clips the exponent."""
    act = XIELUActivation(beta=XIELU_BETA, eps=XIELU_EPS, dtype=torch.float32)
    with torch.no_grad():
        act.alpha_p.fill_(0.37)
        act.alpha_n.fill_(-0.61)
    x = np.concatenate([np.linspace(-8, 8, 61), [-1e-7, -1e-6, -2e-6, 1e-7, 0.0]]).astype(np.float32)
    g = ir.Graph("xielu")
    xs = g.input("x", ir.TensorType.of(ir.F32, N=x.size))
    ap, an = (g.input(n, ir.TensorType.of(ir.F32)) for n in ("ap", "an"))
    g.add("xielu", xs, ap, an, name="y", beta=XIELU_BETA, eps=XIELU_EPS)
    g.set_outputs("y")
    ours = ir.interpret(g, {"x": x, "ap": np.float32(0.37), "an": np.float32(-0.61)})["y"]
    with torch.no_grad():
        theirs = act(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def _read(fields: dict) -> object:
    return read_model_config(RawConfig(fields, "config.json", fields["model_type"]), "t")


SIZES = dict(vocab_size=97, hidden_size=64, intermediate_size=48, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2)  # fmt: skip


def _olmo3_ropes(fields: dict) -> dict[str, dict]:
    return transformers.Olmo3Config(**SIZES, **fields).rope_parameters


@pytest.mark.parametrize(
    "fields",
    [
        {},  # class defaults: base 500000 on both types, every 4th layer full
        {"rope_theta": 1234.0},  # the older field: the full layers only
        {"rope_theta": 1234.0, "max_position_embeddings": 64,
         "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},
        {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 77.0}}},
        {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 77.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 88.0}}},
    ],
)  # fmt: skip
def test_olmo3_rope_per_layer_type_as_olmo3config_sets_it(fields: dict) -> None:
    cfg = _read({"model_type": "olmo3", **SIZES, **fields})
    config = transformers.Olmo3Config(**SIZES, **fields)
    ropes = _olmo3_ropes(fields)
    for layer, kind in zip(cfg.layers, config.layer_types, strict=True):
        assert (layer.sliding_window == config.sliding_window) == (kind == "sliding_attention")
        assert layer.rope.theta == ropes[kind]["rope_theta"]
        assert layer.rope.kind == ropes[kind]["rope_type"]
    assert cfg.norms.eps == config.rms_norm_eps == 1e-5


@pytest.mark.parametrize(
    "fields",
    [
        {},  # the class's llama3 defaults
        {"rope_theta": 500000, "rope_scaling": None},  # no scaling: the defaults, rope_theta dropped
        {"rope_theta": 1234.0, "max_position_embeddings": 64,
         "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
        {"rope_parameters": {"rope_type": "default", "rope_theta": 99.0}},
    ],
)  # fmt: skip
def test_apertus_rope_as_apertusconfig_sets_it(fields: dict) -> None:
    cfg = _read({"model_type": "apertus", **SIZES, **fields})
    params = transformers.ApertusConfig(**SIZES, **fields).rope_parameters
    rope = cfg.layers[0].rope
    assert (rope.kind, rope.theta) == (params["rope_type"], params["rope_theta"])
    if rope.kind == "llama3":
        assert (rope.factor, rope.original_max_positions) == (
            params["factor"], params["original_max_position_embeddings"]
        )  # fmt: skip


def test_apertus_ignores_the_fields_transformers_does_not_read() -> None:
    """ApertusMLP has no biases whatever mlp_bias says; q/k norm is always on."""
    cfg = _read({"model_type": "apertus", **SIZES, "mlp_bias": True, "qk_norm": False, "post_norm": True})
    assert not cfg.mlp.bias and cfg.attention.qk_norm == "per_head" and cfg.mlp.activation == "xielu"
    assert cfg.mlp.kind == "plain" and cfg.norms.eps == 1e-5


def test_bundled_olmo3_scales_only_its_full_layers() -> None:
    data = json.loads((BUNDLED / "olmo-3-1025-7b.json").read_text())
    config = transformers.Olmo3Config(**{k: v for k, v in data.items() if k != "model_type"})
    layers = load_model("olmo-3-1025-7b").config.layers
    for layer, kind in zip(layers, config.layer_types, strict=True):
        assert layer.rope.kind == config.rope_parameters[kind]["rope_type"]
        assert (layer.sliding_window is None) == (kind == "full_attention")
    assert {layer.rope.kind for layer in layers} == {"yarn", "default"}
