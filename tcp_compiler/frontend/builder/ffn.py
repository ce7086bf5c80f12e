"""Feed-forward blocks as IR: the dense MLP, and MoE's experts grouped by token (routing in
`routing`) with the shared expert some families run beside them.

Axis names: D hidden, F MLP width, E experts, Kk routed slots, R the routed rows sorted by expert.
"""

from __future__ import annotations

import numpy as np

from ir import F32, I32, Node, TensorType
from tcp_compiler.frontend.builder.core import Binding, Cut, GraphBuilder, Weight, whole
from tcp_compiler.frontend.builder.routing import route
from tcp_compiler.frontend.builder.weights import linear, split_groups, weight
from tcp_compiler.frontend.config import Layer


def feed_forward(b: GraphBuilder, i: int, layer: Layer, x: Node, reduce: bool = True) -> Node:
    """Layer i's MLP or MoE on x; partial sums over the chips joined unless `reduce` is False."""
    return moe(b, i, x, reduce) if layer.moe else mlp(b, i, x, reduce)


# beta and eps of transformers' XIELUActivation, which ApertusMLP builds with its defaults
XIELU_BETA, XIELU_EPS = 0.5, -1e-6


def activate(b: GraphBuilder, gate: Node, label: str, pre: str | None = None) -> Node:
    """The MLP's activation: its IR unary op, relu2 as relu then a square, or xielu with the
    trainable scalars of the MLP under `pre` (`{pre}.act_fn.alpha_p`, `.alpha_n`)."""
    if b.cfg.mlp.activation == "relu2":
        r = b.g.add("relu", gate, name=b.name(f"{label}.relu"))
        return b.g.add("mul", r, r, name=b.name(label))
    if b.cfg.mlp.activation == "xielu":
        assert pre is not None, "xielu's scalars belong to a dense MLP"
        alphas = [b.to(b.tensor(f"{pre}.act_fn.{a}", b.p.table, {}), gate.type.dtype)
                  for a in ("alpha_p", "alpha_n")]  # fmt: skip
        return b.g.add("xielu", gate, *alphas, name=b.name(label), beta=XIELU_BETA, eps=XIELU_EPS)
    return b.g.add(b.cfg.mlp.activation, gate, name=b.name(label))


def mlp(b: GraphBuilder, i: int, x: Node, reduce: bool = True, pre: str | None = None) -> Node:
    """Gated (act(gate) * up) or plain (act(up)) MLP over this chip's F columns; the down
    projection's partial sums join over chips. Weights under `pre` (default layer i's mlp)."""
    cfg, g, sh = b.cfg, b.g, b.sh
    pre = pre or f"model.layers.{i}.mlp"
    D, F = cfg.hidden, sh.intermediate
    column = sh.columns(F)
    bias = column if cfg.mlp.bias else None
    up = linear(b, x, f"{pre}.up_proj.weight", {"F": F, "D": D}, ["D"], ["B", "S", "F"], "up", column, bias)
    if cfg.mlp.kind == "gated":
        gate = linear(b, x, f"{pre}.gate_proj.weight", {"F": F, "D": D}, ["D"], ["B", "S", "F"], "gate",
                      column, bias)  # fmt: skip
        gate = b.scaled(gate, cfg.mlp.gate_scale, "gate_scaled")
        if cfg.mlp.swiglu_limit is None:
            act = g.add("mul", activate(b, gate, "act", pre), up, name=b.name("glu"))
        else:
            act = _glu(b, gate, up, "mlp")
    else:
        act = activate(b, up, "act", pre)
    down = linear(b, act, f"{pre}.down_proj.weight", {"D": D, "F": F}, ["F"], ["B", "S", "D"], "down",
                  sh.rows(F), sh.row_bias if cfg.mlp.bias else None)  # fmt: skip
    down = b.scaled(down, cfg.mlp.down_scale, "down_scaled")
    return b.join(down, b.name("down.sum")) if reduce else down


def moe(b: GraphBuilder, i: int, x: Node, reduce: bool = True) -> Node:
    """The router (a linear over the experts), its routing (`routing.route`), then experts
    grouped by token.

    As real MoE kernels do: `dispatch` orders the T x k routed slots' token rows by expert,
    `bincount` gives each expert's row count, each projection is a `grouped_einsum` of those
    rows with the whole stacked expert weight [E, ...] (each expert's weights read at most
    once; FLOPs exactly tokens x k x one expert's), and `combine` sums each token's k slots
    weighted by its routing weights. Every chip routes (the router is replicated) and holds a
    1/chips slice of every expert's width; the combined partial sums join over the chips.
    """
    cfg = b.cfg
    assert cfg.moe is not None
    D, E = cfg.hidden, cfg.moe.experts
    router = linear(
        b, x, cfg.moe.router_name.format(i=i), {"E": E, "D": D}, ["D"], ["B", "S", "E"], "router",
        bias=whole if cfg.moe.router_bias else None,
    )  # fmt: skip
    return _experts(b, i, x, *route(b, i, router), reduce)


def _experts(b: GraphBuilder, i: int, x: Node, idx: Node, weights: Node, reduce: bool) -> Node:
    """The routed experts of layer i: x's rows (or their latent projection, Moe.latent) for slots
    `idx` [B, S, Kk] through each chosen expert's MLP (gated, or act(up) where Moe.gated is False),
    summed with `weights` (see moe)."""
    cfg, g, sh = b.cfg, b.g, b.sh
    F, E = sh.moe_intermediate, cfg.moe.experts
    axis, width = ("D", cfg.hidden) if cfg.moe.latent is None else ("L", cfg.moe.latent)  # experts' in, out
    counts = g.add("bincount", idx, name=b.name("expert_counts"), type=TensorType.of(I32, E=E))
    column, row = sh.columns(F), sh.rows(F)
    first = _expert_weight(b, i, 0 if cfg.moe.gated else 1, {"E": E, "F": F, axis: width}, axis, column)
    routed = x if cfg.moe.latent is None else _latent(b, i, x, 0)
    if cfg.moe.weights_input:
        rows, weights = _weighted_rows(b, routed, idx, weights)
        rows = b.to(rows, first[0].type.dtype)
    else:
        rows = g.add("dispatch", b.to(routed, first[0].type.dtype), idx, name=b.name("expert_rows"), axis="R")
    if cfg.moe.gated:
        gate = _expert(b, rows, counts, first, "expert_gate", _expert_bias(b, i, 0, idx, F, column))
        up_w = _expert_weight(b, i, 1, {"E": E, "F": F, axis: width}, axis, column)
        up = _expert(b, rows, counts, up_w, "expert_up", _expert_bias(b, i, 1, idx, F, column))
        act = _glu(b, gate, up, "expert")
    else:
        up = _expert(b, rows, counts, first, "expert_up", _expert_bias(b, i, 1, idx, F, column))
        act = activate(b, up, "expert_act")
    down_w = _expert_weight(b, i, 2, {"E": E, axis: width, "F": F}, "F", row)
    down_b = _expert_bias(b, i, 2, idx, width, sh.row_bias)
    down = _expert(b, act, counts, down_w, "expert_down", down_b)
    out = g.add("combine", down, idx, weights, name=b.name("moe"), axis="R", slots=["Kk"])
    if cfg.moe.latent is not None:
        out = _latent(b, i, out, 1)
    shared = _shared_expert(b, i, x)
    if shared is not None:
        out = g.add("add", out, shared, name=b.name("moe_shared"))
    return b.join(out, b.name("moe.sum")) if reduce else out


def _latent(b: GraphBuilder, i: int, x: Node, which: int) -> Node:
    """Moe.latent's projection `which`: 0 from the hidden size D into the experts' width L (whole
    on every chip), 1 back to D, of the experts' partial sums (linear, so they still sum)."""
    cfg, moe = b.cfg, b.cfg.moe
    D, L, name = cfg.hidden, moe.latent, moe.latent_names[which].format(i=i)
    if which == 0:
        return linear(b, x, name, {"L": L, "D": D}, ["D"], ["B", "S", "L"], "latent_in")
    return linear(b, x, name, {"D": D, "L": L}, ["L"], ["B", "S", "D"], "latent_out")


def _weighted_rows(b: GraphBuilder, x: Node, idx: Node, weights: Node) -> tuple[Node, Node]:
    """Llama 4 weighs a routed slot's input, not its output: each dispatched row [R, D] times its
    slot's weight (dispatched the same way), in the activation dtype as transformers multiplies
    them, and weights of one for the combine."""
    g, act = b.g, b.p.act
    rows = g.add("dispatch", b.to(x, act), idx, name=b.name("expert_rows"), axis="R")
    row_weights = b.to(g.add("dispatch", weights, idx, name=b.name("row_weights"), axis="R"), act)
    scaled = g.add("mul", rows, row_weights, name=b.name("expert_rows_weighted"))
    ones = g.add("const", name=b.name("slot_ones"), type=weights.type, value=1.0)
    return scaled, ones


def _glu(b: GraphBuilder, gate: Node, up: Node, label: str) -> Node:
    """act(gate) * up, or with a swiglu_limit the clamped SwiGLU (gpt-oss's experts, Phi-3-small's
    gegelu): gate clamped above at the limit, up to [-limit, limit], then
    (up + 1) * gate * sigmoid(alpha * gate)."""
    g, mlp = b.g, b.cfg.mlp
    if mlp.swiglu_limit is None:
        return g.add("mul", activate(b, gate, f"{label}_act"), up, name=b.name(f"{label}_glu"))
    limit = float(np.float32(mlp.swiglu_limit))
    gate = g.add("min", gate, b.const(limit), name=b.name(f"{label}_gate_clamped"))
    up = g.add("max", g.add("min", up, b.const(limit), name=b.name(f"{label}_up_below")), b.const(-limit),
               name=b.name(f"{label}_up_clamped"))  # fmt: skip
    alpha = b.const(float(np.float32(mlp.swiglu_alpha)))
    scaled = g.add("mul", gate, alpha, name=b.name(f"{label}_gate_scaled"))
    sigmoid = g.add("sigmoid", scaled, name=b.name(f"{label}_sigmoid"))
    act = g.add("mul", gate, sigmoid, name=b.name(f"{label}_act"))
    shifted = g.add("add", up, b.const(1.0), name=b.name(f"{label}_up_plus1"))
    return g.add("mul", shifted, act, name=b.name(f"{label}_glu"))


def _stacked_experts(b: GraphBuilder, i: int, name: str, experts: int, part: Cut) -> Binding:
    """The one place expert tensors are bound: canonical per-expert tensor `name` ({i}, {e}) of
    every expert, each found through the family's layout (a tensor of its own, or its slice of
    a tensor stacking them all) and cut for the rank, stacked as [E, ...]."""
    found = [b.cfg.tensors.source(name.format(i=i, e=e)) for e in range(experts)]
    sources = tuple(dict.fromkeys(t for f in found for t in f.tensors))
    return Binding(sources, lambda get, rank: np.stack([part(f.load(get), rank) for f in found]))


def _expert_weight(
    b: GraphBuilder, i: int, which: int, axes: dict[str, int], contract: str, part: Cut
) -> Weight:
    """The whole stacked weight [E, ...] of expert projection `which` (gate, up, down), each
    expert's checkpoint tensor cut for this rank; dequantised as it is fetched when integer."""
    fmt = b.cfg.moe.expert_names[which]
    binding = _stacked_experts(b, i, fmt, axes["E"], part)
    name = fmt.format(i=i, e="all").replace(".all.", ".")
    return weight(b, name, axes, [contract], binding.sources, binding.make)


def _expert_bias(b: GraphBuilder, i: int, which: int, idx: Node, width: int, part: Cut) -> Node | None:
    """[R, out] f32: each sorted row's expert's bias for projection `which` (None when experts
    have none): the stacked [E, out] biases gathered by each row's expert, dispatch(idx, idx)."""
    moe, g = b.cfg.moe, b.g
    if not moe.expert_bias:
        return None
    row_experts = b.name("row_experts")
    if row_experts not in g:
        g.add("dispatch", idx, idx, name=row_experts, axis="R")
    fmt = moe.expert_names[which].removesuffix(".weight") + ".bias"
    name = fmt.format(i=i, e="all").replace(".all.", ".")
    out = ("D" if moe.latent is None else "L") if which == 2 else "F"
    binding = _stacked_experts(b, i, fmt, moe.experts, part)
    bias = b.param(name, b.p.table, {"E": moe.experts, out: width}, binding)
    return b.to(g.add("gather", bias, g[row_experts], name=f"{name}.rows", axis="E"), F32)


def _expert(
    b: GraphBuilder, rows: Node, counts: Node, w: Weight, label: str, bias: Node | None = None
) -> Node:
    """The rows [R, contract] (sorted by expert) against their experts' slices of the weight,
    plus each row's expert's `bias` [R, out] when given."""
    operand, grouped, split = w
    x = b.to(split_groups(b, rows, split), operand.type.dtype)
    out = ["R", *(a for a in operand.type.names if a != "E" and a not in grouped)]
    eq = f"{' '.join(x.type.names)}, {' '.join(operand.type.names)} -> {' '.join(out)}"
    y = TensorType.from_pairs(F32, [(a, {**x.type.sizes, **operand.type.sizes}[a]) for a in out])
    top_k = b.cfg.moe.top_k
    y = b.g.add(
        "grouped_einsum", x, operand, counts, name=b.name(label), eq=eq, group="E", top_k=top_k, type=y
    )
    return y if bias is None else b.g.add("add", y, bias, name=b.name(f"{label}_b"))


def _shared_expert(b: GraphBuilder, i: int, x: Node) -> Node | None:
    """The shared expert's partial sums [B, S, D] over this chip's slice of its width (joined with
    the routed experts' by the caller's all_reduce), scaled by sigmoid(x . gate) where it has a
    gate; None without a shared expert."""
    cfg, g, sh = b.cfg, b.g, b.sh
    shared = cfg.moe.shared if cfg.moe is not None else None
    if shared is None:
        return None
    D, F = cfg.hidden, sh.width(shared.intermediate)
    gate_n, up_n, down_n = (n.format(i=i) for n in shared.names)

    def widen(name: str, label: str) -> Node:
        return linear(b, x, name, {"F": F, "D": D}, ["D"], ["B", "S", "F"], label, sh.columns(F))

    if cfg.moe.gated:
        gate, up = widen(gate_n, "shared_gate"), widen(up_n, "shared_up")
        act = g.add("mul", activate(b, gate, "shared_act"), up, name=b.name("shared_glu"))
    else:
        act = activate(b, widen(up_n, "shared_up"), "shared_act")
    out = linear(b, act, down_n, {"D": D, "F": F}, ["F"], ["B", "S", "D"], "shared_down", sh.rows(F))
    if shared.gate_name is None:
        return out
    logit = linear(b, x, shared.gate_name.format(i=i), {"O": 1, "D": D}, ["D"], ["B", "S", "O"],
                   "shared_gate_logit")  # fmt: skip
    lead = [(a.name, a.size) for a in logit.type.axes if a.name != "O"]
    logit = g.add("reshape", logit, name=b.name("shared_gate_token"), type=TensorType.from_pairs(F32, lead))
    scale = g.add("sigmoid", logit, name=b.name("shared_scale"))
    return g.add("mul", out, scale, name=b.name("shared"))
