"""RWKV-5 ("Eagle") time mixing as IR, as the published Rwkv5ForCausalLM computes it
(RwkvSelfAttention there): token-shifted receptance, key, value and gate projections, then per head
of K channels a matrix-valued state over (key, value) channels:

    S_t   = diag(w) S_(t-1) + k_t^T v_t,       w = exp(-exp(time_decay))   [heads, K]
    out_t = r_t (S_(t-1) + diag(u) k_t^T v_t),  u = time_faaaa (the bonus)  [heads, K]

then a GroupNorm per head (ln_x, torch's eps 1e-5), times silu(gate), and the output projection.

out_t reads the state before step t's update, so the recurrence is the IR's `scan` over inputs
lagged one step (RWKV-4's device, builder/rwkv.py): x = v and B = k of the position before (zero
at the first), dt = 1, A = -exp(time_decay) per head and key channel, C = r, state [B, H, K, V];
its y_t = r_t S_(t-1). The bonus term is r_t . (u * k_t) times v_t, elementwise. Each layer carries
the state, the lagged k and v and the two token shifts' previous inputs."""

from __future__ import annotations

from ir import F32, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder, whole
from tcp_compiler.frontend.builder.norms import norm
from tcp_compiler.frontend.builder.ssm import carried_scan
from tcp_compiler.frontend.builder.token_shift import mix, shift
from tcp_compiler.frontend.builder.weights import linear

GROUP_NORM_EPS = 1e-5  # F.group_norm's default, which the published ln_x uses


def eagle_time_mix(b: GraphBuilder, pre: str, x: Node, decode: bool) -> tuple[Node, list[Node]]:
    """The time mixing of block `pre` on x [B, S, D] (after ln1); returns (output, its caches)."""
    g, ssm, D = b.g, b.cfg.ssm, b.cfg.hidden
    assert ssm is not None
    H, K, att = ssm.heads, ssm.head_dim, f"{pre}.attention"
    shifted, shift_window = shift(b, x, "att_shift", decode)

    def project(name: str, channel: str) -> Node:
        mixed = mix(b, x, shifted, f"{att}.time_mix_{name}", f"{name}_in")
        return linear(b, mixed, f"{att}.{name}.weight", {"H": H, channel: K, "D": D}, ["D"],
                      ["B", "S", "H", channel], name)  # fmt: skip

    r, k = project("receptance", "K"), project("key", "K")
    v, gate = project("value", "V"), project("gate", "V")
    k_lagged, k_window = shift(b, k, "key_lag", decode)
    v_lagged, v_window = shift(b, v, "value_lag", decode)
    decay = b.to(b.tensor(f"{att}.time_decay", b.p.table, {"H": H, "K": K}), F32)
    log_w = g.add("neg", g.add("exp", decay, name=b.name("decay_rate")), name=b.name("log_w"))
    ones = g.add("const", name=b.name("ones"), type=TensorType.of(F32, B=b.batch, S=b.seq, H=H), value=1.0)
    past, state = carried_scan(b, [v_lagged, ones, log_w, k_lagged, r], {"H": H, "K": K, "V": K}, decode)
    bonus = b.to(b.tensor(f"{att}.time_faaaa", b.p.table, {"H": H, "K": K}), F32)
    ruk = g.add("mul", r, g.add("mul", k, bonus, name=b.name("uk")), name=b.name("ruk"))
    weight = g.add("reduce", ruk, name=b.name("ruk.sum"), op="sum", axes=["K"])
    now = g.add("mul", weight, v, name=b.name("bonus"))
    wkv = g.add("add", past, now, name=b.name("wkv"))
    normed = norm(b, wkv, "V", f"{att}.ln_x", "ln_x", kind="layer", eps=GROUP_NORM_EPS, per=("H", whole))
    gated = g.add("mul", normed, g.add("silu", gate, name=b.name("gate_act")), name=b.name("gated"))
    axes = {"D": D, "H": H, "V": K}
    out = linear(b, gated, f"{att}.output.weight", axes, ["H", "V"], ["B", "S", "D"], "output")
    return out, [state, k_window, v_window, shift_window]
