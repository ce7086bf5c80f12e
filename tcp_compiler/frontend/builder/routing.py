"""MoE routing as IR: which experts each token's slots go to, with what weight, from the router
logits [B, S, E]. Every family's routing is here (`route` picks by the config):

- scores: a softmax over all experts (Mixtral, Qwen MoE, DeepSeek V1 and V2) or independent
  sigmoids (DeepSeek-V3; Llama 4, whose weights scale the expert's input: `ffn`); the top k
  scores pick the experts and weigh them, renormalised over the k where the family does
  (norm_topk_prob; ERNIE 4.5 divides by at least moe_norm_min), then multiplied by
  routed_scaling_factor (DeepSeek);
- DeepSeek-V3's correction bias is added to pick experts, the weights stay the unbiased scores;
- with n_group groups (DeepSeek), only the topk_group best groups are eligible: ranked by the sum
  of their two best (biased) scores (V3) or by their best score (V2's group_limited_greedy);
- gpt-oss: top-k of the logits, then a softmax over those k;
- Phi-3.5-MoE's sparsemixer (inference): the two best logits pick the experts; slot k's weight is
  the softmax, at its own expert, over the experts whose logit is at most its own and within
  2 x eps of it relative to max(|logit|, its own) (slot 2 thereby leaves out the first pick).
"""

from __future__ import annotations

import numpy as np

from ir import F32, I32, Node, TensorType
from tcp_compiler.frontend.builder.core import GraphBuilder


def route(b: GraphBuilder, i: int, router: Node) -> tuple[Node, Node]:
    """Layer i's (expert index [B, S, Kk], routing weight [B, S, Kk]) from its router logits."""
    moe = b.cfg.moe
    assert moe is not None
    if moe.softmax_after_top_k:
        return _top_k_softmax(b, router)
    if moe.sparsemixer_eps is not None:
        return _sparsemixer(b, router, moe.sparsemixer_eps)
    return _top_k_scores(b, i, router)


def _scores(b: GraphBuilder, router: Node) -> Node:
    """Each expert's score: a softmax over all experts, or independent sigmoids."""
    g = b.g
    if b.cfg.moe.scoring == "sigmoid":
        return g.add("sigmoid", router, name=b.name("router.probs"))
    top = g.add("reduce", router, name=b.name("router.max"), op="max", axes=["E"])
    e = g.add("exp", g.add("sub", router, top, name=b.name("router.shifted")), name=b.name("router.exp"))
    total = g.add("reduce", e, name=b.name("router.sum"), op="sum", axes=["E"])
    return g.add("div", e, total, name=b.name("router.probs"))


def _top_k_softmax(b: GraphBuilder, router: Node) -> tuple[Node, Node]:
    """gpt-oss's routing: the top-k router logits, then a softmax over those k only (the same
    weights as a softmax over all experts renormalised over the k, in k exps, not E)."""
    g, k = b.g, b.cfg.moe.top_k
    idx = g.add("topk", router, name=b.name("experts"), axis="E", k=k, new_axis="Kk")
    logits = g.add("gather", router, idx, name=b.name("expert_logits"), axis="E")
    top = g.add("reduce", logits, name=b.name("expert_logits.max"), op="max", axes=["Kk"])
    shifted = g.add("sub", logits, top, name=b.name("expert_logits.shifted"))
    e = g.add("exp", shifted, name=b.name("expert_exp"))
    total = g.add("reduce", e, name=b.name("expert_exp.sum"), op="sum", axes=["Kk"])
    return idx, g.add("div", e, total, name=b.name("expert_weights"))


def _sparsemixer(b: GraphBuilder, router: Node, eps: float) -> tuple[Node, Node]:
    """Phi-3.5-MoE's routing at inference (see the module docstring), as transformers' sparsemixer
    computes it: the mask from (own - logit) / max(|logit|, own) > 2 eps, in float32."""
    g = b.g
    idx = g.add("topk", router, name=b.name("experts"), axis="E", k=2, new_axis="Kk")
    own = g.add("gather", router, idx, name=b.name("router.own"), axis="E")
    gap = g.add("sub", own, router, name=b.name("router.gap"))
    magnitude = g.add("abs", router, name=b.name("router.abs"))
    factor = g.add("max", magnitude, own, name=b.name("router.factor"))
    relative = g.add("div", gap, factor, name=b.name("router.relative"))
    far = g.add("gt", relative, b.const(float(np.float32(2 * eps))), name=b.name("router.far"))
    above = g.add("gt", router, own, name=b.name("router.above"))
    out = g.add("or", far, above, name=b.name("router.out"))
    shifted = g.add("neg", gap, name=b.name("router.shifted"))
    kept = g.add("where", out, b.const(-float("inf")), shifted, name=b.name("router.kept"))
    e = g.add("exp", kept, name=b.name("router.exp"))
    total = g.add("reduce", e, name=b.name("router.sum"), op="sum", axes=["E"])
    return idx, g.add("recip", total, name=b.name("expert_weights"))


def _top_k_scores(b: GraphBuilder, i: int, router: Node) -> tuple[Node, Node]:
    """The k best-scoring experts (among the eligible groups, by the biased scores where the family
    has a correction bias), weighed by their scores (see the module docstring)."""
    g, moe = b.g, b.cfg.moe
    probs = _scores(b, router)
    idx = g.add("topk", _choice(b, i, probs), name=b.name("experts"), axis="E", k=moe.top_k, new_axis="Kk")
    weights = g.add("gather", probs, idx, name=b.name("expert_weights"), axis="E")
    if moe.normalize_top_k:
        weights = _normalised(b, weights)
    if moe.routed_scale != 1.0:
        weights = g.add("mul", weights, b.const(moe.routed_scale), name=b.name("expert_weights.scaled"))
    return idx, weights


def _normalised(b: GraphBuilder, weights: Node) -> Node:
    """The top-k weights divided by their sum, or by the family's floor where the sum is below it."""
    total = b.g.add("reduce", weights, name=b.name("expert_weights.sum"), op="sum", axes=["Kk"])
    floor = b.cfg.moe.normalize_floor
    if floor > 0:
        total = b.g.add("max", total, b.const(floor), name=b.name("expert_weights.floored"))
    return b.g.add("div", weights, total, name=b.name("expert_weights.norm"))


def _choice(b: GraphBuilder, i: int, probs: Node) -> Node:
    """The scores experts are picked by: plus the correction bias, -inf outside the best groups."""
    g, moe = b.g, b.cfg.moe
    E = moe.experts
    choice = probs
    if moe.correction_bias_name is not None:
        bias = b.tensor(moe.correction_bias_name.format(i=i), F32, {"E": E})
        choice = g.add("add", probs, bias, name=b.name("router.biased"))
    if moe.groups == 1:
        return choice
    lead = [(a.name, a.size) for a in choice.type.axes if a.name != "E"]
    grouped = TensorType.from_pairs(F32, [*lead, ("Eg", moe.groups), ("Ee", E // moe.groups)])
    by_group = g.add("reshape", choice, name=b.name("router.groups"), type=grouped)
    group_score = _group_scores(b, by_group)
    picked = g.add("topk", group_score, name=b.name("router.top_groups"), axis="Eg", k=moe.topk_groups,
                   new_axis="Kg")  # fmt: skip
    which = g.add("iota", name=b.name("router.group_id"), type=TensorType.of(I32, Eg=moe.groups), axis="Eg")
    hit_type = TensorType.from_pairs(F32, [*lead, ("Kg", moe.topk_groups), ("Eg", moe.groups)])
    hit = g.add("eq", picked, which, name=b.name("router.hit"))
    hit = g.add("cast", hit, name=b.name("router.hit_f32"), type=hit_type)
    kept = g.add("reduce", hit, name=b.name("router.kept"), op="max", axes=["Kg"])
    eligible = g.add("gt", kept, b.const(0.0), name=b.name("router.eligible"))
    masked = g.add("where", eligible, by_group, b.const(-float("inf")), name=b.name("router.masked"))
    return g.add("reshape", masked, name=b.name("router.choice"), type=choice.type)


def _group_scores(b: GraphBuilder, by_group: Node) -> Node:
    """Each group's rank [.., Eg] from its experts' scores [.., Eg, Ee]."""
    g = b.g
    if b.cfg.moe.group_score == "max":
        return g.add("reduce", by_group, name=b.name("router.group_scores"), op="max", axes=["Ee"])
    best2 = g.add("topk", by_group, name=b.name("router.best2"), axis="Ee", k=2, new_axis="Kt")
    pair = g.add("gather", by_group, best2, name=b.name("router.best2_scores"), axis="Ee")
    return g.add("reduce", pair, name=b.name("router.group_scores"), op="sum", axes=["Kt"])
