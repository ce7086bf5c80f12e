"""RWKV blocks as IR (layers whose mixer is "rwkv", ModelConfig.ssm of kind "rwkv4", "rwkv5", "rwkv6"), as
transformers' RwkvForCausalLM computes them: x + time_mix(ln1(x)), then + channel_mix(ln2(x)).

Token shift (builder/token_shift.py): each mixing reads its input and the input one position
before (the window a decode step carries), mixed per channel. RWKV-5's time mixing is
builder/rwkv5.py (RWKV-6's too); their channel mixing is RWKV-4's (RWKV-6's mixes weigh the
previous token: time_maa_k, time_maa_r).

The WKV recurrence on the IR's `scan` (ir/ops/scan.py) as a ratio of two scans. With w =
exp(time_decay) and u = time_first, per channel:

    wkv_t = (sum_{i<t} e^{-(t-1-i) w} e^{k_i} v_i + e^{u + k_t} v_t)
          / (sum_{i<t} e^{-(t-1-i) w} e^{k_i}     + e^{u + k_t})

Each sum is a scan with decay exp(dt A) = e^{-w} (dt = 1, A = -w, one state entry per channel,
B = C = 1) over inputs lagged one step (e^{k} v, and e^{k}, of the position before; zero at the
first), so its output at t is the sum over i < t. transformers' CPU path (and the CUDA kernel)
tracks a running maximum exponent to keep e^{k} in range; the scans here hold the sums themselves,
equal in exact arithmetic and within f32 for the keys such models produce (|k| well below 88).
Each layer carries both sums, the two lagged inputs and the two token shifts' previous inputs.

Per-layer rescaling (transformers' eval mode, rescale_every): block i's attention output and
channel-mixing value are scaled by 2^-(i // rescale_every) and the hidden state halves after every
rescale_every-th block, as transformers does (its LayerNorms see the scaled values with their eps).
"""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder
from tcp_compiler.frontend.builder.ffn import activate
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.rwkv5 import eagle_time_mix, finch_time_mix
from tcp_compiler.frontend.builder.ssm import carried_scan
from tcp_compiler.frontend.builder.token_shift import mix, shift
from tcp_compiler.frontend.builder.weights import linear


def rwkv_block(b: GraphBuilder, i: int, h: Node, decode: bool) -> tuple[Node, list[Node]]:
    """Block i on h [B, S, D]; returns (output, its caches)."""
    ssm, g = b.cfg.ssm, b.g
    assert ssm is not None
    pre = f"model.layers.{i}"
    time_mix = {"rwkv5": eagle_time_mix, "rwkv6": finch_time_mix}.get(ssm.kind, _time_mix)
    att, caches = time_mix(b, pre, norm(b, h, "D", f"{pre}.ln1", "tm_norm"), decode)
    h = g.add("add", h, _rescaled(b, i, att, "att"), name=b.name("h_att"))
    ffn, window = _channel_mix(b, pre, norm(b, h, "D", f"{pre}.ln2", "cm_norm"), decode)
    h = g.add("add", h, _rescaled(b, i, ffn, "ffn"), name=b.name("out_sum"))
    if ssm.rescale_every and (i + 1) % ssm.rescale_every == 0:
        h = g.add("mul", h, b.const(0.5), name=b.name("out_halved"))
    return h, [*caches, window]


def _rescaled(b: GraphBuilder, i: int, x: Node, label: str) -> Node:
    every = b.cfg.ssm.rescale_every if b.cfg.ssm else 0
    if not every or i < every:
        return x
    return b.g.add("mul", x, b.const(2.0 ** -(i // every)), name=b.name(f"{label}.rescaled"))


def _time_mix(b: GraphBuilder, pre: str, x: Node, decode: bool) -> tuple[Node, list[Node]]:
    g, ssm, D = b.g, b.cfg.ssm, b.cfg.hidden
    assert ssm is not None
    A, att, sh = ssm.inner // b.sh.chips, f"{pre}.attention", b.sh  # this chip's WKV channels
    shifted, shift_window = shift(b, x, "att_shift", decode)
    k, v, r = (
        linear(b, mix(b, x, shifted, f"{att}.time_mix_{n}", f"{n}_in"), f"{att}.{n}.weight",
               {"A": A, "D": D}, ["D"], ["B", "S", "A"], n, part=sh.column)
        for n in ("key", "value", "receptance")
    )  # fmt: skip
    ek = g.add("exp", k, name=b.name("ek"))
    ekv = g.add("mul", ek, v, name=b.name("ekv"))
    decay = b.to(b.tensor(f"{att}.time_decay", b.p.table, {"A": A, "N": 1}, sh.column), F32)
    decay = g.add("neg", g.add("exp", decay, name=b.name("w")), name=b.name("neg_w"))
    ones = g.add("const", name=b.name("ones"), type=TensorType.of(F32, B=b.batch, S=b.seq, A=A), value=1.0)
    unit = g.add("const", name=b.name("unit"), type=TensorType.of(F32, B=b.batch, S=b.seq, N=1), value=1.0)
    sums, caches = [], []
    for label, term in (("num_", ekv), ("den_", ek)):
        lagged, window = shift(b, term, f"{label}lag", decode)
        y, state = carried_scan(b, [lagged, ones, decay, unit, unit], {"A": A, "N": 1}, decode, label=label)
        sums.append(y)
        caches += [state, window]
    first = b.to(b.tensor(f"{att}.time_first", b.p.table, {"A": A}, sh.column), F32)
    now = g.add("exp", g.add("add", k, first, name=b.name("uk")), name=b.name("e_uk"))
    num = g.add("add", sums[0], g.add("mul", now, v, name=b.name("now_v")), name=b.name("num"))
    den = g.add("add", sums[1], now, name=b.name("den"))
    wkv = g.add("div", num, den, name=b.name("wkv"))
    gated = g.add("mul", g.add("sigmoid", r, name=b.name("r")), wkv, name=b.name("gated"))
    out = linear(b, gated, f"{att}.output.weight", {"D": D, "A": A}, ["A"], ["B", "S", "D"], "output", sh.row)
    return b.all_reduce(out, b.name("output.sum")), [*caches, shift_window]


def _channel_mix(b: GraphBuilder, pre: str, x: Node, decode: bool) -> tuple[Node, Node]:
    """Key and value split over the chips as an MLP's up and down projections (the value's partial
    sums join); every chip computes the whole receptance gate."""
    g, D, F = b.g, b.cfg.hidden, b.sh.intermediate
    ffn = f"{pre}.feed_forward"
    shifted, window = shift(b, x, "ffn_shift", decode)
    finch = b.cfg.ssm is not None and b.cfg.ssm.kind == "rwkv6"  # time_maa_*: weights on the previous token
    key_mix, r_mix = (f"{ffn}.time_maa_k", f"{ffn}.time_maa_r") if finch else (
        f"{ffn}.time_mix_key", f"{ffn}.time_mix_receptance")  # fmt: skip
    k = linear(b, mix(b, x, shifted, key_mix, "ffn_key_in", finch), f"{ffn}.key.weight",
               {"F": F, "D": D}, ["D"], ["B", "S", "F"], "ffn_key", b.sh.columns(F))  # fmt: skip
    k = activate(b, k, "ffn_act")  # relu2 (the family's Mlp): relu(k)^2
    v = linear(b, k, f"{ffn}.value.weight", {"D": D, "F": F}, ["F"], ["B", "S", "D"], "ffn_value",
               b.sh.rows(F))  # fmt: skip
    v = b.all_reduce(v, b.name("ffn_value.sum"))
    r = linear(b, mix(b, x, shifted, r_mix, "ffn_r_in", finch), f"{ffn}.receptance.weight",
               {"E": D, "D": D}, ["D"], ["B", "S", "E"], "ffn_receptance")  # fmt: skip
    r = g.add("reshape", g.add("sigmoid", r, name=b.name("ffn_r_act")), name=b.name("ffn_r"),
              type=TensorType.of(F32, B=b.batch, S=b.seq, D=D))  # fmt: skip
    return g.add("mul", r, v, name=b.name("ffn_out")), window
