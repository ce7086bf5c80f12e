"""Online-softmax attention: a rewrite of decomposed softmax attention into key blocks.

    scores = einsum(q, K) [* c] [+ bias ...] ; masked = where(mask, scores, -inf)
    out = einsum(softmax_over_A(masked) [cast], V)           (A: the key axis, e.g. Sk)

becomes, for key blocks j of `block` positions, a running max m, running sum l and a rescaled
accumulator (the flash-attention recurrence), so no tensor spans the whole key axis (the last
block may be shorter):

    m_j = max(m, max_A masked_j)       safe = m_j, or 0 where m_j is -inf (a fully masked block)
    a   = exp(m - safe)                p_j = exp(masked_j - safe)
    l   = l * a + sum_A p_j            acc = acc * a + einsum(p_j, V_j)
    out = acc / l                       lse = safe + log l   (optional output)

The score modifiers between the einsum and the mask (a scale, ALiBi's bias, ...) are any chain of
element-wise mul/add with a side operand; a side operand spanning the key axis is sliced per block.
The log-sum-exp per query row is what split-K decoding needs to merge partial results.

Interpreted, it equals the plain form to float rounding; the mapper uses it when a head's
scores do not fit on chip.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import Graph, Node, TensorType
from ir.types import Axis
from tcp_compiler.passes.simplify import clone, finish, new_graph


@dataclass(frozen=True)
class Attention:
    """One matched attention: the nodes of its plain softmax and what they read."""

    axis: str
    scores: Node  # einsum(q, K)
    modifiers: tuple[Node, ...]  # mul / add of the scores with a side operand, in order
    masked: Node | None  # where(mask, ., -inf)
    maximum: Node
    shifted: Node
    exp: Node
    total: Node
    probs: Node
    cast: Node | None
    out: Node  # einsum(probs, V)

    @property
    def nodes(self) -> set[str]:
        parts = (self.scores, *self.modifiers, self.masked, self.maximum, self.shifted, self.exp, self.total,
                 self.probs, self.cast, self.out)  # fmt: skip
        return {n.name for n in parts if n is not None}


def find_attention(graph: Graph) -> list[Attention]:
    """Every einsum over a softmax over a key axis, in the decomposed form the frontend builds."""
    users: dict[str, list[Node]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        for o in n.operands:
            users[o].append(n)
    found = []
    for out in graph.nodes:
        match = _match(graph, users, out)
        if match is not None:
            found.append(match)
    return found


def _single(users, node: Node, kind: str) -> Node | None:
    nxt = users[node.name]
    return nxt[0] if len(nxt) == 1 and nxt[0].kind == kind else None


def _match(graph: Graph, users, out: Node) -> Attention | None:
    if out.kind != "einsum" or len(out.operands) != 2:
        return None
    p = graph[out.operands[0]]
    cast = p if p.kind == "cast" else None
    probs = graph[p.operands[0]] if cast else p
    if probs.kind != "div":
        return None
    e, total = graph[probs.operands[0]], graph[probs.operands[1]]
    if e.kind != "exp" or total.kind != "reduce" or total.attrs["op"] != "sum" or total.operands[0] != e.name:
        return None
    (axis,) = total.attrs["axes"] if len(total.attrs["axes"]) == 1 else (None,)
    shifted = graph[e.operands[0]]
    if axis is None or shifted.kind != "sub":
        return None
    x, maximum = graph[shifted.operands[0]], graph[shifted.operands[1]]
    if (
        maximum.kind != "reduce"
        or maximum.attrs != {"op": "max", "axes": (axis,)}
        or maximum.operands[0] != x.name
    ):
        return None
    masked = x if x.kind == "where" else None
    y = graph[x.operands[1]] if masked else x
    modifiers: list[Node] = []
    while y.kind in ("mul", "add") and graph[y.operands[0]].kind in ("mul", "add", "einsum"):
        modifiers.insert(0, y)
        y = graph[y.operands[0]]
    scores = y
    if scores.kind != "einsum" or axis in out.type.names or axis not in graph[out.operands[1]].type.names:
        return None
    if masked is not None and graph[masked.operands[2]].type.rank != 0:
        return None  # the fill must be a scalar (-inf)
    # Every intermediate must feed only the next step, or the rewrite would change other readers.
    chain = [n for n in (scores, *modifiers, masked, probs, cast) if n is not None and n is not x]
    if any(len(users[n.name]) != 1 for n in chain) or len(users[x.name]) != 2 or len(users[e.name]) != 2:
        return None
    if len(users[maximum.name]) != 1 or len(users[shifted.name]) != 1 or len(users[total.name]) != 1:
        return None
    return Attention(axis, scores, tuple(modifiers), masked, maximum, shifted, e, total, probs, cast, out)


def online_softmax(graph: Graph, block: int, only: set[str] | None = None, lse: bool = False) -> Graph:
    """The graph with each matched attention (or those whose output is in `only`) in key blocks.

    With `lse`, each rewritten attention's log-sum-exp over the key axis, `{out}.lse`, is added to
    the graph's outputs (rows with no visible key get -inf)."""
    matches = {m.out.name: m for m in find_attention(graph) if only is None or m.out.name in only}
    if not matches:
        return graph
    skip = set().union(*(m.nodes for m in matches.values()))
    out = new_graph(graph)  # new nodes are type-checked as they are added; finish verifies the whole
    extra = []
    for n in graph.nodes:
        if n.name in matches:
            extra.append(_rewrite(out, graph, matches[n.name], block))
        elif n.name not in skip:
            out.append(clone(n))
    done = finish(graph, out, "online_softmax")
    if lse:
        done.set_outputs(*graph.outputs, *extra)
    return done


def _slice(g: Graph, source: Node, axis: str, start: int, stop: int, name: str) -> Node:
    if axis not in source.type.names:
        return source
    if name in g:
        return g[name]
    return g.add("slice", source, name=name, axis=axis, start=start, stop=stop)


def _rewrite(g: Graph, old: Graph, m: Attention, block: int) -> str:
    """Adds the blocked form of `m` to g; returns the name of its log-sum-exp node."""
    size = m.scores.type.size(m.axis)
    f32 = m.maximum.type.dtype
    neg_inf = g.add("const", name=f"{m.out.name}.neg_inf", type=TensorType.of(f32), value=-float("inf"))
    zero = g.add("const", name=f"{m.out.name}.zero", type=TensorType.of(f32), value=0.0)
    q_name, k_name = m.scores.operands
    v_name = m.out.operands[1]
    running = total = acc = None
    for j, lo in enumerate(range(0, size, block)):  # the last block takes what is left
        hi = min(lo + block, size)
        tag = f"{m.out.name}.blk{j}"
        k = _slice(g, g[k_name], m.axis, lo, hi, f"{k_name}.{m.axis}{lo}")
        v = _slice(g, g[v_name], m.axis, lo, hi, f"{v_name}.{m.axis}{lo}")
        s = g.add("einsum", g[q_name], k, name=f"{tag}.scores", eq=m.scores.attrs["eq"],
                  type=_resized(m.scores.type, m.axis, hi - lo))  # fmt: skip
        for mod in m.modifiers:
            side = g[mod.operands[1]]
            side = _slice(g, side, m.axis, lo, hi, f"{side.name}.{m.axis}{lo}")
            s = g.add(mod.kind, s, side, name=f"{tag}.{mod.name.rsplit('.', 1)[-1]}")
        if m.masked is not None:
            mask = g[m.masked.operands[0]]
            mask = _slice(g, mask, m.axis, lo, hi, f"{mask.name}.{m.axis}{lo}")
            s = g.add("where", mask, s, g[m.masked.operands[2]], name=f"{tag}.masked")
        block_max = g.add("reduce", s, name=f"{tag}.max", op="max", axes=[m.axis])
        new_max = block_max if running is None else g.add("max", running, block_max, name=f"{tag}.m")
        empty = g.add("eq", new_max, neg_inf, name=f"{tag}.empty")
        safe = g.add("where", empty, zero, new_max, name=f"{tag}.safe")
        p = g.add("exp", g.add("sub", s, safe, name=f"{tag}.shifted"), name=f"{tag}.p")
        block_sum = g.add("reduce", p, name=f"{tag}.sum", op="sum", axes=[m.axis])
        if m.cast is not None:
            p = g.add("cast", p, name=f"{tag}.p_cast", type=p.type.with_dtype(m.cast.type.dtype))
        part = g.add("einsum", p, v, name=f"{tag}.out", eq=m.out.attrs["eq"], type=m.out.type.with_dtype(f32))
        if running is None:
            total, acc = block_sum, part
        else:
            rescale = g.add("exp", g.add("sub", running, safe, name=f"{tag}.dm"), name=f"{tag}.alpha")
            total = g.add(
                "add", g.add("mul", total, rescale, name=f"{tag}.l_old"), block_sum, name=f"{tag}.l"
            )
            acc = g.add("add", g.add("mul", acc, rescale, name=f"{tag}.acc_old"), part, name=f"{tag}.acc")
        running = new_max
    result = g.add("div", acc, total, name=f"{m.out.name}.online" if m.out.type.dtype != f32 else m.out.name)
    if m.out.type.dtype != f32:
        g.add("cast", result, name=m.out.name, type=m.out.type)
    log_total = g.add("log", total, name=f"{m.out.name}.log_l")
    return g.add("add", safe, log_total, name=f"{m.out.name}.lse").name


def _resized(t: TensorType, axis: str, size: int) -> TensorType:
    return t.with_axes(Axis(a.name, size) if a.name == axis else a for a in t.axes)
