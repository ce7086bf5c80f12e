"""The recurrence ops (ir/ops/scan.py) against plain sequential numpy written here from the published
recurrences (transformers 5.23.0: MambaMixer.slow_forward, Mamba2Mixer.torch_forward,
torch_recurrent_gated_delta_rule of Qwen3-Next, and the causal nn.Conv1d of the Mamba mixers):
Mamba-1 per channel, Mamba-2 with heads sharing B and C per group, the gated delta rule, the short
convolution, continuing from a carried state, decode with S = 1, the text form and the costs."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import F32, TensorType
from ir.analysis import node_cost
from ir.printer import print_graph
from tcp_compiler.passes.chunked_scan import chunkable

T = TensorType.of


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(29)


def mamba1_reference(x, dt, a, b, c, h0):
    """h[b, d, n] stepped one position at a time, every index spelled out."""
    batch, steps, dims = x.shape
    h = h0.astype(np.float64).copy()
    y = np.zeros((batch, steps, dims))
    for t in range(steps):
        for i in range(batch):
            for d in range(dims):
                h[i, d] = np.exp(dt[i, t, d] * a[d]) * h[i, d] + dt[i, t, d] * b[i, t] * x[i, t, d]
                y[i, t, d] = np.dot(c[i, t], h[i, d])
    return y, h


def mamba2_reference(x, dt, a, b, c, h0):
    """Heads H with one decay each; head h reads group h // (H / G) of B and C."""
    batch, steps, heads, _ = x.shape
    groups = b.shape[2]
    h = h0.astype(np.float64).copy()
    y = np.zeros(x.shape)
    for t in range(steps):
        for i in range(batch):
            for head in range(heads):
                g = head // (heads // groups)
                decay = np.exp(dt[i, t, head] * a[head])
                h[i, head] = decay * h[i, head] + dt[i, t, head] * np.outer(x[i, t, head], b[i, t, g])
                y[i, t, head] = h[i, head] @ c[i, t, g]
    return y, h


def delta_reference(q, k, v, g, beta, h0):
    batch, steps, heads, _ = k.shape
    h = h0.astype(np.float64).copy()  # [B, H, K, V]
    y = np.zeros(v.shape)
    for t in range(steps):
        for i in range(batch):
            for j in range(heads):
                s = h[i, j] * np.exp(g[i, t, j])
                delta = (v[i, t, j] - k[i, t, j] @ s) * beta[i, t, j]
                h[i, j] = s + np.outer(k[i, t, j], delta)
                y[i, t, j] = q[i, t, j] @ h[i, j]
    return y, h


def conv_reference(x, w, window):
    """np.convolve per channel over [window, x]: y_t = sum_j w[j] xx[t + j]."""
    xx = np.concatenate([window, x], axis=1)
    batch, steps, dims = x.shape
    y = np.zeros(x.shape)
    for i in range(batch):
        for d in range(dims):
            y[i, :, d] = np.convolve(xx[i, :, d], w[d][::-1], mode="valid")[:steps]
    return y


def graph_of(kind: str, types: dict[str, TensorType], attrs: dict, outputs=("y", "h")) -> ir.Graph:
    """kind and kind_state over the same inputs (the state op only for the scan family)."""
    g = ir.Graph(kind)
    xs = [g.input(n, t) for n, t in types.items()]
    g.add(kind, *xs, name="y", **attrs)
    if "h" in outputs:
        g.add(f"{kind}_state", *xs, name="h", **attrs)
    g.set_outputs(*outputs)
    return g


def mamba1_case(rng, batch=2, steps=7, dims=5, n=3):
    x = rng.standard_normal((batch, steps, dims)).astype(np.float32)
    dt = np.log1p(np.exp(rng.standard_normal((batch, steps, dims)))).astype(np.float32)  # softplus
    a = -np.exp(rng.standard_normal((dims, n))).astype(np.float32)
    b = rng.standard_normal((batch, steps, n)).astype(np.float32)
    c = rng.standard_normal((batch, steps, n)).astype(np.float32)
    h0 = rng.standard_normal((batch, dims, n)).astype(np.float32)
    return x, dt, a, b, c, h0


def mamba1_types(batch, steps, dims, n):
    return {
        "x": T(F32, B=batch, S=steps, D=dims),
        "dt": T(F32, B=batch, S=steps, D=dims),
        "A": T(F32, D=dims, N=n),
        "Bm": T(F32, B=batch, S=steps, N=n),
        "Cm": T(F32, B=batch, S=steps, N=n),
        "h0": T(F32, B=batch, D=dims, N=n),
    }


def run_mamba1(arrays):
    x, *_ = arrays
    batch, steps, dims = x.shape
    n = arrays[2].shape[1]
    g = graph_of("scan", mamba1_types(batch, steps, dims, n), {"axis": "S"})
    out = ir.interpret(g, dict(zip(["x", "dt", "A", "Bm", "Cm", "h0"], arrays, strict=True)))
    return out["y"], out["h"]


def test_mamba1_selective_scan_matches_the_sequential_recurrence(rng) -> None:
    arrays = mamba1_case(rng)
    y, h = run_mamba1(arrays)
    want_y, want_h = mamba1_reference(*arrays)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
    # the carried state bites: starting from zeros gives another answer
    zero = run_mamba1((*arrays[:5], np.zeros_like(arrays[5])))[0]
    assert np.abs(zero - y).max() > 1e-2


def test_mamba1_continues_from_the_carried_state(rng) -> None:
    """Chunked prefill and decode: the scan of a prefix, then of the rest (and of one step at a
    time, S = 1) from its scan_state, equals the scan of the whole."""
    x, dt, a, b, c, h0 = mamba1_case(rng, steps=6)
    whole_y, whole_h = run_mamba1((x, dt, a, b, c, h0))
    first_y, h = run_mamba1((x[:, :4], dt[:, :4], a, b[:, :4], c[:, :4], h0))
    ys = [first_y]
    for t in (4, 5):
        y_t, h = run_mamba1((x[:, t : t + 1], dt[:, t : t + 1], a, b[:, t : t + 1], c[:, t : t + 1], h))
        ys.append(y_t)
    np.testing.assert_allclose(np.concatenate(ys, axis=1), whole_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, whole_h, rtol=1e-5, atol=1e-5)


def test_a_decay_per_step_matches_the_sequential_recurrence(rng) -> None:
    """A with the sequence axis (RWKV-6's data-dependent decay, dt = 1): step t decays by
    exp(A_t), per head and key channel, and the state is [heads, K, V]; a scan graph with such an
    A has no chunked form here."""
    batch, steps, heads, k, v = 2, 5, 3, 4, 2
    x = rng.standard_normal((batch, steps, heads, v)).astype(np.float32)
    dt = np.ones((batch, steps, heads), np.float32)
    a = -np.exp(rng.standard_normal((batch, steps, heads, k))).astype(np.float32)
    b, c = (rng.standard_normal((batch, steps, heads, k)).astype(np.float32) for _ in range(2))
    h0 = rng.standard_normal((batch, heads, k, v)).astype(np.float32)
    types = {
        "x": T(F32, B=batch, S=steps, H=heads, V=v),
        "dt": T(F32, B=batch, S=steps, H=heads),
        "A": T(F32, B=batch, S=steps, H=heads, K=k),
        "Bm": T(F32, B=batch, S=steps, H=heads, K=k),
        "Cm": T(F32, B=batch, S=steps, H=heads, K=k),
        "h0": T(F32, B=batch, H=heads, K=k, V=v),
    }
    g = graph_of("scan", types, {"axis": "S"})
    out = ir.interpret(g, dict(zip(types, (x, dt, a, b, c, h0), strict=True)))
    h = h0.astype(np.float64).copy()
    want = np.zeros(x.shape)
    for t in range(steps):
        h = np.exp(a[:, t])[..., None] * h + b[:, t][..., None] * x[:, t][:, :, None, :]
        want[:, t] = np.einsum("bhk,bhkv->bhv", c[:, t], h)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["h"], h, rtol=1e-5, atol=1e-5)
    fixed = ir.interpret(g, dict(zip(types, (x, dt, np.repeat(a[:, :1], steps, 1), b, c, h0), strict=True)))
    assert np.abs(fixed["y"] - out["y"]).max() > 1e-2  # the per-step decay bites
    assert not chunkable(g, g["y"])


def test_mamba2_heads_share_b_and_c_per_group(rng) -> None:
    batch, steps, groups, per, p, n = 2, 6, 2, 3, 4, 5
    heads = groups * per
    x = rng.standard_normal((batch, steps, heads, p)).astype(np.float32)
    dt = np.log1p(np.exp(rng.standard_normal((batch, steps, heads)))).astype(np.float32)
    a = -np.exp(rng.standard_normal(heads)).astype(np.float32)
    b = rng.standard_normal((batch, steps, groups, n)).astype(np.float32)
    c = rng.standard_normal((batch, steps, groups, n)).astype(np.float32)
    h0 = rng.standard_normal((batch, heads, p, n)).astype(np.float32)
    types = {
        "x": T(F32, B=batch, S=steps, G=groups, E=per, P=p),
        "dt": T(F32, B=batch, S=steps, G=groups, E=per),
        "A": T(F32, G=groups, E=per),
        "Bm": T(F32, B=batch, S=steps, G=groups, N=n),
        "Cm": T(F32, B=batch, S=steps, G=groups, N=n),
        "h0": T(F32, B=batch, G=groups, E=per, P=p, N=n),
    }
    feeds = {
        "x": x.reshape(batch, steps, groups, per, p),
        "dt": dt.reshape(batch, steps, groups, per),
        "A": a.reshape(groups, per),
        "Bm": b,
        "Cm": c,
        "h0": h0.reshape(batch, groups, per, p, n),
    }
    out = ir.interpret(graph_of("scan", types, {"axis": "S"}), feeds)
    want_y, want_h = mamba2_reference(x, dt, a, b, c, h0)
    np.testing.assert_allclose(out["y"].reshape(want_y.shape), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["h"].reshape(want_h.shape), want_h, rtol=1e-5, atol=1e-5)


def delta_case(rng, batch=2, steps=6, heads=2, kd=4, vd=3):
    def normed(*shape):
        z = rng.standard_normal(shape)
        return (z / np.linalg.norm(z, axis=-1, keepdims=True)).astype(np.float32)

    q, k = normed(batch, steps, heads, kd), normed(batch, steps, heads, kd)
    v = rng.standard_normal((batch, steps, heads, vd)).astype(np.float32)
    g = -np.exp(rng.standard_normal((batch, steps, heads))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.standard_normal((batch, steps, heads))))).astype(np.float32)
    h0 = rng.standard_normal((batch, heads, kd, vd)).astype(np.float32)
    types = {
        "q": T(F32, B=batch, S=steps, H=heads, K=kd),
        "k": T(F32, B=batch, S=steps, H=heads, K=kd),
        "v": T(F32, B=batch, S=steps, H=heads, V=vd),
        "g": T(F32, B=batch, S=steps, H=heads),
        "beta": T(F32, B=batch, S=steps, H=heads),
        "h0": T(F32, B=batch, H=heads, K=kd, V=vd),
    }
    return (q, k, v, g, beta, h0), types


def test_gated_delta_rule_matches_the_sequential_recurrence(rng) -> None:
    arrays, types = delta_case(rng)
    out = ir.interpret(graph_of("delta_scan", types, {"axis": "S"}), dict(zip(types, arrays, strict=True)))
    want_y, want_h = delta_reference(*arrays)
    np.testing.assert_allclose(out["y"], want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["h"], want_h, rtol=1e-5, atol=1e-5)
    # the delta rule bites: a plain gated linear attention (h = e^g h + beta k v^T) differs
    q, k, v, g, beta, h0 = arrays
    h = h0.astype(np.float64)
    for t in range(k.shape[1]):
        h = np.exp(g[:, t, :, None, None]) * h + np.einsum("bh,bhk,bhv->bhkv", beta[:, t], k[:, t], v[:, t])
    assert np.abs(h - out["h"]).max() > 1e-2


def test_conv1d_is_a_causal_depthwise_convolution_with_a_carried_window(rng) -> None:
    batch, steps, dims, taps = 2, 7, 3, 4
    x = rng.standard_normal((batch, steps, dims)).astype(np.float32)
    w = rng.standard_normal((dims, taps)).astype(np.float32)
    window = rng.standard_normal((batch, taps - 1, dims)).astype(np.float32)
    g = ir.Graph("conv")
    xs = [
        g.input("x", T(F32, B=batch, S=steps, D=dims)),
        g.input("w", T(F32, D=dims, K=taps)),
        g.input("win", T(F32, B=batch, S=taps - 1, D=dims)),
    ]
    g.add("conv1d", *xs, name="y", axis="S")
    g.add("concat", "win", "x", name="xx", axis="S")
    g.add("slice", "xx", name="next", axis="S", start=steps, stop=steps + taps - 1)
    g.set_outputs("y", "next")
    out = ir.interpret(g, {"x": x, "w": w, "win": window})
    np.testing.assert_allclose(out["y"], conv_reference(x, w, window), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["next"], x[:, -(taps - 1) :])
    # zeros as the window are the padding of a sequence's start (nn.Conv1d(padding=K-1)[..., :S])
    zero = ir.interpret(g, {"x": x, "w": w, "win": np.zeros_like(window)})["y"]
    np.testing.assert_allclose(zero, conv_reference(x, w, np.zeros_like(window)), rtol=1e-5, atol=1e-5)
    assert np.abs(zero - out["y"]).max() > 1e-2


def test_text_form_round_trips() -> None:
    text = """graph t {
  %x = input() : f32[B=1, S=4, D=3]
  %dt = input() : f32[B=1, S=4, D=3]
  %A = input() : f32[D=3, N=2]
  %Bm = input() : f32[B=1, S=4, N=2]
  %Cm = input() : f32[B=1, S=4, N=2]
  %h0 = input() : f32[B=1, D=3, N=2]
  %y = scan(%x, %dt, %A, %Bm, %Cm, %h0) {axis = S} : f32[B=1, S=4, D=3]
  %h = scan_state(%x, %dt, %A, %Bm, %Cm, %h0) {axis = S} : f32[B=1, D=3, N=2]
  %w = input() : f32[D=3, K=4]
  %win = input() : f32[B=1, S=3, D=3]
  %c = conv1d(%x, %w, %win) {axis = S} : bf16[B=1, S=4, D=3]
  return %y, %h, %c
}
"""
    g = ir.parse(text)
    assert ir.parse(print_graph(g)) == g


def test_costs_count_each_step_of_the_recurrence() -> None:
    """Mamba-1 with dt and x covering D: 8 FLOPs per state element and step for scan (dt*A, exp,
    dt*x per channel, *B, a*h, +u, C*h, +), 6 for scan_state; conv1d 2 per tap and element."""
    batch, steps, dims, n = 1, 16, 8, 4
    types = mamba1_types(batch, steps, dims, n)
    g = graph_of("scan", types, {"axis": "S"})
    state_steps = batch * dims * n * steps
    scan, state = node_cost(g, g["y"]), node_cost(g, g["h"])
    per_channel = batch * steps * dims
    assert scan.flops == 2 * steps * dims * n + per_channel + 5 * state_steps
    assert state.flops == scan.flops - 2 * state_steps
    read = sum(t.nbytes for t in types.values())
    assert (scan.bytes_read, scan.bytes_written) == (read, batch * steps * dims * 4)
    assert state.bytes_written == batch * dims * n * 4
