"""The chunked form of the selective scan (tcp_compiler/passes/chunked_scan.py) equals the sequential
scan it replaces, for Mamba-2's per-head decay, at chunk lengths that divide the sequence, leave a
remainder, exceed it or are 1; a scan and its scan_state share one chunked computation; Mamba-1's
per-state-element decay is refused (SSD's decays do not factor out of C.B there)."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from ir import BF16, F32, TensorType
from ir.analysis import analyze
from ir.errors import VerifyError
from tcp_compiler.passes.chunked_scan import block_scans, chunk_scans, chunkable

T = TensorType.of


def mamba2_graph(steps: int, dtype=F32, outputs=("y", "h"), batch=2, groups=2, per=2, p=3, n=4) -> ir.Graph:
    g = ir.Graph("ssd")
    xs = [
        g.input("x", T(dtype, B=batch, S=steps, G=groups, E=per, P=p)),
        g.input("dt", T(dtype, B=batch, S=steps, G=groups, E=per)),
        g.input("A", T(dtype, G=groups, E=per)),
        g.input("Bm", T(dtype, B=batch, S=steps, G=groups, N=n)),
        g.input("Cm", T(dtype, B=batch, S=steps, G=groups, N=n)),
        g.input("h0", T(F32, B=batch, G=groups, E=per, P=p, N=n)),
    ]
    if dtype != F32:
        xs[5] = g.add("cast", xs[5], name="h0c", type=xs[5].type.with_dtype(dtype))
    if "y" in outputs:
        g.add("scan", *xs, name="y", axis="S")
    if "h" in outputs:
        g.add("scan_state", *xs, name="h", axis="S", type=T(F32, B=batch, G=groups, E=per, P=p, N=n))
    g.set_outputs(*outputs)
    return g


def feeds(g: ir.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in g.nodes:
        if n.kind != "input":
            continue
        z = rng.standard_normal(n.type.shape).astype(np.float32)
        if n.name == "dt":
            z = np.log1p(np.exp(z))  # softplus: positive steps
        elif n.name == "A":
            z = -np.exp(z)
        out[n.name] = z
    return out


@pytest.mark.parametrize(("steps", "chunk"), [(8, 4), (8, 8), (7, 3), (5, 8), (6, 1), (9, 2)])
def test_chunked_equals_sequential(steps: int, chunk: int) -> None:
    g = mamba2_graph(steps)
    chunked = chunk_scans(g, {"y": chunk, "h": chunk})
    assert not chunked.of_kind("scan") and not chunked.of_kind("scan_state")
    # one running sum within chunks and one recurrence over them, shared by the scan and its state
    assert [n.name for n in chunked.of_kind("recurrence")] == ["y.cum_m", "y.states"]
    f = feeds(g, steps * 10 + chunk)
    want, got = ir.interpret(g, f), ir.interpret(chunked, f)
    for name in ("y", "h"):
        np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("outputs", [("y",), ("h",)])
def test_scan_or_its_state_alone(outputs) -> None:
    g = mamba2_graph(6, outputs=outputs)
    chunked = chunk_scans(g, dict.fromkeys(outputs, 4))
    f = feeds(g, 3)
    got, want = ir.interpret(chunked, f)[outputs[0]], ir.interpret(g, f)[outputs[0]]
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_bf16_operands_keep_their_result_types() -> None:
    g = mamba2_graph(8, dtype=BF16)
    chunked = chunk_scans(g, {"y": 4, "h": 4})
    assert chunked["y"].type == g["y"].type and chunked["h"].type == g["h"].type
    f = feeds(g, 5)
    np.testing.assert_allclose(
        ir.interpret(chunked, f)["y"].astype(np.float32), ir.interpret(g, f)["y"].astype(np.float32),
        rtol=3e-2, atol=3e-2,
    )  # fmt: skip


def test_the_work_moves_to_contractions() -> None:
    """The chunked form's FLOPs are mostly einsums (Contraction Engine work); the recurrence left
    runs once per chunk, not per position."""
    g = mamba2_graph(64, batch=1, groups=1, per=4, p=16, n=16)
    chunked = chunk_scans(g, {"y": 16, "h": 16})
    by_kind = analyze(chunked).flops_by_kind
    assert by_kind["einsum"] > 0.5 * sum(by_kind.values())
    assert chunked["y.states"].type.size("Sc") == 4


def test_mamba1_decay_per_state_element_is_not_chunkable() -> None:
    g = ir.Graph("m1")
    xs = [
        g.input("x", T(F32, B=1, S=4, D=3)),
        g.input("dt", T(F32, B=1, S=4, D=3)),
        g.input("A", T(F32, D=3, N=2)),
        g.input("Bm", T(F32, B=1, S=4, N=2)),
        g.input("Cm", T(F32, B=1, S=4, N=2)),
        g.input("h0", T(F32, B=1, D=3, N=2)),
    ]
    g.add("scan", *xs, name="y", axis="S")
    g.set_outputs("y")
    assert not chunkable(g, g["y"])
    with pytest.raises(VerifyError, match="has no chunked form"):
        chunk_scans(g, {"y": 2})
    assert chunkable(mamba2_graph(4), mamba2_graph(4)["y"])


def delta_graph(steps: int, outputs=("y", "h"), batch=2, heads=2, kd=4, vd=3) -> ir.Graph:
    g = ir.Graph("gdn")
    xs = [
        g.input("q", T(F32, B=batch, S=steps, H=heads, K=kd)),
        g.input("k", T(F32, B=batch, S=steps, H=heads, K=kd)),
        g.input("v", T(F32, B=batch, S=steps, H=heads, V=vd)),
        g.input("g", T(F32, B=batch, S=steps, H=heads)),
        g.input("beta", T(F32, B=batch, S=steps, H=heads)),
        g.input("h0", T(F32, B=batch, H=heads, K=kd, V=vd)),
    ]
    if "y" in outputs:
        g.add("delta_scan", *xs, name="y", axis="S")
    if "h" in outputs:
        g.add("delta_scan_state", *xs, name="h", axis="S")
    g.set_outputs(*outputs)
    return g


def delta_feeds(g: ir.Graph, seed: int) -> dict[str, np.ndarray]:
    """Qwen3-Next's ranges: l2-normalised q and k, log decays g < 0, beta in (0, 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in g.nodes:
        if n.kind == "input":
            z = rng.standard_normal(n.type.shape).astype(np.float32)
            if n.name in ("q", "k"):
                z /= np.linalg.norm(z, axis=-1, keepdims=True)
            elif n.name == "g":
                z = -np.exp(z) * 0.3
            elif n.name == "beta":
                z = 1 / (1 + np.exp(-z))
            out[n.name] = z.astype(np.float32)
    return out


@pytest.mark.parametrize(("steps", "chunk"), [(8, 4), (8, 8), (7, 3), (5, 8), (6, 1), (16, 16), (130, 64)])
def test_chunked_delta_rule_equals_sequential(steps: int, chunk: int) -> None:
    g = delta_graph(steps)
    chunked = chunk_scans(g, {"y": chunk, "h": chunk})
    assert not chunked.of_kind("delta_scan") and not chunked.of_kind("delta_scan_state")
    (states,) = [n for n in chunked.of_kind("recurrence") if "mix" in n.attrs]
    assert states.type.size("Sc") == -(-steps // chunk)
    f = delta_feeds(g, steps * 10 + chunk)
    want, got = ir.interpret(g, f), ir.interpret(chunked, f)
    for name in ("y", "h"):
        np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("outputs", [("y", "h"), ("y",), ("h",)])
def test_blocks_continue_from_the_state_the_block_before_left(outputs) -> None:
    """block_scans cuts a scan into blocks, each from the previous block's state op: exact; and the
    blocks' scans chunk like any other (the delta rule's too)."""
    for graph, make_feeds in (
        (mamba2_graph(11, outputs=outputs), feeds),
        (delta_graph(11, outputs=outputs), delta_feeds),
    ):
        blocked, origin = block_scans(graph, dict.fromkeys(outputs, 4))
        # 3 blocks of 4, 4 and 3 positions; the last one's state only when it is asked for
        assert len([n for n in blocked.nodes if n.kind.endswith("_state")]) == (3 if "h" in outputs else 2)
        chunked = chunk_scans(blocked, dict.fromkeys(origin, 2))
        f = make_feeds(graph, 4)
        want = ir.interpret(graph, f)
        for form in (blocked, chunked):
            got = ir.interpret(form, f)
            for name in outputs:
                np.testing.assert_allclose(got[name], want[name], rtol=2e-4, atol=2e-4)
