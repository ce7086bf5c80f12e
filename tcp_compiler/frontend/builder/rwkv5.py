"""RWKV-5 ("Eagle") and RWKV-6 ("Finch") time mixing as IR, as the published Rwkv5ForCausalLM and
Rwkv6ForCausalLM compute it (their RwkvSelfAttention / Rwkv6SelfAttention): token-shifted
receptance, key, value and gate projections, then per head of K channels a matrix-valued state over
(key, value) channels:

    S_t   = diag(w_t) S_(t-1) + k_t^T v_t,       w_t = exp(-exp(d_t))        [heads, K]
    out_t = r_t (S_(t-1) + diag(u) k_t^T v_t),    u = time_faaaa (the bonus)  [heads, K]

then a GroupNorm per head (ln_x), times silu(gate), and the output projection. RWKV-5's d is the
static time_decay; RWKV-6's is time_decay + a LoRA of the token-shifted input, so it changes per
token, and RWKV-6's token-shift mixes are data-dependent too: each of w, k, v, r, g mixes with
time_maa_* + a shared LoRA (time_maa_w1, then one time_maa_w2 slice each) of x + (prev - x) maa_x.

out_t reads the state before step t's update, so the recurrence is the IR's `scan` over inputs
lagged one step (RWKV-4's device, builder/rwkv.py): x = v and B = k of the position before (zero
at the first), dt = 1, A = -exp(d) (RWKV-6: lagged too, A carrying the sequence axis), C = r,
state [B, H, K, V]; its y_t = r_t S_(t-1). The bonus term is r_t . (u * k_t) times v_t,
elementwise. Each layer carries the state, the lagged inputs and the two token shifts' previous
inputs (RWKV-5: lagged k and v, d channels more per layer than the published state; RWKV-6: d too)."""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder, cut
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.ssm import carried_scan
from tcp_compiler.frontend.builder.token_shift import blend, mix, shift
from tcp_compiler.frontend.builder.weights import linear

FINCH_MIXES = ("w", "k", "v", "r", "g")  # the order of time_maa_w2's slices (the published unbind)


def eagle_time_mix(b: GraphBuilder, pre: str, x: Node, decode: bool) -> tuple[Node, list[Node]]:
    """RWKV-5's time mixing of block `pre` on x [B, S, D] (after ln1); returns (output, caches)."""
    ssm, att = b.cfg.ssm, f"{pre}.attention"
    assert ssm is not None
    shifted, shift_window = shift(b, x, "att_shift", decode)
    names = ("receptance", "key", "value", "gate")
    inputs = {n: mix(b, x, shifted, f"{att}.time_mix_{n}", f"{n}_in") for n in names}
    heads = {"H": ssm.heads // b.sh.chips, "K": ssm.head_dim}
    decay = b.to(b.tensor(f"{att}.time_decay", b.p.table, heads, cut(0, b.sh.chips)), F32)
    out, caches = _heads(b, att, inputs, _log_decay(b, decay), decode)
    return out, [*caches, shift_window]


def finch_time_mix(b: GraphBuilder, pre: str, x: Node, decode: bool) -> tuple[Node, list[Node]]:
    """RWKV-6's time mixing of block `pre` on x [B, S, D] (after ln1); returns (output, caches)."""
    g, ssm, att, D = b.g, b.cfg.ssm, f"{pre}.attention", b.cfg.hidden
    assert ssm is not None
    shifted, shift_window = shift(b, x, "att_shift", decode)
    back = g.add("sub", shifted, x, name=b.name("att_back"))  # prev - x
    lora_in = blend(b, x, back, b.to(_vector(b, f"{att}.time_maa_x"), F32), "maa_x_in")
    E = ssm.mix_rank
    w1 = b.to(b.tensor(f"{att}.time_maa_w1", b.p.table, {"D": D, "J": len(FINCH_MIXES), "E": E}), F32)
    hidden = g.add("tanh", b.einsum(lora_in, w1, eq="B S D, D J E -> B S J E", name=b.name("maa_lora")),
                   name=b.name("maa_lora.tanh"))  # fmt: skip
    w2 = b.to(b.tensor(f"{att}.time_maa_w2", b.p.table, {"J": len(FINCH_MIXES), "E": E, "F": D}), F32)
    deltas = b.einsum(hidden, w2, eq="B S J E, J E F -> B S J F", name=b.name("maa_delta"))
    inputs = {}
    for j, n in enumerate(FINCH_MIXES):
        part = g.add("slice", deltas, name=b.name(f"maa_{n}.delta"), axis="J", start=j, stop=j + 1)
        part = g.add("reshape", part, name=b.name(f"maa_{n}.flat"), type=x.type.with_dtype(F32))
        rate = g.add("add", b.to(_vector(b, f"{att}.time_maa_{n}"), F32), part, name=b.name(f"maa_{n}"))
        inputs[n] = blend(b, x, back, rate, f"{n}_in")
    H, K, R, N = ssm.heads // b.sh.chips, ssm.head_dim, ssm.decay_rank, b.sh.chips  # this chip's heads
    dw1 = b.to(b.tensor(f"{att}.time_decay_w1", b.p.table, {"D": D, "R": R}), F32)
    dw2 = b.to(b.tensor(f"{att}.time_decay_w2", b.p.table, {"R": R, "H": H, "K": K}, cut(1, N)), F32)
    low = g.add("tanh", b.einsum(inputs.pop("w"), dw1, eq="B S D, D R -> B S R", name=b.name("decay_lora")),
                name=b.name("decay_lora.tanh"))  # fmt: skip
    lora = b.einsum(low, dw2, eq="B S R, R H K -> B S H K", name=b.name("decay_delta"))
    base = b.to(b.tensor(f"{att}.time_decay", b.p.table, {"H": H, "K": K}, cut(2, N)), F32)  # [1, 1, A]
    decay = g.add("add", base, lora, name=b.name("decay"))
    named = dict(zip(("receptance", "key", "value", "gate"), (inputs[n] for n in "rkvg"), strict=True))
    out, caches = _heads(b, att, named, _log_decay(b, decay), decode)
    return out, [*caches, shift_window]


def _vector(b: GraphBuilder, name: str) -> Node:
    return b.tensor(name, b.p.table, {"D": b.cfg.hidden})


def _log_decay(b: GraphBuilder, decay: Node) -> Node:
    """-exp(d): the log of the per-step decay w = exp(-exp(d))."""
    g = b.g
    return g.add("neg", g.add("exp", decay, name=b.name("decay_rate")), name=b.name("log_w"))


def _heads(
    b: GraphBuilder, att: str, inputs: dict[str, Node], log_w: Node, decode: bool
) -> tuple[Node, list[Node]]:
    """The projections of the mixed `inputs`, the WKV recurrence with decay exp(log_w), the bonus,
    ln_x, the gate and the output projection over this chip's heads (their partial sums join);
    returns (output, [state, lagged inputs...])."""
    g, ssm, D, sh = b.g, b.cfg.ssm, b.cfg.hidden, b.sh
    assert ssm is not None
    H, K = ssm.heads // sh.chips, ssm.head_dim

    def project(name: str, channel: str) -> Node:
        return linear(b, inputs[name], f"{att}.{name}.weight", {"H": H, channel: K, "D": D}, ["D"],
                      ["B", "S", "H", channel], name, sh.column)  # fmt: skip

    r, k = project("receptance", "K"), project("key", "K")
    v, gate = project("value", "V"), project("gate", "V")
    k_lagged, k_window = shift(b, k, "key_lag", decode)
    v_lagged, v_window = shift(b, v, "value_lag", decode)
    windows = [k_window, v_window]
    if "S" in log_w.type.names:  # a decay per token (RWKV-6): lagged with k and v
        log_w, w_window = shift(b, log_w, "decay_lag", decode)
        windows.append(w_window)
    ones = g.add("const", name=b.name("ones"), type=TensorType.of(F32, B=b.batch, S=b.seq, H=H), value=1.0)
    past, state = carried_scan(b, [v_lagged, ones, log_w, k_lagged, r], {"H": H, "K": K, "V": K}, decode)
    bonus = b.to(b.tensor(f"{att}.time_faaaa", b.p.table, {"H": H, "K": K}, sh.column), F32)
    ruk = g.add("mul", r, g.add("mul", k, bonus, name=b.name("uk")), name=b.name("ruk"))
    weight = g.add("reduce", ruk, name=b.name("ruk.sum"), op="sum", axes=["K"])
    now = g.add("mul", weight, v, name=b.name("bonus"))
    wkv = g.add("add", past, now, name=b.name("wkv"))
    normed = norm(b, wkv, "V", f"{att}.ln_x", "ln_x", kind="layer", eps=ssm.norm_eps, per=("H", sh.column))
    gated = g.add("mul", normed, g.add("silu", gate, name=b.name("gate_act")), name=b.name("gated"))
    axes = {"D": D, "H": H, "V": K}
    out = linear(b, gated, f"{att}.output.weight", axes, ["H", "V"], ["B", "S", "D"], "output", sh.row)
    return b.all_reduce(out, b.name("output.sum")), [state, *windows]
