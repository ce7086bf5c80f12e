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
`scan_state` over the same operands share one chunked computation. The gated delta rule
(`delta_scan`) has its own chunked form (_chunked_delta: the WY form, a matrix recurrence between
chunks). Interpreted, each equals the sequential op to float rounding (tests/test_chunked_scan.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ir import Graph, Node, TensorType
from ir.dtypes import F32, I32
from ir.errors import VerifyError
from ir.types import Axis
from tcp_compiler.passes.simplify import clone, finish, new_graph, verified_once

SCANS = frozenset({"scan", "scan_state", "delta_scan", "delta_scan_state"})


def chunkable(graph: Graph, node: Node) -> bool:
    """Whether a scan has a chunked form here. The selective scan: when its decay dt*A is constant
    along the state axes its readout sums (those x lacks), so the decays factor out of the C.B
    contraction (SSD's condition), and A is fixed along the sequence. The delta rule: when k has
    one key axis."""
    if node.kind.startswith("delta_scan"):
        k, v = graph[node.operands[1]].type, graph[node.operands[2]].type
        return len([n for n in k.names if n not in v.names]) == 1
    x, dt, a = (graph[o].type for o in node.operands[:3])
    axis = node.attrs["axis"]
    if axis in a.names:  # a decay per step (RWKV-6's): the chunked form takes A per chunk whole
        return False
    return all(n in x.names for n in (*dt.names, *a.names) if n != axis)


def chunk_scans(graph: Graph, chunks: Mapping[str, int]) -> Graph:
    """The graph with each scan (or delta_scan) and its state op named in `chunks` (name -> chunk
    length) in chunked form; a scan and its state op over the same operands must be given the same
    length."""
    by_operands: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.kind in SCANS and node.name in chunks:
            if not chunkable(graph, node):
                raise VerifyError(f"pass chunked_scan: %{node.name} has no chunked form (see chunkable)")
            family = node.kind.removesuffix("_state")
            by_operands.setdefault((family, node.operands, node.attrs["axis"]), []).append(node)
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
                raise VerifyError(f"pass chunked_scan: %{node.name} and its state op got chunks {lengths}")
            rewrite = _chunked_delta if node.kind.startswith("delta_scan") else _chunked
            rewrite(out, nodes, lengths.pop())
        elif node.name not in replaced:
            out.append(clone(node))
    with verified_once():
        return finish(graph, out, "chunked_scan")


def block_scans(graph: Graph, blocks: Mapping[str, int]) -> tuple[Graph, dict[str, str]]:
    """The graph with each scan (or delta_scan) group named in `blocks` (name -> positions) longer
    than its block cut along its sequence into blocks, each a scan and its state op from the state
    the block before left (what chunked prefill does, and exact); so a chunked form's per-chunk
    tensors cover one block, not the whole sequence. Returns the graph and, for each block's op,
    the op it came from."""
    by_operands: dict[tuple, list[Node]] = {}
    for node in graph.nodes:
        if node.kind in SCANS and node.name in blocks:
            steps = graph[node.operands[0]].type.size(node.attrs["axis"])
            if steps > blocks[node.name]:
                family = node.kind.removesuffix("_state")
                by_operands.setdefault((family, node.operands, node.attrs["axis"]), []).append(node)
    origin: dict[str, str] = {}
    if not by_operands:
        return graph, origin
    groups = {nodes[0].name: nodes for nodes in by_operands.values()}
    replaced = {n.name for nodes in groups.values() for n in nodes}
    out = new_graph(graph)
    for node in graph.nodes:
        if node.name in groups:
            _blocked(out, groups[node.name], blocks[node.name], origin)
        elif node.name not in replaced:
            out.append(clone(node))
    with verified_once():
        return finish(graph, out, "block_scans"), origin


def _blocked(g: Graph, nodes: list[Node], block: int, origin: dict[str, str]) -> None:
    first = nodes[0]
    family, axis = first.kind.removesuffix("_state"), first.attrs["axis"]
    main = next((n for n in nodes if n.kind == family), None)
    final = next((n for n in nodes if n.kind != family), None)
    operands = [g[o] for o in first.operands]
    steps = operands[0].type.size(axis)
    count = -(-steps // block)
    state, made, ys = operands[-1], {}, []
    for i in range(count):
        lo, hi = i * block, min(steps, (i + 1) * block)
        part = []
        for j, o in enumerate(operands[:-1]):
            if axis in o.type.names:
                o = g.add("slice", o, name=f"{first.name}.b{i}.in{j}", axis=axis, start=lo, stop=hi)
                made[o.name] = f".b*.in{j}"
            part.append(o)
        part.append(state)
        name = f"{first.name}.b{i}"
        if main is not None:
            shape = main.type.with_axes(Axis(axis, hi - lo) if a.name == axis else a for a in main.type.axes)
            ys.append(g.add(family, *part, name=name, type=shape, axis=axis))
            made[name], origin[name] = ".b*", main.name
        if i < count - 1 or final is not None:
            last = i == count - 1 and final is not None
            state_name = final.name if last else f"{name}.state"
            state_type = final.type if last else operands[-1].type.with_dtype(F32)
            state = g.add(f"{family}_state", *part, name=state_name, type=state_type, axis=axis)
            origin[state_name] = final.name if final is not None else main.name
            if not last:
                made[state_name] = ".b*.state"
    if main is not None:
        g.add("concat", *ys, name=main.name, axis=axis)
    g.meta.derive(made, first.name)


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


class _Chunks:
    """What one chunked rewrite shares: the builder, the sequence axis cut into `count` chunks of
    `length` positions (chunk axis sc; a position as the row l or the column m of a chunk's pairs),
    and the steps every chunked form takes."""

    def __init__(self, g: Graph, first: Node, length: int) -> None:
        self.g, self.add, self.length = g, _Builder(g, first.name), length
        self.axis = first.attrs["axis"]
        operands = [g[o] for o in first.operands]
        self.steps = max(o.type.size(self.axis) for o in operands if self.axis in o.type.names)
        self.count = -(-self.steps // length)
        self.pad = self.count * length - self.steps
        taken = {n for o in operands for n in o.type.names}
        self.sc, self.sl, self.sm, self.sn, self.col = (
            _fresh(taken, self.axis + tag) for tag in ("c", "l", "m", "n", "t")
        )
        self.minus_inf = self.add("const", suffix="ninf", type=TensorType.of(F32), value=-float("inf"))
        self.one = self.add("const", suffix="one", type=TensorType.of(F32), value=1.0)
        self.zero = self.add("const", suffix="zero", type=TensorType.of(F32), value=0.0)

    def f32(self, node: Node, suffix: str) -> Node:
        if node.type.dtype == F32:
            return node
        return self.add("cast", node, suffix=f"{suffix}.f32", type=node.type.with_dtype(F32))

    def split(self, node: Node, inner: str, suffix: str) -> Node:
        """node (float32) with the sequence zero-padded to count x length and cut into (sc, inner)."""
        node = self.f32(node, suffix)
        if self.pad:
            axes = (Axis(n.name, self.pad) if n.name == self.axis else n for n in node.type.axes)
            zeros = self.add("const", suffix=f"{suffix}.pad", type=node.type.with_axes(axes), value=0.0)
            node = self.add("concat", node, zeros, suffix=f"{suffix}.padded", axis=self.axis)
        return self.add(
            "reshape", node, suffix=suffix, type=node.type.with_axes(self.cut(node.type.axes, inner))
        )

    def cut(self, axes, inner: str) -> list[Axis]:
        out = []
        for ax in axes:
            out += [Axis(self.sc, self.count), Axis(inner, self.length)] if ax.name == self.axis else [ax]
        return out

    def names(self, t: TensorType, inner: str) -> list[str]:
        """t's axis names with the sequence cut into (sc, inner)."""
        return [a.name for a in self.cut(t.axes, inner)]

    def rename(self, node: Node, renames: Mapping[str, str], suffix: str) -> Node:
        t = node.type.with_axes(Axis(renames.get(ax.name, ax.name), ax.size) for ax in node.type.axes)
        return self.add("reshape", node, suffix=suffix, type=t)

    def einsum(self, a: Node, b: Node, out: list[str], suffix: str) -> Node:
        return _einsum(self.add, a, b, out, suffix)

    def cumsum(self, rate_m: Node) -> tuple[Node, Node]:
        """(over column positions, over row positions) the running sum of rate within each chunk: a
        recurrence along the chunk's positions."""
        per_chunk = rate_m.type.with_axes(ax for ax in rate_m.type.axes if ax.name != self.sm)
        start_at = self.add("const", suffix="cum0", type=per_chunk, value=0.0)
        cum_m = self.add("recurrence", self.one, rate_m, start_at, suffix="cum_m", axis=self.sm)
        return cum_m, self.rename(cum_m, {self.sm: self.sl}, "cum")

    def last(self, cum_l: Node) -> Node:
        """cum at each chunk's last position (without the row axis)."""
        end = self.add(
            "slice", cum_l, suffix="cum_last1", axis=self.sl, start=self.length - 1, stop=self.length
        )
        axes = (ax for ax in end.type.axes if ax.name != self.sl)
        return self.add("reshape", end, suffix="cum_last", type=end.type.with_axes(axes))

    def pairs(self, compare: str, suffix: str) -> Node:
        """bool[sm, sl]: column position `compare` row position (le: causal; lt: strictly)."""
        pair = TensorType.of(I32, **{self.sm: self.length, self.sl: self.length})
        positions = (
            self.add("iota", suffix=f"{suffix}.m", type=pair, axis=self.sm),
            self.add("iota", suffix=f"{suffix}.l", type=pair, axis=self.sl),
        )
        return self.add(compare, *positions, suffix=suffix)

    def decay(self, cum_l: Node, cum_m: Node, mask: Node, suffix: str) -> Node:
        """exp(cum[l] - cum[m]) where the mask holds, else 0 (the segment-sum decay)."""
        seg = self.add("sub", cum_l, cum_m, suffix=f"{suffix}.log")
        return self.add(
            "exp", self.add("where", mask, seg, self.minus_inf, suffix=f"{suffix}.masked"), suffix=suffix
        )

    def states(self, transition: Node, update: Node, h0: Node, mix: list[str] | None) -> tuple[Node, Node]:
        """(the state after each chunk, the state entering each chunk) from the recurrence over chunks."""
        attrs = {"mix": mix} if mix else {}
        states = self.add("recurrence", transition, update, h0, suffix="states", axis=self.sc, **attrs)
        start = self.add(
            "reshape", h0, suffix="h0c", type=h0.type.with_axes([Axis(self.sc, 1), *h0.type.axes])
        )
        if self.count == 1:
            return states, start
        before = self.add("slice", states, suffix="states_before", axis=self.sc, start=0, stop=self.count - 1)
        return states, self.add("concat", start, before, suffix="entering", axis=self.sc)

    def finish(self, nodes: list[Node], y_chunks: Node, states: Node, h0: Node, first: Node) -> None:
        """The replaced nodes, under their names: the output joined and unpadded, or the final state."""
        add = self.add
        for node in nodes:
            if node.kind.endswith("_state"):
                final = add(
                    "slice", states, suffix="final", axis=self.sc, start=self.count - 1, stop=self.count
                )
                value = add("reshape", final, suffix="final_state", type=h0.type)
            else:
                joined = [
                    Axis(self.axis, self.count * self.length) if ax.name == self.sc else ax
                    for ax in y_chunks.type.axes
                ]
                whole = y_chunks.type.with_axes(ax for ax in joined if ax.name != self.sl)
                value = add("reshape", y_chunks, suffix="y_padded", type=whole)
                if self.pad:
                    value = add("slice", value, suffix="y", axis=self.axis, start=0, stop=self.steps)
            result = node.type
            if value.type.dtype != result.dtype:
                value = add("cast", value, suffix=f"{node.kind}.out", type=result)
            # the replaced node keeps its name (a view of the last step): readers see the same value
            self.g.append(Node(node.name, "reshape", (value.name,), {}, result))
        self.g.meta.derive(add.made, first.name)


def _chunked(g: Graph, nodes: list[Node], length: int) -> None:
    """Adds the chunked form of one scan group (the scan and/or scan_state over shared operands)."""
    first = nodes[0]
    ch = _Chunks(g, first, length)
    add, sc, sl, sm = ch.add, ch.sc, ch.sl, ch.sm
    x, dt, a, b, c, h0 = (g[o] for o in first.operands)
    summed = [n for n in h0.type.names if n not in x.type.names]
    a, h0 = ch.f32(a, "A"), ch.f32(h0, "h0")
    x_m, dt_m, b_m, c_l = (
        ch.split(x, sm, "x"),
        ch.split(dt, sm, "dt"),
        ch.split(b, sm, "B"),
        ch.split(c, sl, "C"),
    )
    x_l_names = ch.names(x.type, sl)

    # the running sum of dt*A within each chunk, the segment-sum decay mask, C.B, the diagonal blocks
    cum_m, cum_l = ch.cumsum(add("mul", dt_m, a, suffix="rate"))
    decay = ch.decay(cum_l, cum_m, ch.pairs("le", "causal"), "decay")
    cb = ch.einsum(c_l, b_m, _ordered(c_l.type.names, b_m.type.names, drop=summed), "cb")
    weights = add("mul", add("mul", cb, decay, suffix="cbd"), dt_m, suffix="w")
    y_diag = ch.einsum(weights, x_m, x_l_names, "y_diag")

    # each chunk's state contribution, the recurrence over chunks, and the states' readout
    cum_last = ch.last(cum_l)
    to_end = add("exp", add("sub", cum_last, cum_m, suffix="to_end_log"), suffix="to_end")
    scaled = add("mul", x_m, add("mul", to_end, dt_m, suffix="to_end_dt"), suffix="x_to_end")
    u = ch.einsum(b_m, scaled, [sc, *h0.type.names], "u")
    states, entering = ch.states(add("exp", cum_last, suffix="carry"), u, h0, None)
    read = ch.einsum(c_l, entering, x_l_names, "y_state")
    y_off = add("mul", read, add("exp", cum_l, suffix="from_start"), suffix="y_off")
    ch.finish(nodes, add("add", y_diag, y_off, suffix="y_chunks"), states, h0, first)


def _chunked_delta(g: Graph, nodes: list[Node], length: int) -> None:
    """Adds the chunked gated delta rule (the WY form): within a chunk, with G the running sum of the
    log decays g, A[l, m] = beta_l exp(G_l - G_m) k_l.k_m for m < l and T = (I + A)^-1,

        W = T (beta v),  Kc = T (beta exp(G) k)         (the chunk's values and keys, decorrelated)
        U = W - Kc S                                    (the new values, S the state entering)
        y = exp(G_l) q_l.S + sum_(m <= l) exp(G_l - G_m) (q_l.k_m) U_m
        S' = (exp(G_L) I - Kt^T Kc) S + Kt^T W,  Kt_m = exp(G_L - G_m) k_m

    T is a product of log2(L) factors (I + A^(2^i)) (A is nilpotent: A^L = 0), all contractions;
    S' is a recurrence over chunks with a matrix transition over the key axis."""
    first = nodes[0]
    ch = _Chunks(g, first, length)
    add, sc, sl, sm, sn, col = ch.add, ch.sc, ch.sl, ch.sm, ch.sn, ch.col
    q, k, v, gate, beta, h0 = (g[o] for o in first.operands)
    (key,) = [n for n in k.type.names if n not in v.type.names]
    h0 = ch.f32(h0, "h0")
    q_l, k_l, k_m = ch.split(q, sl, "q"), ch.split(k, sl, "k"), ch.split(k, sm, "k_m")
    v_m, g_m, beta_m = ch.split(v, sm, "v"), ch.split(gate, sm, "g"), ch.split(beta, sm, "beta")
    beta_l = ch.rename(beta_m, {sm: sl}, "beta_l")
    v_l_names, k_l_names = ch.names(v.type, sl), ch.names(k.type, sl)
    cum_m, cum_l = ch.cumsum(g_m)

    # A (strictly lower) and T = (I + A)^-1 = (I - A)(I + A^2)(I + A^4)...
    kk = ch.einsum(k_l, k_m, _ordered(k_l.type.names, k_m.type.names, drop=[key]), "kk")
    strict = ch.pairs("lt", "strict")
    a_mat = add(
        "mul", add("mul", kk, ch.decay(cum_l, cum_m, strict, "a_decay"), suffix="a_kk"), beta_l, suffix="A"
    )
    pair_names = list(a_mat.type.names)

    def matmul(x: Node, y: Node, suffix: str) -> Node:
        """x . y over the chunk's pairs: sum_n x[l, n] y[n, m]."""
        xr, yr = ch.rename(x, {sm: sn}, f"{suffix}.x"), ch.rename(y, {sl: sn}, f"{suffix}.y")
        return ch.einsum(xr, yr, pair_names, suffix)

    eye = add("where", ch.pairs("eq", "diag"), ch.one, ch.zero, suffix="eye")
    inverse = add("sub", eye, a_mat, suffix="T0")
    power, i = a_mat, 1
    while (1 << i) < length:
        power = matmul(power, power, f"A{1 << i}")
        inverse = add("add", inverse, matmul(inverse, power, f"T{i}.p"), suffix=f"T{i}")
        i += 1
    t_mat = inverse

    # the decorrelated values and keys, the transition and update of each chunk's state
    w = ch.einsum(t_mat, add("mul", v_m, beta_m, suffix="v_beta"), v_l_names, "W")
    k_scaled = add(
        "mul", k_m, add("mul", beta_m, add("exp", cum_m, suffix="g_exp"), suffix="bg"), suffix="k_bg"
    )
    kc = ch.einsum(t_mat, k_scaled, k_l_names, "Kc")
    cum_last = ch.last(cum_l)
    k_end = add("mul", k_m, add("exp", add("sub", cum_last, cum_m, suffix="to_end_log"), suffix="to_end"),
                suffix="k_end")  # fmt: skip
    w_m = ch.rename(w, {sl: sm}, "W_m")
    update = ch.einsum(k_end, w_m, [sc, *h0.type.names], "update")
    kc_m = ch.rename(kc, {sl: sm, key: col}, "Kc_m")
    value_only = [n for n in v.type.names if n not in k.type.names]
    mixed = ch.einsum(k_end, kc_m, _ordered([sc], h0.type.names, [col], drop=value_only), "KtKc")
    square = TensorType.of(I32, **{key: k.type.size(key), col: k.type.size(key)})
    rows, cols = (
        add("iota", suffix="ik", type=square, axis=key),
        add("iota", suffix="ic", type=square, axis=col),
    )
    key_eye = add("where", add("eq", rows, cols, suffix="key_diag"), ch.one, ch.zero, suffix="key_eye")
    carry = add("mul", add("exp", cum_last, suffix="carry"), key_eye, suffix="carry_eye")
    transition = add("sub", carry, mixed, suffix="transition")
    states, entering = ch.states(transition, update, h0, [key, col])

    # the new values, and the output: the entering state's readout and the chunk's own attention
    new = add("sub", w, ch.einsum(kc, entering, v_l_names, "KcS"), suffix="U")
    inter = add("mul", ch.einsum(q_l, entering, v_l_names, "qS"), add("exp", cum_l, suffix="from_start"),
                suffix="y_state")  # fmt: skip
    qk = ch.einsum(q_l, k_m, _ordered(q_l.type.names, k_m.type.names, drop=[key]), "qk")
    scores = add("mul", qk, ch.decay(cum_l, cum_m, ch.pairs("le", "causal"), "decay"), suffix="qk_decay")
    intra = ch.einsum(scores, ch.rename(new, {sl: sm}, "U_m"), v_l_names, "y_chunk")
    ch.finish(nodes, add("add", inter, intra, suffix="y_chunks"), states, h0, first)
