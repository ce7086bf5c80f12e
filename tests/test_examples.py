"""The hand-written graphs in examples/ir: they load, round-trip through text, and compute what
independent numpy implementations (written here, without `ir`) compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ir

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "ir"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.tir"))


def test_examples_exist():
    names = {p.name for p in EXAMPLE_FILES}
    assert {"gemm.tir", "attention_gqa_causal.tir", "llama_decoder_layer.tir"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_loads_and_round_trips(path):
    g = ir.load(path)
    ir.verify(g)
    text = ir.print_graph(g)
    again = ir.parse(text)
    ir.verify(again)
    assert ir.print_graph(again) == text
    assert again == g


# -- GEMM -----------------------------------------------------------------------------------------


def test_gemm_matches_numpy_with_bf16_inputs():
    g = ir.load(EXAMPLES / "gemm.tir")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 512)).astype(np.float32)
    b = rng.standard_normal((512, 128)).astype(np.float32)

    got = ir.interpret(g, {"a": a}, {"b": b})["c"]

    a16 = ir.BF16.round(a).astype(np.float64)
    b16 = ir.BF16.round(b).astype(np.float64)
    expected = a16 @ b16
    assert got.dtype == np.float32 and got.shape == (256, 128)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())

    # The inputs really are rounded to bf16: the unrounded product is measurably different.
    unrounded = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - unrounded).max() > 1e-3


# -- causal GQA attention ---------------------------------------------------------------------------


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, repeat: bool = True) -> np.ndarray:
    """q [B, H, S, K], k and v [B, Hkv, S, K]; Hugging Face style: KV heads repeated G times.

    `repeat=False` tiles the KV heads instead (query head h -> KV head h % Hkv), the wrong
    convention, so the tests can show they tell the two apart.
    """
    groups = q.shape[1] // k.shape[1]
    if repeat:
        k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    else:
        k, v = np.tile(k, (1, groups, 1, 1)), np.tile(v, (1, groups, 1, 1))
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q.shape[2]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(np.triu(np.ones((s, s), dtype=bool), k=1), -np.inf, scores)
    return softmax(scores) @ v


def _attention_inputs(seed: int):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, 8, 16, 32)).astype(np.float32)
    k = rng.standard_normal((1, 2, 16, 32)).astype(np.float32)
    v = rng.standard_normal((1, 2, 16, 32)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("seed", [1, 2])
def test_attention_matches_numpy(seed):
    g = ir.load(EXAMPLES / "attention_gqa_causal.tir")
    q, k, v = _attention_inputs(seed)
    got = ir.interpret(g, {"q": q, "k": k, "v": v})["out"]
    assert got.shape == (1, 8, 16, 32)
    np.testing.assert_allclose(got, reference_attention(q, k, v), rtol=0, atol=1e-5)


def test_attention_test_detects_wrong_conventions():
    g = ir.load(EXAMPLES / "attention_gqa_causal.tir")
    q, k, v = _attention_inputs(1)
    got = ir.interpret(g, {"q": q, "k": k, "v": v})["out"]
    # Mapping query heads to KV heads the other way (h % Hkv) gives a clearly different result.
    assert np.abs(got - reference_attention(q, k, v, repeat=False)).max() > 1e-2
    # So does changing one key of one KV head in a position every query sees.
    k2 = k.copy()
    k2[0, 1, 0, 3] += 0.5
    assert np.abs(got - reference_attention(q, k2, v)).max() > 1e-2
    # The first query position sees only the first key: its output is exactly that value row.
    np.testing.assert_allclose(got[0, :, 0], np.repeat(v[0, :, 0], 4, axis=0), atol=1e-6)


# -- Llama decoder layer --------------------------------------------------------------------------

B, S, D, H, HKV, HEAD, FFN, P = 1, 8, 64, 8, 2, 8, 128, 32
THETA = 10000.0
EPS = 1e-5
PREFIX = "model.layers.0."


def hf_weights(seed: int) -> dict[str, np.ndarray]:
    """Random weights in Hugging Face layouts (nn.Linear: [out_features, in_features])."""
    rng = np.random.default_rng(seed)

    def linear(out_features, in_features):
        return 0.1 * rng.standard_normal((out_features, in_features))

    return {
        "input_layernorm.weight": 1 + 0.1 * rng.standard_normal(D),
        "self_attn.q_proj.weight": linear(H * HEAD, D),
        "self_attn.k_proj.weight": linear(HKV * HEAD, D),
        "self_attn.v_proj.weight": linear(HKV * HEAD, D),
        "self_attn.o_proj.weight": linear(D, H * HEAD),
        "post_attention_layernorm.weight": 1 + 0.1 * rng.standard_normal(D),
        "mlp.gate_proj.weight": linear(FFN, D),
        "mlp.up_proj.weight": linear(FFN, D),
        "mlp.down_proj.weight": linear(D, FFN),
    }


def rope_cos_sin(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HF LlamaRotaryEmbedding: cos, sin of shape positions.shape + [HEAD], halves repeated."""
    inv_freq = 1.0 / THETA ** (np.arange(0, HEAD, 2, dtype=np.float64) / HEAD)
    freqs = positions[..., None].astype(np.float64) * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def rotate_half(x: np.ndarray) -> np.ndarray:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return np.concatenate([-x2, x1], axis=-1)


def apply_rope(x: np.ndarray, positions: np.ndarray, interleaved: bool = False) -> np.ndarray:
    """x [B, n, S, HEAD]. HF half-split pairing by default; `interleaved` pairs 2i with 2i + 1
    (the GPT-J / Meta checkpoint convention) so a test can show the two are told apart."""
    cos, sin = rope_cos_sin(positions)  # [B, S, HEAD]
    cos, sin = cos[:, None], sin[:, None]  # broadcast over heads
    if not interleaved:
        return x * cos + rotate_half(x) * sin
    c, s = cos[..., : HEAD // 2], sin[..., : HEAD // 2]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = even * s + odd * c
    return out


def rms_norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(variance + EPS))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def reference_decoder_layer(
    x: np.ndarray, positions: np.ndarray, w: dict[str, np.ndarray], interleaved: bool = False
):
    """A Llama decoder layer written the Hugging Face way; returns (out, k_cache, v_cache)."""
    x = x.astype(np.float64)
    b, s, _ = x.shape

    def heads(t, n):  # [B, S, n * HEAD] -> [B, n, S, HEAD]
        return t.reshape(b, s, n, HEAD).transpose(0, 2, 1, 3)

    n1 = rms_norm(x, w["input_layernorm.weight"])
    q = heads(n1 @ w["self_attn.q_proj.weight"].T, H)
    k = heads(n1 @ w["self_attn.k_proj.weight"].T, HKV)
    v = heads(n1 @ w["self_attn.v_proj.weight"].T, HKV)

    q = apply_rope(q, positions, interleaved)
    k = apply_rope(k, positions, interleaved)

    attn = reference_attention(q, k, v)  # [B, H, S, HEAD]
    attn = attn.transpose(0, 2, 1, 3).reshape(b, s, H * HEAD)
    h = x + attn @ w["self_attn.o_proj.weight"].T

    n2 = rms_norm(h, w["post_attention_layernorm.weight"])
    gate = n2 @ w["mlp.gate_proj.weight"].T
    up = n2 @ w["mlp.up_proj.weight"].T
    out = h + (silu(gate) * up) @ w["mlp.down_proj.weight"].T
    return out, k, v


def rope_table(transposed: bool = False) -> np.ndarray:
    """The IR's RoPE table [P, Kp, R, T] from the same cos / sin as the reference.

    out[t, kp] = sum_r table[p, kp, r, t] * in[r, kp], where in[r, kp] is head element
    r * Kp + kp (rotate_half pairs element kp with kp + HEAD/2).
    `transposed=True` swaps R and T (a rotation by -angle), so a test can check it is noticed.
    """
    cos, sin = rope_cos_sin(np.arange(P))  # [P, HEAD]; the two halves are equal
    c, s = cos[:, : HEAD // 2], sin[:, : HEAD // 2]
    table = np.empty((P, HEAD // 2, 2, 2))
    table[:, :, 0, 0] = c
    table[:, :, 0, 1] = s
    table[:, :, 1, 0] = -s
    table[:, :, 1, 1] = c
    if transposed:
        table = table.transpose(0, 1, 3, 2)
    return np.ascontiguousarray(table, dtype=np.float32)


def ir_params(w: dict[str, np.ndarray], table: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """HF weights in the example graph's param layouts ([in, out], heads split out)."""
    layouts = {
        "input_layernorm.weight": lambda a: a,
        "self_attn.q_proj.weight": lambda a: a.T.reshape(D, H, HEAD),
        "self_attn.k_proj.weight": lambda a: a.T.reshape(D, HKV, HEAD),
        "self_attn.v_proj.weight": lambda a: a.T.reshape(D, HKV, HEAD),
        "self_attn.o_proj.weight": lambda a: a.T.reshape(H, HEAD, D),
        "post_attention_layernorm.weight": lambda a: a,
        "mlp.gate_proj.weight": lambda a: a.T,
        "mlp.up_proj.weight": lambda a: a.T,
        "mlp.down_proj.weight": lambda a: a.T,
    }
    params = {PREFIX + name: f(w[name]).astype(np.float32) for name, f in layouts.items()}
    params["rope_table"] = rope_table() if table is None else table
    return params


def _layer_inputs(seed: int, offset: int):
    x = np.random.default_rng(seed).standard_normal((B, S, D)).astype(np.float32)
    positions = (offset + np.arange(S, dtype=np.int32))[None].repeat(B, axis=0)
    return x, positions


def _run_layer(x, positions, params):
    g = ir.load(EXAMPLES / "llama_decoder_layer.tir")
    got = ir.interpret(g, {"x": x, "pos": positions}, params)
    return got["out"], got["k_cache"], got["v"]


@pytest.mark.parametrize("offset", [0, 5], ids=["pos0", "pos5"])
def test_decoder_layer_matches_numpy(offset):
    w = hf_weights(10 + offset)
    x, positions = _layer_inputs(20 + offset, offset)
    out, k_cache, v_cache = _run_layer(x, positions, ir_params(w))

    ref_out, ref_k, ref_v = reference_decoder_layer(x, positions, w)
    assert out.shape == (B, S, D)
    assert k_cache.shape == v_cache.shape == (B, HKV, S, HEAD)
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-4)
    np.testing.assert_allclose(k_cache, ref_k, rtol=0, atol=1e-4)
    np.testing.assert_allclose(v_cache, ref_v, rtol=0, atol=1e-4)


def test_decoder_layer_test_detects_changes():
    w = hf_weights(10)
    x, positions = _layer_inputs(20, 5)
    out, k_cache, _ = _run_layer(x, positions, ir_params(w))
    ref_out, ref_k, _ = reference_decoder_layer(x, positions, w)

    # One perturbed weight in the graph's params moves the output well beyond the tolerance.
    params = ir_params(w)
    params[PREFIX + "mlp.down_proj.weight"][3, 7] += 0.1
    out_perturbed, _, _ = _run_layer(x, positions, params)
    assert np.abs(out_perturbed - ref_out).max() > 1e-3

    # The positions matter: the reference at positions 0..S-1 gives different keys.
    _, ref_k0, _ = reference_decoder_layer(x, positions - 5, w)
    assert np.abs(k_cache - ref_k0).max() > 1e-3

    # The graph pairs elements the rotate_half way, not the interleaved way.
    ref_out_il, ref_k_il, _ = reference_decoder_layer(x, positions, w, interleaved=True)
    assert np.abs(k_cache - ref_k_il).max() > 1e-3
    assert np.abs(out - ref_out_il).max() > 1e-3

    # A table holding the transposed rotations (angle -theta) is caught in the keys and the output.
    out_bad, k_bad, _ = _run_layer(x, positions, ir_params(w, rope_table(transposed=True)))
    assert np.abs(k_bad - ref_k).max() > 1e-3
    assert np.abs(out_bad - ref_out).max() > 1e-3
    # ... while the correct table matches.
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-4)
    np.testing.assert_allclose(k_cache, ref_k, rtol=0, atol=1e-4)


def test_decoder_layer_rejects_out_of_range_positions():
    w = hf_weights(10)
    x, positions = _layer_inputs(20, P - S + 1)  # last position is P, one past the table
    with pytest.raises(ir.InterpretError, match="axis 'P' has size 32"):
        _run_layer(x, positions, ir_params(w))


# -- Mamba-2 mixer ----------------------------------------------------------------------------------


def reference_mamba2_mixer(xbc, win, dt_raw, h0, conv_w, conv_b, dt_bias, a_log, d):
    """Written from Mamba2Mixer.torch_forward (transformers 5.23.0): the causal depthwise conv over
    [window, x], SiLU, split, softplus(dt + bias), then one head at a time, one step at a time."""
    joined = np.concatenate([win, xbc], axis=1)[0]  # [11, 24]
    conv = np.stack([np.convolve(joined[:, c], conv_w[c][::-1], mode="valid") for c in range(24)], axis=1)
    act = conv + conv_b
    act = act / (1 + np.exp(-act))
    x, b, c = act[:, :8].reshape(8, 2, 4), act[:, 8:16], act[:, 16:24]
    dt = np.log1p(np.exp(dt_raw[0] + dt_bias))  # [8, 2]
    a = -np.exp(a_log)
    h = h0[0, 0].astype(np.float64).copy()  # [2, 4, 8]
    out = np.zeros((8, 2, 4))
    for t in range(8):
        for head in range(2):
            h[head] = np.exp(dt[t, head] * a[head]) * h[head] + dt[t, head] * np.outer(x[t, head], b[t])
            out[t, head] = h[head] @ c[t] + d[head] * x[t, head]
    return out.reshape(1, 8, 1, 2, 4), h.reshape(1, 1, 2, 4, 8), joined[-3:][None]


def test_mamba2_mixer_matches_numpy():
    rng = np.random.default_rng(7)
    feeds = {
        "xbc": rng.standard_normal((1, 8, 24)).astype(np.float32),
        "win": rng.standard_normal((1, 3, 24)).astype(np.float32),
        "dt_raw": rng.standard_normal((1, 8, 2)).astype(np.float32),
        "h0": rng.standard_normal((1, 1, 2, 4, 8)).astype(np.float32),
    }
    params = {
        "conv_w": rng.standard_normal((24, 4)).astype(np.float32) * 0.5,
        "conv_b": rng.standard_normal(24).astype(np.float32) * 0.1,
        "dt_bias": rng.standard_normal(2).astype(np.float32),
        "A_log": rng.standard_normal(2).astype(np.float32),
        "D": rng.standard_normal(2).astype(np.float32),
    }
    got = ir.interpret(ir.load(EXAMPLES / "mamba2_mixer.tir"), feeds, params)
    want = reference_mamba2_mixer(*feeds.values(), *params.values())
    for name, ref in zip(("out", "h", "next_win"), want, strict=True):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-4)
