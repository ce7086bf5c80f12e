"""Linear recurrences along a sequence axis: the selective scan of Mamba 1/2, the gated delta rule of
Qwen3-Next, and the short causal depthwise convolution these layers carry.

Why ops and not a loop of einsums: a recurrence along S unrolled into S einsum steps makes graphs grow
with the prompt, and a materialised per-step decay [B, S, D, N] costs far more bytes than the kernels
(which take dt and A apart) move. One op per recurrence keeps graphs the same size at every context,
and a pass (tcp_compiler/passes/chunked_scan.py) rewrites scan and delta_scan into the chunked
forms real kernels run.

API (every operand is broadcast by axis name; the sequence axis is the attribute `axis`, the state's
axes are the axes of h0; all operands are float and compute in float32):

    %y  = scan(%x, %dt, %A, %B, %C, %h0) {axis = S} : f32[...x's axes...]
    %hT = scan_state(%x, %dt, %A, %B, %C, %h0) {axis = S} : f32[...h0's axes...]

    for t in S:  h = exp(dt_t * A) * h + dt_t * x_t * B_t      (h starts at h0)
                 y_t = sum over the state axes x lacks of C_t * h
    scan gives y (x's axes, in x's order); scan_state gives the final h (h0's axes).

    - h0: the carried state, no `axis`. Its axes are batch and state axes, e.g. [B, D, N] (Mamba-1)
      or [B, G, E, P, N] (Mamba-2, heads H split into groups G x heads-per-group E).
    - x, dt, B, C have `axis`; A may (a decay per step: RWKV-6's data-dependent decay, with dt = 1,
      so the input is not scaled with it). Every operand's other axes are axes of h0; every h0 axis is
      an axis of x or B (the update reaches every state element); C has every axis y sums over.
    - Mamba-1: x, dt [B, S, D]; A [D, N]; B, C [B, S, N]; h0 [B, D, N]; y [B, S, D].
    - Mamba-2 (SSD): x [B, S, G, E, P]; dt [B, S, G, E]; A [G, E]; B, C [B, S, G, N];
      h0 [B, G, E, P, N]; y [B, S, G, E, P]. The decay is a scalar per head and step.
    - RWKV-5 / 6 (builder/rwkv5.py): x = v [B, S, H, V]; dt = 1 [B, S, H]; A [H, K] (RWKV-6:
      [B, S, H, K]); B = k, C = r [B, S, H, K]; h0 [B, H, K, V]; y [B, S, H, V].
    - dt is after softplus/clamping and the D skip (y + D * x) is ordinary elementwise ops outside.
    - Decode is the same op with S = 1; chunked prefill passes the previous chunk's scan_state as h0.
    - The result dtype is x's (scan) or h0's (scan_state) unless the result type declares another float.

    %y  = delta_scan(%q, %k, %v, %g, %beta, %h0) {axis = S} : f32[...v's axes...]
    %hT = delta_scan_state(%q, %k, %v, %g, %beta, %h0) {axis = S} : f32[...h0's axes...]

    for t in S:  h = exp(g_t) * h                                 (gated decay)
                 h = h + k_t (x) beta_t * (v_t - k_t . h)        (delta rule: k.h sums the key axes)
                 y_t = q_t . h                                   (sums the key axes)
    - Qwen3-Next: q, k [B, S, H, K]; v [B, S, H, V]; g, beta [B, S, H]; h0 [B, H, K, V];
      y [B, S, H, V]. The key axes are k's axes v lacks; q and k share them (l2-norm and the
      1/sqrt(K) scale of q are outside). h0's axes are the union of k's and v's without `axis`.

    %h = recurrence(%a, %u, %h0) {axis = C} : f32[...u's axes...]
    - h_c = a_c * h_(c-1) + u_c from h0, every h_c returned (u's axes; a broadcasts onto them, h0 has
      u's axes without `axis`, in order). The inter-chunk step of the chunked scan: a is a chunk's
      total decay, u its state contribution. With {mix = [K, Kt]} a is a matrix per step over the
      state axis K (column axis Kt, a's only): h_c[K] = sum_Kt a_c[K, Kt] h_(c-1)[K=Kt] + u_c
      (the chunked delta rule's transition).

    %y = conv1d(%x, %w, %window) {axis = S} : f32[...x's axes...]
    - Causal depthwise convolution: xx = concat(window, x) along S; y_t = sum_j w[.., j] * xx[t + j].
      w holds the taps axis (its one axis x lacks, size K) and per-channel axes of x; window has
      x's axes with `axis` of size K - 1 (the previous K - 1 inputs; zeros at the start of a
      sequence). The next window is `slice(concat(window, x)) {axis = S, start = S, stop = S + K - 1}`.
      Bias and activation are ordinary ops outside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require, same_sizes
from ir.ops.broadcast import align
from ir.types import TensorType

_AXIS = {"axis": AttrSpec("str", doc="the sequence axis the recurrence runs along")}


def _space(*operands: TensorType) -> int:
    """Elements of the broadcast of `operands` (by axis name), the work of one elementwise step."""
    sizes = {a.name: a.size for t in operands for a in t.axes}
    return math.prod(sizes.values())


def _check_sequence_operands(call: OpCall, stepped: Sequence[int], fixed: Sequence[int]) -> TensorType:
    """Checks the shared rules of a scan family op; returns h0's type. `stepped` operands have the
    sequence axis, `fixed` operands have not; every other axis is an axis of h0 (the last operand)."""
    axis = call.attrs["axis"]
    h0 = call.operands[-1]
    state = call.label(len(call.operands) - 1)
    same_sizes(call.labelled())
    for i, t in enumerate(call.operands):
        require(t.dtype.is_float, f"{call.kind} needs float operands, {call.label(i)} is {t.dtype}")
    require(axis not in h0.names, f"the state {state} : {h0} must not have the sequence axis '{axis}'")
    for i in stepped:
        t = call.operands[i]
        require(axis in t.names, f"{call.label(i)} : {t} needs the sequence axis '{axis}'")
    for i in fixed:
        t = call.operands[i]
        require(axis not in t.names, f"{call.label(i)} : {t} must not have the sequence axis '{axis}'")
    for i, t in enumerate(call.operands[:-1]):
        extra = [n for n in t.names if n != axis and n not in h0.names]
        require(
            not extra,
            f"{call.label(i)} : {t} has axes [{' '.join(extra)}] the state {state} : {h0} lacks",
        )
    return h0


def _result(call: OpCall, default: TensorType) -> TensorType:
    """`default`, or with the declared float dtype when the result type declares one."""
    if call.result is None:
        return default
    require(call.result.dtype.is_float, f"{call.kind} gives a float result, not {call.result.dtype}")
    return default.with_dtype(call.result.dtype)


def _aligned(args: Sequence[np.ndarray], call: OpCall, order: Sequence[str]) -> list[np.ndarray]:
    """Every operand in float32, transposed to `order` with size-1 axes where it lacks one."""
    return [align(a.astype(np.float32), t.names, order) for a, t in zip(args, call.operands, strict=True)]


# -- the selective (diagonal) scan of Mamba -------------------------------------------------------


def _selective_check(call: OpCall) -> TensorType:
    x, _, _, b, c, h0 = call.operands
    h0 = _check_sequence_operands(call, stepped=(0, 1, 3, 4), fixed=())
    axis = call.attrs["axis"]
    missing = [n for n in h0.names if n not in x.names and n not in b.names]
    require(
        not missing, f"state axes [{' '.join(missing)}] are axes of neither x nor B: nothing updates them"
    )
    summed = [n for n in h0.names if n not in x.names]
    lacking = [n for n in summed if n not in c.names]
    require(not lacking, f"C {call.label(4)} : {c} lacks the summed state axes [{' '.join(lacking)}]")
    require(x.size(axis) > 0, "the sequence is empty")
    return h0


def _selective_run(args: Sequence[np.ndarray], call: OpCall, readout: bool) -> np.ndarray:
    """Runs the recurrence step by step; returns y (x's layout) or the final state (h0's)."""
    axis = call.attrs["axis"]
    x_t, h0_t = call.operands[0], call.operands[-1]
    order = [axis, *h0_t.names]
    x, dt, a, b, c, h = _aligned(args, call, order)
    h = h[0]
    summed = tuple(i for i, n in enumerate(h0_t.names) if n not in x_t.names)
    steps = x_t.size(axis)
    ys = []
    stepped_decay = axis in call.operands[2].names
    for t in range(steps):
        h = np.exp(dt[t] * a[t if stepped_decay else 0]) * h + dt[t] * x[t] * b[t]
        if readout:
            ys.append((c[t] * h).sum(axis=summed, keepdims=True))
    if not readout:
        return h
    y = np.stack(ys)  # [S, h0 axes with the summed ones at size 1]
    kept = [n for i, n in enumerate(order) if i - 1 not in summed]
    y = y.reshape([y.shape[i] for i, n in enumerate(order) if i - 1 not in summed])
    return align(y, kept, x_t.names)


def _selective_cost(call: OpCall, readout: bool) -> OpCost:
    """Per step: dt*A and its exp over their broadcast, dt*x then *B, a*h + u over the state; the
    readout adds a multiply and an add per state element. Reads every operand once, writes the result;
    the state stays on chip between steps."""
    x, dt, a, b, c, h0 = call.operands
    axis = call.attrs["axis"]
    steps = x.size(axis)
    state = h0.numel * steps
    flops = 2 * _space(dt, a) + _space(dt, x) + 3 * state + (2 * state if readout else 0)
    return OpCost(flops, sum(t.nbytes for t in call.operands), call.out.nbytes)


@register
class Scan(OpDef):
    kind = "scan"
    min_operands = max_operands = 6
    attrs = _AXIS
    summary = (
        "Mamba's selective scan along `axis` (operands x, dt, A, B, C, h0; broadcast by axis name; the "
        "state's axes are h0's): h = exp(dt_t A) h + dt_t x_t B_t from h = h0, and y_t sums C_t h over "
        "the state axes x lacks. The result has x's axes. Mamba-1: x, dt [B, S, D], A [D, N], B, C "
        "[B, S, N], h0 [B, D, N]; Mamba-2: a per-head decay, dt [B, S, G, E], A [G, E]. A may have "
        "`axis` (a decay per step: RWKV-6's, A [B, S, H, K] with dt = 1)."
    )
    example = "%y = scan(%x, %dt, %A, %Bm, %Cm, %h0) {axis = S} : f32[B=1, S=8, D=32]"

    def infer(self, call):
        _selective_check(call)
        return _result(call, call.operands[0].with_axes(call.operands[0].axes))

    def evaluate(self, args, call, ctx):
        return _selective_run(args, call, readout=True)

    def cost(self, call):
        """Per step dt*A, exp, dt*x, *B, then a*h + u and the readout's multiply-add on every state
        element (8 per state element and step when dt and x cover the state); reads every operand
        once, writes y. The state lives on chip for the whole scan."""
        return _selective_cost(call, readout=True)


@register
class ScanState(OpDef):
    kind = "scan_state"
    min_operands = max_operands = 6
    attrs = _AXIS
    summary = (
        "The state `scan` (same operands) leaves after its last step: what decode carries to the "
        "next token and chunked prefill to the next chunk. The result has h0's axes."
    )
    example = "%h = scan_state(%x, %dt, %A, %Bm, %Cm, %h0) {axis = S} : f32[B=1, D=32, N=4]"

    def infer(self, call):
        h0 = _selective_check(call)
        return _result(call, h0)

    def evaluate(self, args, call, ctx):
        return _selective_run(args, call, readout=False)

    def cost(self, call):
        """scan's cost without the readout (C is read, as the fused kernel reads it once for both)."""
        return _selective_cost(call, readout=False)


# -- the gated delta rule of Qwen3-Next ------------------------------------------------------------


def _delta_axes(call: OpCall) -> tuple[list[str], list[str]]:
    """(key axes, value-only axes) of a delta_scan, checked."""
    q, k, v, g, beta, h0 = call.operands
    axis = call.attrs["axis"]
    _check_sequence_operands(call, stepped=(0, 1, 2, 3, 4), fixed=())
    keys = [n for n in k.names if n not in v.names]
    require(keys, f"k {call.label(1)} : {k} needs a key axis v {call.label(2)} : {v} lacks")
    require(
        q.names == k.names,
        f"q {call.label(0)} : {q} and k {call.label(1)} : {k} must have the same axes",
    )
    union = {n for n in k.names + v.names if n != axis}
    require(
        set(h0.names) == union,
        f"the state {call.label(5)} : {h0} must have the axes of k and v without '{axis}': {sorted(union)}",
    )
    for i in (3, 4):
        t = call.operands[i]
        bad = [n for n in t.names if n in keys]
        require(not bad, f"{call.label(i)} : {t} is per head and step, not per key axis [{' '.join(bad)}]")
    return keys, [n for n in v.names if n != axis]


def _delta_run(args: Sequence[np.ndarray], call: OpCall, readout: bool) -> np.ndarray:
    axis = call.attrs["axis"]
    v_t, h0_t = call.operands[2], call.operands[-1]
    keys, _ = _delta_axes(call)
    order = [axis, *h0_t.names]
    q, k, v, g, beta, h = _aligned(args, call, order)
    h = h[0]
    summed = tuple(i for i, n in enumerate(h0_t.names) if n in keys)
    ys = []
    for t in range(v_t.size(axis)):
        h = np.exp(g[t]) * h
        delta = beta[t] * (v[t] - (k[t] * h).sum(axis=summed, keepdims=True))
        h = h + k[t] * delta
        if readout:
            ys.append((q[t] * h).sum(axis=summed, keepdims=True))
    if not readout:
        return h
    y = np.stack(ys)
    kept = [n for i, n in enumerate(order) if i - 1 not in summed]
    y = y.reshape([y.shape[i] for i, n in enumerate(order) if i - 1 not in summed])
    return align(y, kept, v_t.names)


def _delta_cost(call: OpCall, readout: bool) -> OpCost:
    """Per step and state element: the decay's exp-and-multiply (exp over g's own axes), k.h
    (multiply-add), v - k.h and * beta over v, k * delta + h (2); readout q.h (2)."""
    q, k, v, g, beta, h0 = call.operands
    steps = v.size(call.attrs["axis"])
    state = h0.numel * steps
    flops = g.numel + state + 2 * state + 2 * v.numel + 2 * state + (2 * state if readout else 0)
    return OpCost(flops, sum(t.nbytes for t in call.operands), call.out.nbytes)


@register
class DeltaScan(OpDef):
    kind = "delta_scan"
    min_operands = max_operands = 6
    attrs = _AXIS
    summary = (
        "The gated delta rule along `axis` (operands q, k, v, g, beta, h0; broadcast by axis name): "
        "h = exp(g_t) h, then h += k_t beta_t (v_t - k_t.h), y_t = q_t.h, where '.' sums the key "
        "axes (k's axes v lacks). The result has v's axes. Qwen3-Next: q, k [B, S, H, K], v "
        "[B, S, H, V], g, beta [B, S, H], h0 [B, H, K, V]."
    )
    example = "%y = delta_scan(%q, %k, %v, %g, %beta, %h0) {axis = S} : f32[B=1, S=8, H=2, V=16]"

    def infer(self, call):
        _delta_axes(call)
        v = call.operands[2]
        return _result(call, v.with_axes(v.axes))

    def evaluate(self, args, call, ctx):
        return _delta_run(args, call, readout=True)

    def cost(self, call):
        """Per step and state element: decay multiply, k.h, the rank-one update and q.h (2 each);
        exp over g, v - k.h and beta over v; reads every operand once, writes y."""
        return _delta_cost(call, readout=True)


@register
class DeltaScanState(OpDef):
    kind = "delta_scan_state"
    min_operands = max_operands = 6
    attrs = _AXIS
    summary = "The state `delta_scan` (same operands) leaves after its last step; h0's axes."
    example = "%h = delta_scan_state(%q, %k, %v, %g, %beta, %h0) {axis = S} : f32[B=1, H=2, K=16, V=16]"

    def infer(self, call):
        _delta_axes(call)
        return _result(call, call.operands[-1])

    def evaluate(self, args, call, ctx):
        return _delta_run(args, call, readout=False)

    def cost(self, call):
        """delta_scan's cost without the readout."""
        return _delta_cost(call, readout=False)


# -- the plain linear recurrence (the chunked scan's inter-chunk step) -------------------------------


@register
class Recurrence(OpDef):
    kind = "recurrence"
    min_operands = max_operands = 3
    attrs = {
        **_AXIS,
        "mix": AttrSpec(
            "str_list", required=False,
            doc="[state axis, a's column axis]: a is a matrix over the state axis per step "
                "(h_c = a_c . h_(c-1) + u_c, summing the column axis), not a factor",
        ),
    }  # fmt: skip
    summary = (
        "h_t = a_t h_(t-1) + u_t along `axis` from h0, every h_t returned (u's axes). a broadcasts "
        "onto u by axis name; h0 has u's axes without `axis`, in order. With `mix = [K, Kt]`, a also "
        "has the column axis Kt and multiplies h as a matrix over K: h_t[K] = sum_Kt a_t[K, Kt] "
        "h_(t-1)[K=Kt] + u_t. The chunked scans' inter-chunk state step: a is each chunk's total decay "
        "(or, for the delta rule, its transition matrix), u the state the chunk adds."
    )
    example = "%hs = recurrence(%a, %u, %h0) {axis = C} : f32[C=4, H=2, P=8, N=16]"

    def infer(self, call):
        a, u, h0 = call.operands
        axis = call.attrs["axis"]
        for i, t in enumerate(call.operands):
            require(t.dtype.is_float, f"recurrence needs float operands, {call.label(i)} is {t.dtype}")
        require(axis in u.names, f"u {call.label(1)} : {u} needs the axis '{axis}'")
        mix = call.attrs.get("mix")
        column = None
        if mix is not None:
            require(len(mix) == 2, f"mix names [state axis, column axis], got {list(mix)}")
            row, column = mix
            require(
                row in u.names and row != axis and column in a.names and column not in u.names,
                f"mix [{row}, {column}]: '{row}' must be a state axis of u and '{column}' an axis of a only",
            )
            require(
                a.size(column) == u.size(row),
                f"mix column '{column}' has size {a.size(column)} but state axis '{row}' {u.size(row)}",
            )
        same_sizes(call.labelled())
        extra = [n for n in a.names if n not in u.names and n != column]
        require(not extra, f"a {call.label(0)} : {a} has axes [{' '.join(extra)}] u lacks")
        require(
            h0.names == tuple(n for n in u.names if n != axis),
            f"h0 {call.label(2)} : {h0} must have u's axes without '{axis}', in order",
        )
        return _result(call, u)

    def evaluate(self, args, call, ctx):
        a_t, u_t, _ = call.operands
        axis = call.attrs["axis"]
        mix = call.attrs.get("mix")
        at = u_t.index(axis)
        order = [*u_t.names, mix[1]] if mix else list(u_t.names)
        a = np.moveaxis(align(args[0].astype(np.float32), a_t.names, order), at, 0)
        u = np.moveaxis(args[1].astype(np.float32), at, 0)
        h = args[2].astype(np.float32)
        row = [n for n in u_t.names if n != axis].index(mix[0]) if mix else 0
        out = np.empty_like(u)
        for t in range(u.shape[0]):
            step = a[min(t, a.shape[0] - 1)]
            if mix:  # h_new[.., i, ..] = sum_j step[.., i, .., j] h[.., j, ..]
                h = (step * np.expand_dims(np.moveaxis(h, row, -1), row)).sum(axis=-1) + u[t]
            else:
                h = step * h + u[t]
            out[t] = h
        return np.moveaxis(out, 0, at)

    def cost(self, call):
        """A multiply and an add per element of u (per element and column with `mix`); reads a, u
        and h0, writes every state."""
        a, u, _ = call.operands
        mix = call.attrs.get("mix")
        per = a.size(mix[1]) if mix else 1
        return OpCost(2 * u.numel * per, sum(t.nbytes for t in call.operands), call.out.nbytes)


# -- the short causal convolution ------------------------------------------------------------------


def _conv_taps(call: OpCall) -> str:
    """The taps axis of a conv1d (w's one axis x lacks), checked with the other operands."""
    x, w, window = call.operands
    axis = call.attrs["axis"]
    require(axis in x.names, f"conv1d axis '{axis}' is not an axis of {call.label(0)} : {x}")
    taps = [n for n in w.names if n not in x.names]
    require(len(taps) == 1, f"w {call.label(1)} : {w} needs exactly one taps axis x lacks, got {taps}")
    require(axis not in w.names, f"w {call.label(1)} : {w} must not have the sequence axis '{axis}'")
    k = w.size(taps[0])
    require(
        window.names == x.names and window.size(axis) == k - 1,
        f"window {call.label(2)} : {window} must have x's axes [{' '.join(x.names)}] with '{axis}' of "
        f"size {k - 1} (taps - 1)",
    )
    same_sizes([(call.label(0), x), (call.label(1), w)])
    same_sizes([(label, t.with_axes(a for a in t.axes if a.name != axis)) for label, t in call.labelled()])
    for i, t in enumerate(call.operands):
        require(t.dtype.is_float, f"conv1d needs float operands, {call.label(i)} is {t.dtype}")
    return taps[0]


@register
class Conv1d(OpDef):
    kind = "conv1d"
    min_operands = max_operands = 3
    attrs = {"axis": AttrSpec("str", doc="the sequence axis the convolution slides along")}
    summary = (
        "Causal depthwise convolution along `axis` (operands x, w, window): y_t = sum_j w_j "
        "xx_(t+j), xx = concat(window, x) along `axis`; w's one axis x lacks holds the K taps, its "
        "others are channel axes of x; window (x's axes, `axis` of size K - 1) carries the previous "
        "inputs (zeros at a sequence's start). The result has x's axes."
    )
    example = "%y = conv1d(%x, %w, %window) {axis = S} : f32[B=1, S=8, D=32]"

    def infer(self, call):
        _conv_taps(call)
        x = call.operands[0]
        return _result(call, x.with_axes(x.axes))

    def evaluate(self, args, call, ctx):
        x, w, window = call.operands
        axis = call.attrs["axis"]
        taps = _conv_taps(call)
        xx = np.concatenate([args[2], args[0]], axis=x.index(axis)).astype(np.float32)
        order = [*x.names, taps]
        weights = align(args[1].astype(np.float32), w.names, order)
        steps, k = x.size(axis), w.size(taps)
        out = np.zeros(x.shape, dtype=np.float32)
        s = x.index(axis)
        for j in range(k):
            part = np.take(xx, np.arange(j, j + steps), axis=s)
            out += part * np.take(weights, j, axis=len(order) - 1)
        return out

    def cost(self, call):
        """A multiply and an add per tap and output element; reads x, w and the window, writes y."""
        x, w, _ = call.operands
        k = w.size(_conv_taps(call))
        return OpCost(2 * k * x.numel, sum(t.nbytes for t in call.operands), call.out.nbytes)
