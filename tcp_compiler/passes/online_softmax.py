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

The score modifiers between the einsum and the mask (a scale, ALiBi's bias, Gemma 2's soft cap ...)
are any chain of element-wise arithmetic with a side operand or float functions of the scores
alone; a side operand spanning the key axis is sliced per block.
The log-sum-exp per query row is what split-K decoding needs to merge partial results.

An attention sink (gpt-oss: a logit per head joined to the max and the sum, with no value) is one
more step after the last block: m' = max(m, sink), a = exp(m - m'), l = l * a + exp(sink - m'),
acc = acc * a (the lse then counts the sink too).

Interpreted, it equals the plain form to float rounding; the mapper uses it when a head's
scores do not fit on chip.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ir import Graph, Node, TensorType
from ir.errors import VerifyError
from ir.memo import per_graph
from ir.ops.elementwise import UNARY
from ir.types import Axis
from tcp_compiler.passes.mask_bounds import all_masked
from tcp_compiler.passes.simplify import clone, finish, new_graph, verified_once


@dataclass(frozen=True)
class Sink:
    """A sink logit joined to a softmax: max(key max, value), and exp(value - that) added to the sum."""

    value: Node  # the sink logits, without the key axis (gpt-oss: [Hkv, G])
    joined_max: Node
    shifted: Node
    exp: Node
    joined_sum: Node

    @property
    def nodes(self) -> set[str]:
        return {n.name for n in (self.joined_max, self.shifted, self.exp, self.joined_sum)}


@dataclass(frozen=True)
class Attention:
    """One matched attention: the nodes of its plain softmax and what they read."""

    axis: str
    scores: Node  # einsum(q, K)
    modifiers: tuple[Node, ...]  # element-wise steps on the scores (see _modifies), in order
    masked: Node | None  # where(mask, ., -inf)
    maximum: Node
    shifted: Node
    exp: Node
    total: Node
    probs: Node
    cast: Node | None
    out: Node  # einsum(probs, V)
    sink: Sink | None = None

    @property
    def nodes(self) -> set[str]:
        parts = (self.scores, *self.modifiers, self.masked, self.maximum, self.shifted, self.exp, self.total,
                 self.probs, self.cast, self.out)  # fmt: skip
        return {n.name for n in parts if n is not None} | (self.sink.nodes if self.sink else set())


@per_graph
def find_attention(graph: Graph) -> list[Attention]:
    """Every einsum over a softmax over a key axis, in the decomposed form the frontend builds
    (kept per graph, ir.memo)."""
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


def _match(graph: Graph, users, out: Node) -> Attention | None:
    if out.kind != "einsum" or len(out.operands) != 2:
        return None
    p = graph[out.operands[0]]
    cast = p if p.kind == "cast" else None
    probs = graph[p.operands[0]] if cast else p
    if probs.kind != "div":
        return None
    e, total = graph[probs.operands[0]], graph[probs.operands[1]]
    joined_sum = total if total.kind == "add" else None
    if joined_sum is not None:
        total = graph[joined_sum.operands[0]]
    if e.kind != "exp" or total.kind != "reduce" or total.attrs["op"] != "sum" or total.operands[0] != e.name:
        return None
    (axis,) = total.attrs["axes"] if len(total.attrs["axes"]) == 1 else (None,)
    shifted = graph[e.operands[0]]
    if axis is None or shifted.kind != "sub":
        return None
    x, maximum = graph[shifted.operands[0]], graph[shifted.operands[1]]
    sink = None
    if joined_sum is not None:
        sink = _sink(graph, users, joined_sum, maximum, axis)
        if sink is None:
            return None
        maximum = graph[maximum.operands[0]]
    if (
        maximum.kind != "reduce"
        or maximum.attrs != {"op": "max", "axes": (axis,)}
        or maximum.operands[0] != x.name
    ):
        return None
    masked = x if x.kind == "where" else None
    y = graph[x.operands[1]] if masked else x
    modifiers: list[Node] = []
    while _modifies(y) and (graph[y.operands[0]].kind == "einsum" or _modifies(graph[y.operands[0]])):
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
    parts = (maximum, shifted, e, total, probs, cast, out)
    return Attention(axis, scores, tuple(modifiers), masked, *parts, sink)


def _sink(graph: Graph, users, joined_sum: Node, joined_max: Node, axis: str) -> Sink | None:
    """The sink of sum + exp(value - max(key max, value)), the key max a reduce over `axis`, the
    value without that axis; None for any other form (the attention then stays plain)."""
    if joined_max.kind != "max" or len(joined_max.operands) != 2:
        return None
    value = graph[joined_max.operands[1]]
    sink_exp = graph[joined_sum.operands[1]]
    if sink_exp.kind != "exp" or axis in value.type.names:
        return None
    shifted = graph[sink_exp.operands[0]]
    if shifted.kind != "sub" or tuple(shifted.operands) != (value.name, joined_max.name):
        return None
    if graph[joined_max.operands[0]].kind != "reduce" or len(users[joined_max.name]) != 2:
        return None
    if any(len(users[n.name]) != 1 for n in (shifted, sink_exp, joined_sum)):
        return None
    return Sink(value, joined_max, shifted, sink_exp, joined_sum)


@dataclass(frozen=True)
class Names:
    """Names of the values one attention's rewrite makes, `{prefix}{suffix}`, each with what its
    role adds to the attention output's (a tile's or key block's index reads `*` there: every
    tile does the same work), for the graph's metadata."""

    prefix: str
    role: str = ""  # what the prefix adds to the output's role
    made: dict[str, str] = field(default_factory=dict)  # name -> its role's addition, shared by tiles

    def __call__(self, suffix: str) -> str:
        name = self.prefix + suffix
        self.made[name] = self.role + suffix
        return name

    def tile(self, index: str, role: str) -> Names:
        """The names of one tile (or key block): the prefix extended by `index`, read `role`."""
        return Names(self.prefix + index, self.role + role, self.made)


SCORE_ARITHMETIC = frozenset({"mul", "add", "sub", "div"})


def _modifies(node: Node) -> bool:
    """An element-wise step on the scores before the mask: arithmetic with a side operand (a scale,
    ALiBi's bias), or a float function of them alone (Gemma 2's tanh soft cap)."""
    if node.kind in SCORE_ARITHMETIC:
        return len(node.operands) == 2
    return node.kind in UNARY and len(node.operands) == 1 and "float" in UNARY[node.kind][1]


def online_softmax(
    graph: Graph,
    block: int,
    only: set[str] | None = None,
    lse: bool = False,
    rows: tuple[str, int] | None = None,
) -> Graph:
    """The graph with each matched attention (or those whose output is in `only`) in key blocks.

    With `rows` = (axis, size), the query axis is cut into tiles of `size` rows as well, each with
    its own running max, sum and accumulator over the key blocks (flash attention's loop order:
    query tiles outside, key blocks inside), so the accumulator too stays tile-sized; the tiles'
    results are joined along the axis. With `lse`, each rewritten attention's log-sum-exp over the
    key axis, `{out}.lse`, is added to the graph's outputs (rows with no visible key get -inf)."""
    matches = {m.out.name: m for m in find_attention(graph) if only is None or m.out.name in only}
    if not matches:
        return graph
    skip = set().union(*(m.nodes for m in matches.values()))
    skip |= _tiled_gathers(graph, matches.values(), skip)
    out = new_graph(graph)  # new nodes are type-checked as they are added; finish verifies the whole
    extra = []
    for n in graph.nodes:
        if n.name in matches:
            names = Names(n.name)
            extra.append(_rewrite(out, matches[n.name], block, rows, names, graph))
            out.meta.derive(names.made, n.name)
        elif n.name not in skip:
            out.append(clone(n))
    for name in matches:  # readers of each attention's output see the same type as before
        if out[name].type != graph[name].type:
            raise VerifyError(f"pass online_softmax changed %{name}: {graph[name].type} -> {out[name].type}")
    # Every new node was type-checked as it was added; the others are the verified input's nodes,
    # reading values whose types did not change: verifying the whole graph again would only repeat that.
    with verified_once():
        done = finish(graph, out, "online_softmax")
    if lse:
        done.set_outputs(*graph.outputs, *extra)
    return done


def _tiled_gathers(graph: Graph, matches: Iterable[Attention], inside: set[str]) -> set[str]:
    """Keys and values that are gathers read by the attention alone (sparse attention's picked
    rows): each block gathers its own rows (`_cut`), so the whole gather is left out."""
    read_by: dict[str, set[str]] = {}
    for n in graph.nodes:
        for o in n.operands:
            read_by.setdefault(o, set()).add(n.name)
    found = set()
    for m in matches:
        for name in (m.scores.operands[1], m.out.operands[1]):
            if (
                graph[name].kind == "gather"
                and read_by.get(name, set()) <= inside
                and name not in graph.outputs
            ):
                found.add(name)
    return found


def _cut(g: Graph, source: Node, spans: dict[str, tuple[int, int]]) -> Node:
    """source sliced to `spans` (axis -> [start, stop)) along the axes it has, once per span. A
    gather along axes its index gives is the gather of the index's slice: it reads only the span's
    rows (the whole gather need not be in g)."""
    spans = {a: s for a, s in spans.items() if a in source.type.names and s != (0, source.type.size(a))}
    if source.kind == "gather":
        picked = {a: s for a, s in spans.items() if _from_index(g, source, a)}
        if picked:
            name = source.name + "".join(f".{a}{lo}" for a, (lo, _) in picked.items())
            if name not in g:
                index = _cut(g, g[source.operands[1]], picked)
                g.add("gather", g[source.operands[0]], index, name=name, axis=source.attrs["axis"])
                g.meta.derive({name: "".join(f".{a}*" for a in picked)}, source.name)
            source = g[name]
            spans = {a: s for a, s in spans.items() if a not in picked}
    source = _kept(g, source)
    for axis, (start, stop) in spans.items():
        name = f"{source.name}.{axis}{start}"
        if name not in g:
            g.add("slice", source, name=name, axis=axis, start=start, stop=stop)
            # a slice of a shared value (a mask) stays shared; every slice of one plays one role
            g.meta.derive({name: f".{axis}*"}, source.name)
        source = g[name]
    return source


def _kept(g: Graph, node: Node) -> Node:
    """`node` in g: a whole gather left out (`_tiled_gathers`) is added after all where a block
    needs every row of it."""
    if node.name not in g:
        g.append(clone(node))
    return g[node.name]


def _from_index(g: Graph, gather: Node, axis: str) -> bool:
    """Whether a gather's `axis` comes from its index (not a batch axis the table has too)."""
    table, index = (g[o].type for o in gather.operands)
    return axis in index.names and axis not in table.names


def _rewrite(
    g: Graph, m: Attention, block: int, rows: tuple[str, int] | None, names: Names, source: Graph
) -> str:
    """Adds the blocked form of `m` (of graph `source`) to g, its values named by `names`; returns
    the name of its log-sum-exp node."""
    f32 = m.maximum.type.dtype
    consts = (
        g.add("const", name=names(".neg_inf"), type=TensorType.of(f32), value=-float("inf")),
        g.add("const", name=names(".zero"), type=TensorType.of(f32), value=0.0),
    )
    axis, size = (rows[0], m.out.type.size(rows[0])) if rows and rows[0] in m.out.type.names else (None, 0)
    if axis is None or rows[1] >= size:
        result, lse = _tile(g, m, block, {}, names, consts, source)
    else:
        tiles = [
            _tile(
                g,
                m,
                block,
                {axis: (lo, min(lo + rows[1], size))},
                names.tile(f".{axis}{lo}", f".{axis}*"),
                consts,
                source,
            )  # fmt: skip
            for lo in range(0, size, rows[1])
        ]
        result = g.add("concat", *(t[0] for t in tiles), name=names(".joined"), axis=axis)
        lse = g.add("concat", *(t[1] for t in tiles), name=names(".lse"), axis=axis)
    if m.out.type.dtype != f32:
        result = g.add("cast", result, name=m.out.name, type=m.out.type)
    elif result.name != m.out.name:
        result = g.add("reshape", result, name=m.out.name, type=m.out.type)
    return lse.name


def _tile(
    g: Graph, m: Attention, block: int, rows: dict[str, tuple[int, int]], tag: Names,
    consts: tuple[Node, Node], source: Graph,
) -> tuple[Node, Node]:  # fmt: skip
    """One query tile (`rows`, or every row) over all key blocks, its values named by `tag`:
    (its output in f32, its lse)."""
    neg_inf, zero = consts
    f32 = m.maximum.type.dtype
    size = m.scores.type.size(m.axis)
    q_name, k_name = m.scores.operands
    q = _cut(g, g[q_name], rows)
    running = total = acc = safe = None
    starts = range(0, size, block)  # the last block takes what is left
    if m.masked is not None:  # blocks the mask hides entirely add nothing: skip them, as kernels do
        mask_name = m.masked.operands[0]
        shown = [lo for lo in starts
                 if not all_masked(g, mask_name, {**rows, m.axis: (lo, min(lo + block, size))})]  # fmt: skip
        starts = shown or starts[:1]  # a tile no key reaches keeps one block: its rows stay as before
    for lo in starts:
        keys = {m.axis: (lo, min(lo + block, size))}
        spans = {**rows, **keys}
        blk = tag.tile(f".blk{lo // block}", ".blk*")
        # Every slice first, so the score einsum's pass can take the element-wise work after it.
        # Keys and values are cut to the tile's rows too where each query has its own (sparse
        # attention's picked keys, [.., Sq, Sk, ..]); shared keys have no query axis to cut.
        k, v = (
            _cut(g, g[name] if name in g else source[name], spans) for name in (k_name, m.out.operands[1])
        )
        sides = [[_cut(g, g[side], spans) for side in mod.operands[1:]] for mod in m.modifiers]
        mask = _cut(g, g[m.masked.operands[0]], spans) if m.masked is not None else None
        s = g.add("einsum", q, k, name=blk(".scores"), eq=m.scores.attrs["eq"],
                  type=_resized(m.scores.type, spans))  # fmt: skip
        for mod, side in zip(m.modifiers, sides, strict=True):
            s = g.add(mod.kind, s, *side, name=blk(f".{mod.name.rsplit('.', 1)[-1]}"))
        if mask is not None:
            s = g.add("where", mask, s, g[m.masked.operands[2]], name=blk(".masked"))
        block_max = g.add("reduce", s, name=blk(".max"), op="max", axes=[m.axis])
        new_max = block_max if running is None else g.add("max", running, block_max, name=blk(".m"))
        empty = g.add("eq", new_max, neg_inf, name=blk(".empty"))
        safe = g.add("where", empty, zero, new_max, name=blk(".safe"))
        p = g.add("exp", g.add("sub", s, safe, name=blk(".shifted")), name=blk(".p"))
        block_sum = g.add("reduce", p, name=blk(".sum"), op="sum", axes=[m.axis])
        if m.cast is not None:
            p = g.add("cast", p, name=blk(".p_cast"), type=p.type.with_dtype(m.cast.type.dtype))
        part = g.add("einsum", p, v, name=blk(".out"), eq=m.out.attrs["eq"],
                     type=_resized(m.out.type, rows).with_dtype(f32))  # fmt: skip
        if running is None:
            total, acc = block_sum, part
        else:
            rescale = g.add("exp", g.add("sub", running, safe, name=blk(".dm")), name=blk(".alpha"))
            total = g.add("add", g.add("mul", total, rescale, name=blk(".l_old")), block_sum, name=blk(".l"))
            acc = g.add("add", g.add("mul", acc, rescale, name=blk(".acc_old")), part, name=blk(".acc"))
        running = new_max
    if m.sink is not None:
        sink = _cut(g, g[m.sink.value.name], rows)
        joined = g.add("max", running, sink, name=tag(".m_sink"))  # finite, so no safe form
        rescale = g.add("exp", g.add("sub", running, joined, name=tag(".dm_sink")), name=tag(".alpha_sink"))
        sink_p = g.add("exp", g.add("sub", sink, joined, name=tag(".sink_shifted")), name=tag(".sink_p"))
        total = g.add("add", g.add("mul", total, rescale, name=tag(".l_keys")), sink_p, name=tag(".l_sink"))
        acc = g.add("mul", acc, rescale, name=tag(".acc_sink"))
        safe = joined
    final = tag("" if not rows and m.out.type.dtype == f32 else ".online")
    result = g.add("div", acc, total, name=final)
    lse = g.add("add", safe, g.add("log", total, name=tag(".log_l")), name=tag(".lse"))
    return result, lse


def _resized(t: TensorType, spans: dict[str, tuple[int, int]]) -> TensorType:
    return t.with_axes(
        Axis(a.name, spans[a.name][1] - spans[a.name][0]) if a.name in spans else a for a in t.axes
    )
