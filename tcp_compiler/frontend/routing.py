"""MoE routing and shared experts as IR: which experts each token's slots go to, with what weight,
and the shared MLP every token runs beside them.

DeepSeek-V3's routing (softmax routing is the builder's own): sigmoid scores; the correction
bias is added to pick experts but the weights are the unbiased scores; with n_group groups, only
the topk_group groups whose two best (biased) scores sum highest are eligible; weights
renormalised (norm_topk_prob) and multiplied by routed_scaling_factor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ir import F32, I32, Node, TensorType
from tcp_compiler.errors import FrontendError

if TYPE_CHECKING:
    from tcp_compiler.frontend.builder import _Builder


def route(b: _Builder, i: int, router: Node) -> tuple[Node, Node]:
    """DeepSeek's (expert index [B, S, Kk], routing weight [B, S, Kk]) from the router logits
    [B, S, E]; softmax routing stays in the builder."""
    g, moe = b.g, b.cfg.moe
    assert moe is not None and moe.scoring == "sigmoid"
    probs = g.add("sigmoid", router, name=f"l{i}.router.probs")
    idx = g.add("topk", _choice(b, i, probs), name=f"l{i}.experts", axis="E", k=moe.top_k, new_axis="Kk")
    weights = g.add("gather", probs, idx, name=f"l{i}.expert_weights", axis="E")
    if moe.normalize_top_k:
        total = g.add("reduce", weights, name=f"l{i}.expert_weights.sum", op="sum", axes=["Kk"])
        weights = g.add("div", weights, total, name=f"l{i}.expert_weights.norm")
    if moe.routed_scale != 1.0:
        weights = g.add("mul", weights, b.const(moe.routed_scale), name=f"l{i}.expert_weights.scaled")
    return idx, weights


def _choice(b: _Builder, i: int, probs: Node) -> Node:
    """The scores experts are picked by: plus the correction bias, -inf outside the best groups."""
    g, moe = b.g, b.cfg.moe
    E = moe.experts
    choice = probs
    if moe.correction_bias_name is not None:
        bias = b.tensor(moe.correction_bias_name.format(i=i), F32, {"E": E})
        choice = g.add("add", probs, bias, name=f"l{i}.router.biased")
    if moe.groups == 1:
        return choice
    lead = [(a.name, a.size) for a in choice.type.axes if a.name != "E"]
    grouped = TensorType.from_pairs(F32, [*lead, ("Eg", moe.groups), ("Ee", E // moe.groups)])
    by_group = g.add("reshape", choice, name=f"l{i}.router.groups", type=grouped)
    best2 = g.add("topk", by_group, name=f"l{i}.router.best2", axis="Ee", k=2, new_axis="Kt")
    pair = g.add("gather", by_group, best2, name=f"l{i}.router.best2_scores", axis="Ee")
    group_score = g.add("reduce", pair, name=f"l{i}.router.group_scores", op="sum", axes=["Kt"])
    picked = g.add("topk", group_score, name=f"l{i}.router.top_groups", axis="Eg", k=moe.topk_groups,
                   new_axis="Kg")  # fmt: skip
    which = g.add("iota", name=f"l{i}.router.group_id", type=TensorType.of(I32, Eg=moe.groups), axis="Eg")
    hit_type = TensorType.from_pairs(F32, [*lead, ("Kg", moe.topk_groups), ("Eg", moe.groups)])
    hit = g.add("eq", picked, which, name=f"l{i}.router.hit")
    hit = g.add("cast", hit, name=f"l{i}.router.hit_f32", type=hit_type)
    kept = g.add("reduce", hit, name=f"l{i}.router.kept", op="max", axes=["Kg"])
    eligible = g.add("gt", kept, b.const(0.0), name=f"l{i}.router.eligible")
    masked = g.add("where", eligible, by_group, b.const(-float("inf")), name=f"l{i}.router.masked")
    return g.add("reshape", masked, name=f"l{i}.router.choice", type=choice.type)


def shared_expert(b: _Builder, i: int, x: Node) -> Node | None:
    """The shared expert's partial sums [B, S, D] over this chip's slice of its width (joined with
    the routed experts' by the caller's all_reduce), scaled by sigmoid(x . gate) where it has a
    gate; None without a shared expert."""
    cfg, g, sh = b.cfg, b.g, b.sh
    shared = cfg.moe.shared if cfg.moe is not None else None
    if shared is None:
        return None
    if shared.intermediate % sh.chips:
        raise FrontendError(
            f"{cfg.name}: shared expert width {shared.intermediate} does not split over {sh.chips} chips"
        )
    D, F = cfg.hidden, shared.intermediate // sh.chips
    gate_n, up_n, down_n = (n.format(i=i) for n in shared.names)
    gate = b.linear(x, gate_n, {"F": F, "D": D}, ["D"], ["B", "S", "F"], f"l{i}.shared_gate", sh.column)
    up = b.linear(x, up_n, {"F": F, "D": D}, ["D"], ["B", "S", "F"], f"l{i}.shared_up", sh.column)
    act = g.add("mul", b.activate(gate, f"l{i}.shared_act"), up, name=f"l{i}.shared_glu")
    out = b.linear(act, down_n, {"D": D, "F": F}, ["F"], ["B", "S", "D"], f"l{i}.shared_down", sh.row)
    if shared.gate_name is None:
        return out
    logit = b.linear(x, shared.gate_name.format(i=i), {"O": 1, "D": D}, ["D"], ["B", "S", "O"],
                     f"l{i}.shared_gate_logit")  # fmt: skip
    lead = [(a.name, a.size) for a in logit.type.axes if a.name != "O"]
    logit = g.add("reshape", logit, name=f"l{i}.shared_gate_token", type=TensorType.from_pairs(F32, lead))
    scale = g.add("sigmoid", logit, name=f"l{i}.shared_scale")
    return g.add("mul", out, scale, name=f"l{i}.shared")
