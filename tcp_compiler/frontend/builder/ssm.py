"""Mamba mixers as IR (ModelConfig.ssm, layers whose mixer is "mamba"): Mamba-1's selective scan
and Mamba-2's SSD, on the IR's `conv1d`, `scan` and `scan_state` ops (ir/ops/scan.py).

A Mamba layer's cache is its recurrent state and its convolution window, of fixed size whatever
the context: prefill hands both to decode (outputs `l{i}.ssm_state`, `l{i}.conv_window`, declared
as the graph's cache beside any KV cache), and each decode step reads them back (`..._in`) and
writes them updated, kept in the precision's KV dtype (`--kv-dtype`).

Axis names: B batch, S tokens, D hidden, F in_proj's outputs, I inner channels (Mamba-1), C the
convolution's channels, Kc its taps, N the state, R dt's rank (Mamba-1); Mamba-2's heads split
into G groups x Hg heads per group of Hd channels (not P: that names the KV cache's positions),
and its gated norm sees each group's Q = Hg x Hd.
"""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.core import GraphBuilder, whole
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Ssm


def check_ssm(b: GraphBuilder, padded: bool) -> None:
    """A one-line refusal of what the Mamba layers do not build yet: prompts of different lengths
    or packed documents (a padded position would still move the state). Tensor parallelism is
    refused where the sharding is planned (core.Sharding.plan)."""
    if b.cfg.ssm is None:
        return
    if padded or b.packed:
        raise FrontendError(
            f"{b.cfg.name}: Mamba layers need prompts of one length (no padding or packed documents)"
        )


def mamba(b: GraphBuilder, i: int, x: Node, decode: bool) -> tuple[Node, list[Node]]:
    """Layer i's Mamba mixer on the normed x [B, S, D]; returns (output [B, S, D], its caches:
    the state and the convolution window)."""
    ssm = b.cfg.ssm
    assert ssm is not None
    pre = f"model.layers.{i}.mixer"
    proj = _projection(b, x, pre, ssm)
    if ssm.kind == "mamba":
        return _mamba1(b, pre, ssm, proj, decode)
    return _mamba2(b, pre, ssm, proj, decode)


def _projection(b: GraphBuilder, x: Node, pre: str, ssm: Ssm) -> Node:
    """in_proj: every part (x and z; Mamba-2 also B, C and dt) in one matmul, as transformers runs it."""
    width = 2 * ssm.inner if ssm.kind == "mamba" else ssm.inner + ssm.conv_channels + ssm.heads
    axes = {"F": width, "D": b.cfg.hidden}
    bias = whole if ssm.proj_bias else None
    return linear(b, x, f"{pre}.in_proj.weight", axes, ["D"], ["B", "S", "F"], "in_proj", bias=bias)


def _part(b: GraphBuilder, x: Node, axis: str, start: int, stop: int, label: str, **axes: int) -> Node:
    """Entries [start, stop) of x's `axis`, reshaped to B, S and `axes`."""
    cut = b.g.add("slice", x, name=b.name(f"{label}.cut"), axis=axis, start=start, stop=stop)
    return b.g.add("reshape", cut, name=b.name(label), type=TensorType.of(F32, B=b.batch, S=b.seq, **axes))


def _convolve(b: GraphBuilder, pre: str, ssm: Ssm, x: Node, decode: bool) -> tuple[Node, Node]:
    """The causal depthwise convolution of x [B, S, C] with bias and activation, and the window the
    next step reads (the last kernel - 1 inputs), kept in the KV dtype."""
    g, k, channels = b.g, ssm.conv_kernel, x.type.size("C")
    window_type = TensorType.of(b.p.kv, B=b.batch, S=k - 1, C=channels)
    if decode:
        window = b.to(g.input(b.name("conv_window_in"), window_type), F32)
    else:
        window = g.add("const", name=b.name("conv_window_zero"), type=window_type.with_dtype(F32), value=0.0)
    w = b.to(b.tensor(f"{pre}.conv1d.weight", b.p.table, {"C": channels, "Kc": k}), F32)
    y = g.add("conv1d", x, w, window, name=b.name("conv"), axis="S")
    if ssm.conv_bias:
        bias = b.to(b.tensor(f"{pre}.conv1d.bias", b.p.table, {"C": channels}), F32)
        y = g.add("add", y, bias, name=b.name("conv_b"))
    y = g.add(b.cfg.mlp.activation, y, name=b.name("conv_act"))
    joined = g.add("concat", window, x, name=b.name("conv_joined"), axis="S")
    seq = x.type.size("S")
    kept = g.add("slice", joined, name=b.name("conv_kept"), axis="S", start=seq, stop=seq + k - 1)
    return y, b.g.add("cast", kept, name=b.name("conv_window"), type=kept.type.with_dtype(b.p.kv))


def _softplus(b: GraphBuilder, x: Node, label: str) -> Node:
    """log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): no overflow for any x."""
    g = b.g
    magnitude = g.add("abs", x, name=b.name(f"{label}.abs"))
    tail = g.add("exp", g.add("neg", magnitude, name=b.name(f"{label}.nabs")), name=b.name(f"{label}.exp"))
    one_plus = g.add("add", tail, b.const(1.0), name=b.name(f"{label}.1p"))
    soft = g.add("log", one_plus, name=b.name(f"{label}.log"))
    return g.add("add", g.add("max", x, b.const(0.0), name=b.name(f"{label}.pos")), soft, name=b.name(label))


def _decay(b: GraphBuilder, pre: str, axes: dict[str, int]) -> Node:
    """A = -exp(A_log)."""
    a_log = b.to(b.tensor(f"{pre}.A_log", b.p.table, axes), F32)
    return b.g.add("neg", b.g.add("exp", a_log, name=b.name("A.exp")), name=b.name("A"))


def _scan(
    b: GraphBuilder, operands: list[Node], state_axes: dict[str, int], decode: bool
) -> tuple[Node, Node]:
    """The scan's output and final state from the state that came in (decode) or zeros (prefill);
    the state leaves in the KV dtype."""
    g = b.g
    state_type = TensorType.of(b.p.kv, B=b.batch, **state_axes)
    if decode:
        h0 = b.to(g.input(b.name("ssm_state_in"), state_type), F32)
    else:
        h0 = g.add("const", name=b.name("ssm_state_zero"), type=state_type.with_dtype(F32), value=0.0)
    y = g.add("scan", *operands, h0, name=b.name("scan"), axis="S")
    h = g.add("scan_state", *operands, h0, name=b.name("scan_final"), axis="S")
    return y, g.add("cast", h, name=b.name("ssm_state"), type=h.type.with_dtype(b.p.kv))


def _rms(b: GraphBuilder, x: Node, axis: str, eps: float, label: str) -> Node:
    """A weightless RMSNorm over `axis` (Falcon-Mamba's on B, C and dt)."""
    g = b.g
    sq = g.add("mul", x, x, name=b.name(f"{label}.sq"))
    total = g.add("reduce", sq, name=b.name(f"{label}.sum"), op="sum", axes=[axis])
    mean = g.add("mul", total, b.const(1.0 / x.type.size(axis)), name=b.name(f"{label}.mean"))
    var = g.add("add", mean, b.const(eps), name=b.name(f"{label}.var"))
    rstd = g.add("rsqrt", var, name=b.name(f"{label}.rstd"))
    return g.add("mul", x, rstd, name=b.name(label))


def _mamba1(b: GraphBuilder, pre: str, ssm: Ssm, proj: Node, decode: bool) -> tuple[Node, list[Node]]:
    g, E, N, R = b.g, ssm.inner, ssm.state, ssm.dt_rank
    xs = _part(b, proj, "F", 0, E, "x", C=E)
    z = _part(b, proj, "F", E, 2 * E, "z", I=E)
    conv, window = _convolve(b, pre, ssm, xs, decode)
    u = g.add("reshape", conv, name=b.name("u"), type=TensorType.of(F32, B=b.batch, S=b.seq, I=E))
    dbc = linear(b, u, f"{pre}.x_proj.weight", {"F": R + 2 * N, "I": E}, ["I"], ["B", "S", "F"], "x_proj")
    dt_low = _part(b, dbc, "F", 0, R, "dt_low", R=R)
    bm = _part(b, dbc, "F", R, R + N, "Bm", N=N)
    cm = _part(b, dbc, "F", R + N, R + 2 * N, "Cm", N=N)
    if ssm.bcdt_norm_eps is not None:
        dt_low = _rms(b, dt_low, "R", ssm.bcdt_norm_eps, "dt_low_norm")
        bm = _rms(b, bm, "N", ssm.bcdt_norm_eps, "Bm_norm")
        cm = _rms(b, cm, "N", ssm.bcdt_norm_eps, "Cm_norm")
    dt = linear(b, dt_low, f"{pre}.dt_proj.weight", {"I": E, "R": R}, ["R"], ["B", "S", "I"], "dt_proj",
                bias=whole)  # fmt: skip
    dt = _softplus(b, dt, "dt")
    y, state = _scan(b, [u, dt, _decay(b, pre, {"I": E, "N": N}), bm, cm], {"I": E, "N": N}, decode)
    skip = b.to(b.tensor(f"{pre}.D", b.p.table, {"I": E}), F32)
    y = g.add("add", y, g.add("mul", u, skip, name=b.name("skip")), name=b.name("y_skip"))
    y = g.add("mul", y, g.add("silu", z, name=b.name("z_act")), name=b.name("gated"))
    out = _out(b, pre, ssm, y, {"I": E}, ["I"])
    return out, [state, window]


def _mamba2(b: GraphBuilder, pre: str, ssm: Ssm, proj: Node, decode: bool) -> tuple[Node, list[Node]]:
    g, E, N, G, H, P = b.g, ssm.inner, ssm.state, ssm.groups, ssm.heads, ssm.head_dim
    Hg, C = H // G, ssm.conv_channels
    z = _part(b, proj, "F", 0, E, "z", G=G, Q=E // G)
    xbc = _part(b, proj, "F", E, E + C, "xBC", C=C)
    dt = _part(b, proj, "F", E + C, E + C + H, "dt_raw", G=G, Hg=Hg)
    conv, window = _convolve(b, pre, ssm, xbc, decode)
    u = _part(b, conv, "C", 0, E, "u", G=G, Hg=Hg, Hd=P)
    bm = _part(b, conv, "C", E, E + G * N, "Bm", G=G, N=N)
    cm = _part(b, conv, "C", E + G * N, C, "Cm", G=G, N=N)
    heads = {"G": G, "Hg": Hg}
    dt = g.add("add", dt, b.to(b.tensor(f"{pre}.dt_bias", b.p.table, heads), F32), name=b.name("dt_biased"))
    dt = _softplus(b, dt, "dt")
    if not decode and ssm.dt_min > 0.0:  # the chunked (prefill) scan clamps dt; the step does not
        dt = g.add("max", dt, b.const(ssm.dt_min), name=b.name("dt_min"))
    if not decode and ssm.dt_max != float("inf"):
        dt = g.add("min", dt, b.const(ssm.dt_max), name=b.name("dt_max"))
    state_axes = {"G": G, "Hg": Hg, "Hd": P, "N": N}
    y, state = _scan(b, [u, dt, _decay(b, pre, heads), bm, cm], state_axes, decode)
    skip = b.to(b.tensor(f"{pre}.D", b.p.table, heads), F32)
    y = g.add("add", y, g.add("mul", u, skip, name=b.name("skip")), name=b.name("y_skip"))
    groups = TensorType.of(F32, B=b.batch, S=b.seq, G=G, Q=E // G)
    y = g.add("reshape", y, name=b.name("y_groups"), type=groups)
    y = g.add("mul", y, g.add("silu", z, name=b.name("z_act")), name=b.name("gated"))
    y = _gated_norm(b, pre, ssm, y)
    out = _out(b, pre, ssm, y, {"G": G, "Q": E // G}, ["G", "Q"])
    return out, [state, window]


def _gated_norm(b: GraphBuilder, pre: str, ssm: Ssm, y: Node) -> Node:
    """Mamba-2's RMSNorm of y * silu(z) over each group's channels, weight [G, Q]."""
    return norm(b, y, "Q", f"{pre}.norm", "gated_norm", kind="rms", eps=ssm.norm_eps,
                per=("G", whole))  # fmt: skip


def _out(b: GraphBuilder, pre: str, ssm: Ssm, y: Node, axes: dict[str, int], contract: list[str]) -> Node:
    bias = whole if ssm.proj_bias else None
    return linear(b, y, f"{pre}.out_proj.weight", {"D": b.cfg.hidden, **axes}, contract, ["B", "S", "D"],
                  "out_proj", bias=bias)  # fmt: skip
