"""Layer variants no transformers model has, against an independent numpy decoder written here:
DeepNet's scaled post-LN residual with sinusoidal positions, and a pre-RMSNorm GQA model with no
position information at all. Prefill and 4 decode steps (through the KV cache) must match the
reference's logits within 1e-4; the reference recomputes the whole sequence every step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate

SIZES = {
    "model_type": "tcpc_decoder", "vocab_size": 61, "hidden_size": 32, "intermediate_size": 40,
    "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 32,
}  # fmt: skip
VARIANTS = {
    "deepnet_sinusoidal": dict(
        SIZES, norm="layer_norm", block="post_norm", residual_scale="deepnet", position="sinusoidal",
        mlp="plain", hidden_act="relu", attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
    ),
    "no_positions_gqa": dict(SIZES, num_key_value_heads=2, position="none", hidden_act="gelu"),
}  # fmt: skip
PROMPT = [3, 14, 15, 9, 26, 5]


def _weights(raw: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights under the canonical names, in Hugging Face [out, in] layouts."""
    d, f, v = raw["hidden_size"], raw["intermediate_size"], raw["vocab_size"]
    h, hkv = raw["num_attention_heads"], raw.get("num_key_value_heads", raw["num_attention_heads"])
    k = d // h
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "model.norm.bias": (d,)}
    if not raw.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, d)
    for i in range(raw["num_hidden_layers"]):
        pre = f"model.layers.{i}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes.update({f"{pre}.{norm}.weight": (d,), f"{pre}.{norm}.bias": (d,)})
        for name, rows in (("q", h * k), ("k", hkv * k), ("v", hkv * k)):
            shapes.update(
                {
                    f"{pre}.self_attn.{name}_proj.weight": (rows, d),
                    f"{pre}.self_attn.{name}_proj.bias": (rows,),
                }
            )
        shapes.update({f"{pre}.self_attn.o_proj.weight": (d, h * k), f"{pre}.self_attn.o_proj.bias": (d,)})
        for name, shape in (("gate", (f, d)), ("up", (f, d)), ("down", (d, f))):
            shapes.update(
                {f"{pre}.mlp.{name}_proj.weight": shape, f"{pre}.mlp.{name}_proj.bias": (shape[0],)}
            )
    return {
        n: (0.1 * rng.standard_normal(s) + (1.0 if "norm.weight" in n else 0.0)).astype(np.float32)
        for n, s in shapes.items()
    }  # fmt: skip


def _norm(x: np.ndarray, w: dict, prefix: str, layer: bool) -> np.ndarray:
    if layer:
        x = x - x.mean(-1, keepdims=True)
        return (
            x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]
        )
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w[f"{prefix}.weight"]


def _act(x: np.ndarray, name: str) -> np.ndarray:
    if name == "relu":
        return np.maximum(x, 0.0)
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def reference_logits(raw: dict, w: dict, tokens: list[int]) -> np.ndarray:
    """Last-position logits of the whole sequence, float64, written from the papers' formulas."""
    w = {n: a.astype(np.float64) for n, a in w.items()}
    d, n_layers = raw["hidden_size"], raw["num_hidden_layers"]
    h = raw["num_attention_heads"]
    hkv, k = raw.get("num_key_value_heads", h), d // h
    layer_norm, post = raw.get("norm") == "layer_norm", raw.get("block") == "post_norm"
    alpha = (2.0 * n_layers) ** 0.25 if raw.get("residual_scale") == "deepnet" else 1.0
    bias = raw.get("attention_bias", False)
    s = len(tokens)
    x = w["model.embed_tokens.weight"][tokens]
    if raw.get("position") == "sinusoidal":  # Vaswani et al. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d))
        pe = np.zeros((s, d))
        for pos in range(s):
            for i in range(0, d, 2):
                pe[pos, i] = math.sin(pos / 10000 ** (i / d))
                pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
        x = x + pe

    def linear(y: np.ndarray, name: str, with_bias: bool) -> np.ndarray:
        out = y @ w[f"{name}.weight"].T
        return out + w[f"{name}.bias"] if with_bias else out

    def attention(y: np.ndarray, pre: str) -> np.ndarray:
        q = linear(y, f"{pre}.self_attn.q_proj", bias).reshape(s, h, k)
        kk = linear(y, f"{pre}.self_attn.k_proj", bias).reshape(s, hkv, k).repeat(h // hkv, axis=1)
        vv = linear(y, f"{pre}.self_attn.v_proj", bias).reshape(s, hkv, k).repeat(h // hkv, axis=1)
        scores = np.einsum("qhk,shk->hqs", q, kk) / math.sqrt(k)
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return linear(np.einsum("hqs,shk->qhk", p, vv).reshape(s, d), f"{pre}.self_attn.o_proj", bias)

    def mlp(y: np.ndarray, pre: str) -> np.ndarray:
        with_bias = raw.get("mlp_bias", False)
        up = linear(y, f"{pre}.mlp.up_proj", with_bias)
        if raw.get("mlp", "gated") == "gated":
            gate = linear(y, f"{pre}.mlp.gate_proj", with_bias)
            hidden = _act(gate, raw.get("hidden_act", "silu")) * up
        else:
            hidden = _act(up, raw.get("hidden_act", "silu"))
        return linear(hidden, f"{pre}.mlp.down_proj", with_bias)

    for i in range(n_layers):
        pre = f"model.layers.{i}"
        n1, n2 = f"{pre}.input_layernorm", f"{pre}.post_attention_layernorm"
        if post:  # DeepNet: x_{l+1} = LN(alpha x_l + G(x_l))
            x = _norm(alpha * x + attention(x, pre), w, n1, layer_norm)
            x = _norm(alpha * x + mlp(x, pre), w, n2, layer_norm)
        else:
            x = alpha * x + attention(_norm(x, w, n1, layer_norm), pre)
            x = alpha * x + mlp(_norm(x, w, n2, layer_norm), pre)
    last = x[-1]
    if not post:
        last = _norm(last, w, "model.norm", layer_norm)
    head = w["model.embed_tokens.weight"] if raw.get("tie_word_embeddings") else w["lm_head.weight"]
    return head @ last


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_prefill_and_decode_match_the_numpy_reference(variant: str) -> None:
    raw = VARIANTS[variant]
    cfg = read_model_config(RawConfig(raw, f"{variant}.json"), variant)
    weights = _weights(raw, np.random.default_rng(0))
    result = generate(cfg, weights.__getitem__, [PROMPT], PRECISIONS["f32"], 4)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    tokens = result.token_matrix[0].tolist()
    for step, logits in enumerate(ours):
        expected = reference_logits(raw, weights, PROMPT + tokens[:step])
        np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0, err_msg=f"{variant} step {step}")
    assert np.abs(ours[0]).max() > 0.05, "logits too small to tell a bug from noise"


def test_deepnet_alpha_and_sinusoidal_table_are_what_the_config_says() -> None:
    cfg = read_model_config(RawConfig(VARIANTS["deepnet_sinusoidal"], "d.json"), "d")
    assert cfg.residual.scale == pytest.approx(6**0.25) and cfg.residual.block == "post"
    assert not cfg.norms.final
    assert cfg.positions.kind == "sinusoidal" and cfg.norms.kind == "layer" and cfg.rotary == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"norm": "batch_norm"}, "field 'norm' = 'batch_norm' is not one of rms_norm, layer_norm"),
        ({"position": "relative"}, "field 'position' = 'relative' is not one of rope, learned, alibi"),
        ({"residual_scale": "big"}, 'residual_scale: expected a number > 0 and <= 1e+06 or "deepnet"'),
        ({"block": "sandwich"}, "field 'block' = 'sandwich' is not one of pre_norm, post_norm, parallel"),
        ({"rotary_pct": 0.01}, "rotary_pct gives 0 rotary dims of 8"),
    ],
)
def test_bad_variant_fields_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig({**SIZES, **change}, "v.json"), "v")
    assert str(e.value).startswith("v.json: ") and message in str(e.value) and "\n" not in str(e.value)


def test_gemma_scales_embeddings_by_sqrt_hidden_in_the_table_dtype() -> None:
    """transformers holds Gemma's normalizer in the model dtype: sqrt(1152) = 33.94 is 34.0 in bf16."""
    from tcp_compiler.frontend.builder import build_prefill
    from tcp_compiler.frontend.model import load_model
    from tcp_compiler.frontend.precision import precision

    cfg = load_model("gemma-3-1b").config
    for dtype, expected in (("bf16", 34.0), ("f32", float(np.float32(1152**0.5)))):
        graph = build_prefill(cfg, precision(dtype), 1, 4).graph
        scale = graph[graph["embed.scaled"].operands[1]]
        assert scale.attrs["value"] == expected, dtype
