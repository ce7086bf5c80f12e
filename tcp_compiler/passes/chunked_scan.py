"""The chunked form of the selective scan (Mamba-2's SSD): contractions within chunks plus a short
recurrence between them, so the work lands on the Contraction Engine instead of S sequential
Vector Engine steps.

For a scan whose decay dt*A varies only along x's axes (a scalar per head in Mamba-2, not per state
element as in Mamba-1), the sequence S is cut into Sc chunks of L positions (zero padding at the
end: dt = 0 leaves the state untouched) and, with cum the running sum of dt*A within a chunk:

    cb[l, m]  = sum_N C[l] B[m]                                 (contraction)
    y_diag[l] = sum_m cb[l, m] exp(cum[l] - cum[m]) [m <= l] dt[m] x[m]    (contraction)
    u[c]      = sum_m exp(cum[L-1] - cum[m]) dt[m] x[m] B[m]     (the state a chunk adds; contraction)
    h[c]      = exp(cum[L-1]) h[c-1] + u[c]      from h0          (recurrence over the Sc chunks)
    y_off[l]  = exp(cum[l]) sum_N C[l] h[c-1]                     (contraction)
    y = y_diag + y_off,   the scan_state = h[last chunk]

The running sum is a recurrence along each chunk's positions (a cumsum). A `scan` and a
`scan_state` over the same operands share one chunked computation. Interpreted, the result equals
the sequential scan to float rounding (tests/test_chunked_scan.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ir import Graph, Node, TensorType
from ir.dtypes import F32, I32
from ir.errors import VerifyError
from ir.types import Axis
from tcp_compiler.passes.simplify import clone, finish, new_graph, verified_once

SCANS = frozenset({"scan", "scan_state"})


def chunkable(graph: Graph, node: Node) -> bool:
    """Whether a scan's decay dt*A is constant along the state axes its readout sums (those x lacks):
    only then do the decays factor out of the C.B contraction (SSD's condition)."""
    x, dt, a = (graph[o].type for o in node.operands[:3])
    axis = node.attrs["axis"]
    return all(n in x.names for n in (*dt.names, *a.names) if n != axis)


def chunk_scans(graph: Graph, chunks: Mapping[str, int]) -> Graph:
    """The graph with each scan / scan_state named in `chunks` (name -> chunk length) in chunked
    form; a scan and a scan_state over the same operands must be given the same length."""
    by_operands: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.kind in SCANS and node.name in chunks:
            if not chunkable(graph, node):
                raise VerifyError(
                    f"pass chunked_scan: %{node.name}'s decay varies along its summed state axes"
                )
            by_operands.setdefault((node.operands, node.attrs["axis"]), []).append(node)
    if not by_operands:
        return graph
    groups = {nodes[0].name: nodes for nodes in by_operands.values()}
    replaced = {n.name for nodes in groups.values() for n in nodes}
    out = new_graph(graph)
    for node in graph.nodes:
        if node.name in groups:
            nodes = groups[node.name]
            lengths = {chunks[n.name] for n in nodes}
            if len(lengths) != 1:
                raise VerifyError(f"pass chunked_scan: %{node.name} and its scan_state got chunks {lengths}")
            _chunked(out, graph, nodes, lengths.pop())
        elif node.name not in replaced:
            out.append(clone(node))
    with verified_once():
        return finish(graph, out, "chunked_scan")


class _Builder:
    """Adds one scan group's nodes to `g`, named `{prefix}.{suffix}`, recording them for the metadata."""

    def __init__(self, g: Graph, prefix: str) -> None:
        self.g, self.prefix, self.made = g, prefix, {}

    def __call__(self, kind: str, *operands: Node, suffix: str, type: TensorType | None = None, **attrs):
        name = f"{self.prefix}.{suffix}"
        self.made[name] = f".{suffix}"
        return self.g.add(kind, *operands, name=name, type=type, **attrs)


def _fresh(taken: Iterable[str], base: str) -> str:
    """An axis name starting with `base` that no operand uses."""
    taken = set(taken)
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}{i}"
    return name


def _ordered(*groups: Iterable[str], drop: Iterable[str] = ()) -> list[str]:
    """The names of `groups` in first-seen order, without `drop`."""
    gone = set(drop)
    return [n for n in dict.fromkeys(n for g in groups for n in g) if n not in gone]


def _einsum(add: _Builder, a: Node, b: Node, out: list[str], suffix: str) -> Node:
    eq = f"{' '.join(a.type.names)}, {' '.join(b.type.names)} -> {' '.join(out)}"
    return add("einsum", a, b, suffix=suffix, eq=eq)


def _chunked(g: Graph, src: Graph, nodes: list[Node], length: int) -> None:
    """Adds the chunked form of one scan group (the scan and/or scan_state over shared operands)."""
    first = nodes[0]
    add = _Builder(g, first.name)
    axis = first.attrs["axis"]
    x, dt, a, b, c, h0 = (g[o] for o in first.operands)
    steps = x.type.size(axis)
    count = -(-steps // length)
    pad = count * length - steps
    taken = {n for o in (x, dt, a, b, c, h0) for n in o.type.names}
    sc, sl, sm = (_fresh(taken, axis + tag) for tag in ("c", "l", "m"))
    summed = [n for n in h0.type.names if n not in x.type.names]

    def f32(node: Node, suffix: str) -> Node:
        return (
            node
            if node.type.dtype == F32
            else add("cast", node, suffix=suffix, type=node.type.with_dtype(F32))
        )

    def split(node: Node, inner: str, suffix: str) -> Node:
        """node with `axis` zero-padded to count x length and cut into (sc, inner)."""
        if pad:
            zeros = add(
                "const", suffix=f"{suffix}.pad",
                type=node.type.with_axes(Axis(n.name, pad) if n.name == axis else n for n in node.type.axes),
                value=0.0,
            )  # fmt: skip
            node = add("concat", node, zeros, suffix=f"{suffix}.padded", axis=axis)
        axes = []
        for ax in node.type.axes:
            axes += [Axis(sc, count), Axis(inner, length)] if ax.name == axis else [ax]
        return add("reshape", node, suffix=suffix, type=node.type.with_axes(axes))

    def rename(node: Node, old: str, new: str, suffix: str) -> Node:
        t = node.type.with_axes(Axis(new, ax.size) if ax.name == old else ax for ax in node.type.axes)
        return add("reshape", node, suffix=suffix, type=t)

    labels = ("x", "dt", "A", "B", "C", "h0")
    x, dt, a, b, c, h0 = (f32(o, f"{n}.f32") for o, n in zip((x, dt, a, b, c, h0), labels, strict=True))
    x_m, dt_m, b_m, c_l = split(x, sm, "x"), split(dt, sm, "dt"), split(b, sm, "B"), split(c, sl, "C")
    x_l_names = [n for ax in x.type.names for n in ((sc, sl) if ax == axis else (ax,))]

    # the running sum of dt*A within each chunk: a recurrence along the chunk's positions (a cumsum)
    rate_m = add("mul", dt_m, a, suffix="rate")
    one = add("const", suffix="one", type=TensorType.of(F32), value=1.0)
    per_chunk = rate_m.type.with_axes(ax for ax in rate_m.type.axes if ax.name != sm)
    start_at = add("const", suffix="cum0", type=per_chunk, value=0.0)
    cum_m = add("recurrence", one, rate_m, start_at, suffix="cum_m", axis=sm)
    cum_l = rename(cum_m, sm, sl, "cum")
    pair = TensorType.of(I32, **{sm: length, sl: length})
    positions = add("iota", suffix="im", type=pair, axis=sm), add("iota", suffix="il", type=pair, axis=sl)
    causal = add("le", *positions, suffix="causal")

    # within chunks: the segment-sum decay mask, C.B, and the diagonal blocks' output
    minus_inf = add("const", suffix="ninf", type=TensorType.of(F32), value=-float("inf"))
    seg = add("where", causal, add("sub", cum_l, cum_m, suffix="seg"), minus_inf, suffix="seg_masked")
    decay = add("exp", seg, suffix="decay")
    cb = _einsum(add, c_l, b_m, _ordered(c_l.type.names, b_m.type.names, drop=summed), "cb")
    weights = add("mul", add("mul", cb, decay, suffix="cbd"), dt_m, suffix="w")
    y_diag = _einsum(add, weights, x_m, x_l_names, "y_diag")

    # each chunk's state contribution, the recurrence over chunks, and the states' readout
    last = add("slice", cum_l, suffix="cum_last1", axis=sl, start=length - 1, stop=length)
    cum_last = add("reshape", last, suffix="cum_last",
                   type=last.type.with_axes(ax for ax in last.type.axes if ax.name != sl))  # fmt: skip
    to_end = add("exp", add("sub", cum_last, cum_m, suffix="to_end_log"), suffix="to_end")
    scaled = add("mul", x_m, add("mul", to_end, dt_m, suffix="to_end_dt"), suffix="x_to_end")
    state_axes = [sc, *h0.type.names]
    u = _einsum(add, b_m, scaled, state_axes, "u")
    carry = add("exp", cum_last, suffix="carry")
    states = add("recurrence", carry, u, h0, suffix="states", axis=sc)
    start = add("reshape", h0, suffix="h0c", type=h0.type.with_axes([Axis(sc, 1), *h0.type.axes]))
    if count == 1:
        entering = start
    else:
        before = add("slice", states, suffix="states_before", axis=sc, start=0, stop=count - 1)
        entering = add("concat", start, before, suffix="entering", axis=sc)
    read = _einsum(add, c_l, entering, x_l_names, "y_state")
    y_off = add("mul", read, add("exp", cum_l, suffix="from_start"), suffix="y_off")
    y_chunks = add("add", y_diag, y_off, suffix="y_chunks")

    for node in nodes:
        if node.kind == "scan":
            joined = [Axis(axis, count * length) if ax.name == sc else ax for ax in y_chunks.type.axes]
            whole = y_chunks.type.with_axes(ax for ax in joined if ax.name != sl)
            value = add("reshape", y_chunks, suffix="y_padded", type=whole)
            if pad:
                value = add("slice", value, suffix="y", axis=axis, start=0, stop=steps)
        else:
            final = add("slice", states, suffix="final", axis=sc, start=count - 1, stop=count)
            value = add("reshape", final, suffix="final_state", type=h0.type)
        result = node.type
        if value.type.dtype != result.dtype:
            value = add("cast", value, suffix=f"{node.kind}.out", type=result)
        # the replaced node keeps its name (a view of the last step): readers see the same value
        g.append(Node(node.name, "reshape", (value.name,), {}, result))
    g.meta.derive(add.made, first.name)
