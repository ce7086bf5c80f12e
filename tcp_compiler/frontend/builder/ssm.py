"""Recurrent mixers as IR (ModelConfig.ssm, layers whose mixer is "mamba" or "deltanet"): Mamba-1's
selective scan and Mamba-2's SSD on the IR's `conv1d`, `scan` and `scan_state` ops, Qwen3-Next's
gated DeltaNet on `conv1d` and `delta_scan` / `delta_scan_state` (ir/ops/scan.py).

A Mamba layer's cache is its recurrent state and its convolution window, of fixed size whatever
the context: prefill hands both to decode (outputs `l{i}.ssm_state`, `l{i}.conv_window`, declared
as the graph's cache beside any KV cache), and each decode step reads them back (`..._in`) and
writes them updated, kept in the precision's KV dtype (`--kv-dtype`).

Tensor parallelism (Megatron's split of a Mamba block, as in Mamba-2's paper): each chip holds
1/chips of the inner channels (Mamba-1) or of the groups with their heads (Mamba-2), so in_proj
and the convolution are column-parallel (this chip's rows of each part: z, x, and Mamba-2's B, C
and dt), the scan, the D skip and Mamba-2's per-group norm are local, and out_proj is row-parallel
with an all_reduce; Mamba-1's x_proj contracts the split channels, so its small output [R + 2N] is
all-reduced too. The gated DeltaNet splits by whole key heads with the value heads they serve
(Qwen3-Next's in_proj_qkvz and in_proj_ba hold each key head's rows together; Qwen3.5's
in_proj_qkv is cut as the convolution's channels are, its z, b and a projections by value head).
The state and window a chip carries are its channels' only.

Axis names: B batch, S tokens, D hidden, F in_proj's outputs, I inner channels (Mamba-1), C the
convolution's channels, Kc its taps, N the state, R dt's rank (Mamba-1); Mamba-2's heads split
into G groups x Hg heads per group of Hd channels (not P: that names the KV cache's positions),
and its gated norm sees each group's Q = Hg x Hd; DeltaNet's Hk key heads of K channels each
serve Hr value heads of V. Sizes in a graph are one chip's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir import F32, I32, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder.core import Binding, Cut, GraphBuilder, cut, whole
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.weights import linear
from tcp_compiler.frontend.config import Ssm


def check_ssm(b: GraphBuilder) -> None:
    """A one-line refusal of what the Mamba layers do not build yet: packed documents (each
    document would need its own state). A split over chips is checked where the sharding is
    planned (core.Sharding.plan)."""
    if b.cfg.ssm is not None and b.packed:
        raise FrontendError(f"{b.cfg.name}: Mamba layers take no packed documents (one state per row)")
    if b.cfg.ssm is not None and b.cfg.ssm.rwkv and "lengths" in b.g:
        raise FrontendError(f"{b.cfg.name}: RWKV blocks take no padded batches yet (prompts of one length)")


def _real(b: GraphBuilder) -> Node | None:
    """[B, S] f32: 1 at positions before each sequence's length, 0 past it (a right-padded prefill,
    whose graph has `lengths`); None when nothing is padded. A padded step with dt = 0 leaves the
    state as it is (decay exp(0) = 1, no input), so each row's final state is its last real token's."""
    g = b.g
    if "lengths" not in g:
        return None
    if "ssm.real" not in g:
        positions = g.add("iota", name="ssm.pos", type=TensorType.of(I32, S=b.seq), axis="S")
        inside = g.add("lt", positions, g["lengths"], name="ssm.inside")
        g.add("cast", inside, name="ssm.real", type=inside.type.with_dtype(F32))
    return g["ssm.real"]


def _masked_dt(b: GraphBuilder, dt: Node, label: str = "dt_real") -> Node:
    """dt (or another per-step input: DeltaNet's beta and g), zero at padded positions (`_real`)."""
    real = _real(b)
    return dt if real is None else b.g.add("mul", dt, real, name=b.name(label))


@dataclass(frozen=True)
class _Local:
    """One chip's share of a Mamba mixer: its widths, and the cuts of the tensors it reads."""

    inner: int  # E / chips
    groups: int  # Mamba-2: G / chips
    heads: int  # Mamba-2: H / chips
    channels: int  # of the convolution: inner (+ Mamba-2's 2 x groups x state)
    projection: Cut  # in_proj's rows (and its bias): this chip's block of each part
    convolution: Cut  # conv1d's channels (and its bias)
    column: Cut  # a per-channel or per-head tensor: this chip's block of rows
    row: Cut  # out_proj (and Mamba-1's x_proj): this chip's block of columns
    row_bias: Cut

    @staticmethod
    def of(ssm: Ssm, b: GraphBuilder) -> _Local:
        n, E, N = b.sh.chips, ssm.inner, ssm.state
        if ssm.kind == "gated_delta":  # whole key heads with their value heads per chip
            keys, values = ssm.groups * ssm.state, ssm.inner
            conv = [(0, keys), (keys, keys), (2 * keys, values)]  # q, k, v
            return _Local(E // n, ssm.groups // n, ssm.heads // n, ssm.conv_channels // n, cut(0, n),
                          _blocks(conv, n), cut(0, n), cut(1, n), b.sh.row_bias)  # fmt: skip
        if ssm.kind == "mamba":
            parts, conv = [(0, E), (E, E)], [(0, E)]
            groups = heads = 0
        else:
            G, H = ssm.groups, ssm.heads
            conv = [(0, E), (E, G * N), (E + G * N, G * N)]  # x, B, C
            parts = [(0, E)] + [(E + s, w) for s, w in conv] + [(2 * E + 2 * G * N, H)]  # z, x, B, C, dt
            groups, heads = G // n, H // n
        local = E // n
        return _Local(local, groups, heads, local + 2 * groups * N, _blocks(parts, n), _blocks(conv, n),
                      cut(0, n), cut(1, n), b.sh.row_bias)  # fmt: skip


def _blocks(spans: list[tuple[int, int]], chips: int) -> Cut:
    """This rank's block of rows of each (start, width) span, joined in order (whole on one chip)."""
    if chips == 1:
        return whole

    def part(w: np.ndarray, rank: int) -> np.ndarray:
        return np.concatenate([w[s + rank * (n // chips) : s + (rank + 1) * (n // chips)] for s, n in spans])

    return part


def mamba(b: GraphBuilder, i: int, x: Node, decode: bool, reduce: bool = True) -> tuple[Node, list[Node]]:
    """Layer i's Mamba mixer on the normed x [B, S, D]; returns (output [B, S, D], its caches:
    the state and the convolution window). out_proj's partial sums over the chips are left to the
    caller when `reduce` is False (a layer's parallel mixers join theirs first)."""
    ssm = b.cfg.ssm
    assert ssm is not None
    pre, local = f"model.layers.{i}.mixer", _Local.of(ssm, b)
    width = 2 * local.inner if ssm.kind == "mamba" else local.inner + local.channels + local.heads
    bias = local.projection if ssm.proj_bias else None
    proj = linear(b, x, f"{pre}.in_proj.weight", {"F": width, "D": b.cfg.hidden}, ["D"], ["B", "S", "F"],
                  "in_proj", local.projection, bias)  # fmt: skip
    if ssm.projection_scales:
        proj = _span_scaled(b, ssm, local, proj)
    if ssm.kind == "mamba":
        y, caches = _mamba1(b, pre, ssm, local, proj, decode)
        axes: dict[str, int] = {"I": local.inner}
    else:
        y, caches = _mamba2(b, pre, ssm, local, proj, decode)
        axes = {"G": local.groups, "Q": ssm.inner // ssm.groups}
    out_bias = local.row_bias if ssm.has_out_bias else None
    out = linear(b, y, f"{pre}.out_proj.weight", {"D": b.cfg.hidden, **axes}, list(axes), ["B", "S", "D"],
                 "out_proj", local.row, out_bias)  # fmt: skip
    return (b.join(out, b.name("out_proj.sum")) if reduce else out), caches


def _span_scaled(b: GraphBuilder, ssm: Ssm, local: _Local, proj: Node) -> Node:
    """in_proj's output times Falcon-H1's multiplier of each span (z, x, B, C, dt), one vector
    [F] cut to this chip's rows as in_proj's are."""
    E, GN = ssm.inner, ssm.groups * ssm.state
    widths = (E, E, GN, GN, ssm.heads)
    full = np.repeat(np.array(ssm.projection_scales, np.float32), widths)
    width = proj.type.size("F")
    scales = b.param("ssm.span_scales", F32, {"F": width},
                     Binding((), lambda get, rank: local.projection(full, rank)))  # fmt: skip
    return b.g.add("mul", proj, scales, name=b.name("in_proj_scaled"))


def _part(b: GraphBuilder, x: Node, axis: str, start: int, stop: int, label: str, **axes: int) -> Node:
    """Entries [start, stop) of x's `axis`, reshaped to B, S and `axes`."""
    cut = b.g.add("slice", x, name=b.name(f"{label}.cut"), axis=axis, start=start, stop=stop)
    return b.g.add("reshape", cut, name=b.name(label), type=TensorType.of(F32, B=b.batch, S=b.seq, **axes))


def _convolve(b: GraphBuilder, pre: str, ssm: Ssm, local: _Local, x: Node, decode: bool) -> tuple[Node, Node]:
    """The causal depthwise convolution of x [B, S, C] with bias and activation, and the window the
    next step reads (the last kernel - 1 inputs), kept in the KV dtype."""
    g, k, channels = b.g, ssm.conv_kernel, x.type.size("C")
    window_type = TensorType.of(b.p.kv, B=b.batch, S=k - 1, C=channels)
    if decode:
        window = b.to(g.input(b.name("conv_window_in"), window_type), F32)
    else:
        window = g.add("const", name=b.name("conv_window_zero"), type=window_type.with_dtype(F32), value=0.0)
    w = b.to(b.tensor(f"{pre}.conv1d.weight", b.p.table, {"C": channels, "Kc": k}, local.convolution), F32)
    y = g.add("conv1d", x, w, window, name=b.name("conv"), axis="S")
    if ssm.conv_bias:
        bias = b.to(b.tensor(f"{pre}.conv1d.bias", b.p.table, {"C": channels}, local.convolution), F32)
        y = g.add("add", y, bias, name=b.name("conv_b"))
    y = g.add(ssm.activation, y, name=b.name("conv_act"))
    joined = g.add("concat", window, x, name=b.name("conv_joined"), axis="S")
    seq = x.type.size("S")
    if "lengths" in g and not decode:  # each row's last kernel - 1 inputs before its length
        at = g.add("add", g["lengths"], _taps(b, k - 1), name=b.name("conv_at"))
        kept = g.add("gather", joined, at, name=b.name("conv_rows"), axis="S")
        kept = g.add("reshape", kept, name=b.name("conv_kept"), type=window_type.with_dtype(F32))
    else:
        kept = g.add("slice", joined, name=b.name("conv_kept"), axis="S", start=seq, stop=seq + k - 1)
    return y, b.g.add("cast", kept, name=b.name("conv_window"), type=kept.type.with_dtype(b.p.kv))


def _taps(b: GraphBuilder, n: int) -> Node:
    """[Sw] i32: 0 .. n - 1, the window's slots."""
    name = f"ssm.window{n}"
    if name not in b.g:
        b.g.add("iota", name=name, type=TensorType.of(I32, Sw=n), axis="Sw")
    return b.g[name]


def _softplus(b: GraphBuilder, x: Node, label: str) -> Node:
    """log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): no overflow for any x."""
    g = b.g
    magnitude = g.add("abs", x, name=b.name(f"{label}.abs"))
    tail = g.add("exp", g.add("neg", magnitude, name=b.name(f"{label}.nabs")), name=b.name(f"{label}.exp"))
    one_plus = g.add("add", tail, b.const(1.0), name=b.name(f"{label}.1p"))
    soft = g.add("log", one_plus, name=b.name(f"{label}.log"))
    return g.add("add", g.add("max", x, b.const(0.0), name=b.name(f"{label}.pos")), soft, name=b.name(label))


def _decay(b: GraphBuilder, pre: str, axes: dict[str, int], part: Cut) -> Node:
    """A = -exp(A_log), this chip's rows."""
    a_log = b.to(b.tensor(f"{pre}.A_log", b.p.table, axes, part), F32)
    return b.g.add("neg", b.g.add("exp", a_log, name=b.name("A.exp")), name=b.name("A"))


def carried_scan(
    b: GraphBuilder,
    operands: list[Node],
    state_axes: dict[str, int],
    decode: bool,
    op: str = "scan",
    label: str = "",
) -> tuple[Node, Node]:
    """The scan's (or `op`'s: delta_scan) output and final state from the state that came in
    (decode) or zeros (prefill); the state leaves in the KV dtype. `label` prefixes the names of a
    layer's second scan (RWKV's denominator)."""
    g = b.g
    state_type = TensorType.of(b.p.kv, B=b.batch, **state_axes)
    if decode:
        h0 = b.to(g.input(b.name(f"{label}ssm_state_in"), state_type), F32)
    else:
        h0 = g.add("const", name=b.name(f"{label}ssm_state_zero"), type=state_type.with_dtype(F32), value=0.0)
    y = g.add(op, *operands, h0, name=b.name(f"{label}scan"), axis="S")
    h = g.add(f"{op}_state", *operands, h0, name=b.name(f"{label}scan_final"), axis="S")
    return y, g.add("cast", h, name=b.name(f"{label}ssm_state"), type=h.type.with_dtype(b.p.kv))


def _rms(b: GraphBuilder, x: Node, axis: str, eps: float, label: str) -> Node:
    """A weightless RMSNorm over `axis` (Falcon-Mamba's on B, C and dt)."""
    g = b.g
    sq = g.add("mul", x, x, name=b.name(f"{label}.sq"))
    total = g.add("reduce", sq, name=b.name(f"{label}.sum"), op="sum", axes=[axis])
    mean = g.add("mul", total, b.const(1.0 / x.type.size(axis)), name=b.name(f"{label}.mean"))
    var = g.add("add", mean, b.const(eps), name=b.name(f"{label}.var"))
    rstd = g.add("rsqrt", var, name=b.name(f"{label}.rstd"))
    return g.add("mul", x, rstd, name=b.name(label))


def _bcdt_norm(b: GraphBuilder, pre: str, ssm: Ssm, x: Node, axis: str, module: str, label: str) -> Node:
    """The RMSNorm on dt's rank, B or C: weightless (Falcon-Mamba) or scaled by the mixer's
    `{module}.weight` (Jamba). x_proj's output is whole on every chip, so is the weight."""
    assert ssm.bcdt_norm_eps is not None
    if ssm.bcdt_norm_weights:
        return norm(b, x, axis, f"{pre}.{module}", label, kind="rms", eps=ssm.bcdt_norm_eps, offset=False)
    return _rms(b, x, axis, ssm.bcdt_norm_eps, label)


def _mamba1(
    b: GraphBuilder, pre: str, ssm: Ssm, local: _Local, proj: Node, decode: bool
) -> tuple[Node, list[Node]]:
    """x and z from in_proj; conv, x_proj (all-reduced over the split channels) to dt's rank, B and
    C; dt_proj; the scan with a per-channel decay; + D x, * silu(z)."""
    g, E, N, R = b.g, local.inner, ssm.state, ssm.dt_rank
    xs = _part(b, proj, "F", 0, E, "x", C=E)
    z = _part(b, proj, "F", E, 2 * E, "z", I=E)
    conv, window = _convolve(b, pre, ssm, local, xs, decode)
    u = g.add("reshape", conv, name=b.name("u"), type=TensorType.of(F32, B=b.batch, S=b.seq, I=E))
    dbc = linear(b, u, f"{pre}.x_proj.weight", {"F": R + 2 * N, "I": E}, ["I"], ["B", "S", "F"], "x_proj",
                 local.row)  # fmt: skip
    dbc = b.all_reduce(dbc, b.name("x_proj.sum"))
    dt_low = _part(b, dbc, "F", 0, R, "dt_low", R=R)
    bm = _part(b, dbc, "F", R, R + N, "Bm", N=N)
    cm = _part(b, dbc, "F", R + N, R + 2 * N, "Cm", N=N)
    if ssm.bcdt_norm_eps is not None:
        dt_low = _bcdt_norm(b, pre, ssm, dt_low, "R", "dt_layernorm", "dt_low_norm")
        bm = _bcdt_norm(b, pre, ssm, bm, "N", "b_layernorm", "Bm_norm")
        cm = _bcdt_norm(b, pre, ssm, cm, "N", "c_layernorm", "Cm_norm")
    dt = linear(b, dt_low, f"{pre}.dt_proj.weight", {"I": E, "R": R}, ["R"], ["B", "S", "I"], "dt_proj",
                local.column, local.column)  # fmt: skip
    dt = _masked_dt(b, _softplus(b, dt, "dt"))
    channels = {"I": E, "N": N}
    y, state = carried_scan(b, [u, dt, _decay(b, pre, channels, local.column), bm, cm], channels, decode)
    skip = b.to(b.tensor(f"{pre}.D", b.p.table, {"I": E}, local.column), F32)
    y = g.add("add", y, g.add("mul", u, skip, name=b.name("skip")), name=b.name("y_skip"))
    return g.add("mul", y, g.add("silu", z, name=b.name("z_act")), name=b.name("gated")), [state, window]


def _mamba2(
    b: GraphBuilder, pre: str, ssm: Ssm, local: _Local, proj: Node, decode: bool
) -> tuple[Node, list[Node]]:
    """z, x B C and dt from in_proj; conv over x, B and C; softplus(dt + dt_bias), clamped in
    prefill; the scan with a per-head decay; + D x; the gated norm per group."""
    g, E, N, G, H, P = b.g, local.inner, ssm.state, local.groups, local.heads, ssm.head_dim
    Hg, C, Q = H // G, local.channels, ssm.inner // ssm.groups
    z = _part(b, proj, "F", 0, E, "z", G=G, Q=Q)
    xbc = _part(b, proj, "F", E, E + C, "xBC", C=C)
    dt = _part(b, proj, "F", E + C, E + C + H, "dt_raw", G=G, Hg=Hg)
    conv, window = _convolve(b, pre, ssm, local, xbc, decode)
    u = _part(b, conv, "C", 0, E, "u", G=G, Hg=Hg, Hd=P)
    bm = _part(b, conv, "C", E, E + G * N, "Bm", G=G, N=N)
    cm = _part(b, conv, "C", E + G * N, C, "Cm", G=G, N=N)
    heads = {"G": G, "Hg": Hg}
    dt_bias = b.to(b.tensor(f"{pre}.dt_bias", b.p.table, heads, local.column), F32)
    dt = _softplus(b, g.add("add", dt, dt_bias, name=b.name("dt_biased")), "dt")
    if not decode and ssm.dt_min > 0.0:  # the chunked (prefill) scan clamps dt; the step does not
        dt = g.add("max", dt, b.const(ssm.dt_min), name=b.name("dt_min"))
    if not decode and ssm.dt_max != float("inf"):
        dt = g.add("min", dt, b.const(ssm.dt_max), name=b.name("dt_max"))
    dt = _masked_dt(b, dt)
    state_axes = {"G": G, "Hg": Hg, "Hd": P, "N": N}
    y, state = carried_scan(b, [u, dt, _decay(b, pre, heads, local.column), bm, cm], state_axes, decode)
    skip = b.to(b.tensor(f"{pre}.D", b.p.table, heads, local.column), F32)
    y = g.add("add", y, g.add("mul", u, skip, name=b.name("skip")), name=b.name("y_skip"))
    y = g.add("reshape", y, name=b.name("y_groups"), type=TensorType.of(F32, B=b.batch, S=b.seq, G=G, Q=Q))
    return _gate(b, pre, ssm, local, y, z), [state, window]


def _gate(b: GraphBuilder, pre: str, ssm: Ssm, local: _Local, y: Node, z: Node) -> Node:
    """Mamba-2's output y [B, S, G, Q] gated by silu(z) and RMS-normed over each group's channels
    (a chip holds whole groups; weight [G, Q]): the norm after the gate (Mamba-2), before it
    (Falcon-H1's mamba_norm_before_gate) or none (Falcon-H1 without mamba_rms_norm)."""
    g = b.g

    def normed(x: Node) -> Node:
        per = ("G", local.column)
        return norm(b, x, "Q", f"{pre}.norm", "gated_norm", kind="rms", eps=ssm.norm_eps, per=per)

    if ssm.gated_norm == "norm_then_gate":
        y = normed(y)
    y = g.add("mul", y, g.add("silu", z, name=b.name("z_act")), name=b.name("gated"))
    return normed(y) if ssm.gated_norm == "gated" else y


def gated_delta(
    b: GraphBuilder, i: int, x: Node, decode: bool, reduce: bool = True
) -> tuple[Node, list[Node]]:
    """Layer i's gated DeltaNet (Qwen3-Next, Qwen3.5) on the normed x [B, S, D]; returns (output [B, S, D],
    its caches: the state [Hk, Hr, K, V] and the convolution window).

    The inputs come from in_proj_qkvz and in_proj_ba (Qwen3-Next, `_fused_inputs`) or from four
    projections (Qwen3.5, `_split_inputs`). q, k and v go through the convolution (channels q of
    all heads, then k, then v) and SiLU; q and k are
    l2-normed over K and q scaled by 1/sqrt(K); beta = sigmoid(b), g = -exp(A_log) softplus(a +
    dt_bias); the delta rule's output goes through an RMSNorm over V (weight w, no offset) times
    silu(z), then out_proj (its partial sums over the chips left to the caller when `reduce` is
    False, as in `mamba`). A key head's Hr value heads read its q and k by broadcasting (Hk)."""
    ssm, g = b.cfg.ssm, b.g
    assert ssm is not None
    pre, local = f"model.layers.{i}.linear_attn", _Local.of(ssm, b)
    Hk, K, V, D, Hr = local.groups, ssm.state, ssm.head_dim, b.cfg.hidden, ssm.heads // ssm.groups
    heads = {"Hk": Hk, "Hr": Hr}
    project = _fused_inputs if ssm.fused_projections else _split_inputs
    mixed, z, beta_in, a = project(b, pre, local, x, K, V, Hr)
    conv, window = _convolve(b, pre, ssm, local, mixed, decode)
    q = _l2norm(b, _part(b, conv, "C", 0, Hk * K, "q", Hk=Hk, K=K), "q_l2")
    q = g.add("mul", q, b.const(K**-0.5), name=b.name("q_scaled"))
    k = _l2norm(b, _part(b, conv, "C", Hk * K, 2 * Hk * K, "k", Hk=Hk, K=K), "k_l2")
    v = _part(b, conv, "C", 2 * Hk * K, local.channels, "v", **heads, V=V)
    beta = _masked_dt(b, g.add("sigmoid", beta_in, name=b.name("beta")), "beta_real")
    dt_bias = b.to(b.tensor(f"{pre}.dt_bias", b.p.table, heads, local.column), F32)
    dt = _softplus(b, g.add("add", a, dt_bias, name=b.name("a_biased")), "dt")
    decay = g.add("mul", dt, _decay(b, pre, heads, local.column), name=b.name("g"))
    decay = _masked_dt(b, decay, "g_real")
    y, state = carried_scan(b, [q, k, v, decay, beta], {**heads, "K": K, "V": V}, decode, "delta_scan")
    y = norm(b, y, "V", f"{pre}.norm", "gated_norm", kind="rms", eps=ssm.norm_eps, offset=False)
    y = g.add("mul", y, g.add("silu", z, name=b.name("z_act")), name=b.name("gated"))
    out = linear(b, y, f"{pre}.out_proj.weight", {"D": D, **heads, "V": V}, ["Hk", "Hr", "V"],
                 ["B", "S", "D"], "out_proj", local.row)  # fmt: skip
    return (b.join(out, b.name("out_proj.sum")) if reduce else out), [state, window]


def _fused_inputs(
    b: GraphBuilder, pre: str, local: _Local, x: Node, K: int, V: int, Hr: int
) -> tuple[Node, Node, Node, Node]:
    """Qwen3-Next's DeltaNet inputs from in_proj_qkvz and in_proj_ba, which group each key head's
    rows (its q and k, its Hr value heads' v and z; its Hr b and Hr a): the convolution's input
    [B, S, C] (q of all heads, then k, then v), z [B, S, Hk, Hr, V], b and a [B, S, Hk, Hr]."""
    g, Hk, D = b.g, local.groups, b.cfg.hidden
    per_head = 2 * K + 2 * Hr * V
    qkvz, ba = (
        linear(b, x, f"{pre}.{n}.weight", {"Hk": Hk, "F": f, "D": D}, ["D"], ["B", "S", "Hk", "F"], n,
               local.projection)
        for n, f in (("in_proj_qkvz", per_head), ("in_proj_ba", 2 * Hr))
    )  # fmt: skip
    spans = {"q": (0, K), "k": (K, 2 * K), "v": (2 * K, 2 * K + Hr * V)}
    flat = [_part(b, qkvz, "F", lo, hi, f"{n}_flat", C=Hk * (hi - lo)) for n, (lo, hi) in spans.items()]
    mixed = g.add("concat", *flat, name=b.name("qkv"), axis="C")
    heads = {"Hk": Hk, "Hr": Hr}
    z = _part(b, qkvz, "F", 2 * K + Hr * V, per_head, "z", **heads, V=V)
    return mixed, z, _part(b, ba, "F", 0, Hr, "b", **heads), _part(b, ba, "F", Hr, 2 * Hr, "a", **heads)


def _split_inputs(
    b: GraphBuilder, pre: str, local: _Local, x: Node, K: int, V: int, Hr: int
) -> tuple[Node, Node, Node, Node]:
    """Qwen3.5's DeltaNet inputs, as `_fused_inputs` gives them, from its four projections:
    in_proj_qkv straight into the convolution's channels (a chip's rows of q, k and v, as the
    convolution's), in_proj_z, in_proj_b and in_proj_a by value head (a chip's block of rows)."""
    D, heads = b.cfg.hidden, {"Hk": local.groups, "Hr": Hr}
    mixed = linear(b, x, f"{pre}.in_proj_qkv.weight", {"C": local.channels, "D": D}, ["D"], ["B", "S", "C"],
                   "in_proj_qkv", local.convolution)  # fmt: skip
    z = linear(b, x, f"{pre}.in_proj_z.weight", {**heads, "V": V, "D": D}, ["D"], ["B", "S", *heads, "V"],
               "in_proj_z", local.column)  # fmt: skip
    beta_in, a = (
        linear(b, x, f"{pre}.in_proj_{n}.weight", {**heads, "D": D}, ["D"], ["B", "S", *heads],
               f"in_proj_{n}", local.column)
        for n in ("b", "a")
    )  # fmt: skip
    return mixed, z, beta_in, a


def _l2norm(b: GraphBuilder, x: Node, label: str) -> Node:
    """x / sqrt(sum over K of x^2 + 1e-6), as transformers' (and FLA's) l2norm of q and k."""
    g = b.g
    total = g.add("reduce", g.add("mul", x, x, name=b.name(f"{label}.sq")), name=b.name(f"{label}.sum"),
                  op="sum", axes=["K"])  # fmt: skip
    eps = g.add("add", total, b.const(1e-6), name=b.name(f"{label}.eps"))
    rstd = g.add("rsqrt", eps, name=b.name(f"{label}.r"))
    return g.add("mul", x, rstd, name=b.name(label))
