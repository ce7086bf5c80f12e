"""Fusion: consecutive IR ops that stream through one Tensor Unit pass become one FusedOp.

The pipeline order is Fetch -> Switch -> Collect -> Contraction -> Vector -> Cast -> Transpose ->
Commit, so a pass may hold one einsum (Contraction), then element-wise work and reductions
(Vector), casts (Cast) and a transpose, in that order. A reduction ends its pass: whatever needs
its result reads it in the next one. Values that stay inside a pass never touch memory; only a
pass's inputs and outputs move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ir import Graph, Node
from ir.memo import per_graph
from simulator.targets.rngd.mapping.traits import CONTRACTION_STAGE, STAGES, traits


@dataclass
class FusedOp:
    """One unit of scheduled work: a Tensor Unit pass, a DMA move or a collective."""

    index: int
    kind: str  # "pass", "dma", "collective"
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # values read from memory
    outputs: list[str] = field(default_factory=list)  # values written to memory
    prologue: list[Node] = field(default_factory=list)  # weight transforms done as the pass fetches
    stage: int = 0  # the furthest pipeline stage used so far
    open: bool = True  # False once a reduction ended the pass
    layer: int = -1  # the decoder layer of the op's anchor (graph.meta), -1 for none
    role: str = ""  # the role of the op's anchor in its layer (graph.meta)

    @property
    def name(self) -> str:
        anchor = self.contraction or self.nodes[0]
        return anchor.name

    @property
    def contraction(self) -> Node | None:
        return next((n for n in self.nodes if traits(n.kind).stage == CONTRACTION_STAGE), None)


@per_graph
def fuse(graph: Graph) -> list[FusedOp]:
    """Groups the graph's ops into FusedOps in topological order.

    An op joins the pass that computed its latest operand when that pass is still open (no
    reduction yet), the op's stage does not go back up the pipeline, and it is not a second
    einsum; otherwise it starts a pass of its own. Kept per graph (ir.memo): do not mutate the ops.
    """
    aliases = view_roots(graph)
    fly = on_the_fly(graph, aliases)
    ops: list[FusedOp] = []
    owner: dict[str, FusedOp] = {}  # value root -> the op that computes it
    recurrences: dict[tuple, FusedOp] = {}  # a recurrence's operands and attributes -> its pass
    for node in graph.nodes:
        t = traits(node.kind)
        if node.name in aliases and aliases[node.name] != node.name or t.work == "free" or node.name in fly:
            continue
        if t.step_chain:
            # a scan and its scan_state over the same operands are one kernel: the final state
            # comes out of the pass that runs the recurrence, not a second run of it
            twin = recurrences.get(_recurrence_key(node))
            if twin is not None:
                twin.nodes.append(node)
                owner[node.name] = twin
                continue
        producers = [owner[aliases[o]] for o in node.operands if aliases[o] in owner]
        if t.work != "pass":
            op = FusedOp(len(ops), t.work, [node])
            ops.append(op)
        else:
            stage = STAGES.index(t.stage)
            latest = max(producers, key=lambda p: p.index, default=None)
            # a recurrence is a kernel of its own (its state stays on chip while the sequence streams)
            joins = latest is not None and _can_join(latest, node, stage) and not t.step_chain
            op = latest if joins else None
            if op is None and t.stage == "cast" and latest is not None and _fetch_converts(graph, node):
                # Its operand is written to memory by a finished pass: readers convert it as they
                # fetch it (Fetch Adapter) instead of a pass of its own reading and rewriting it.
                aliases[node.name] = aliases[node.operands[0]]
                continue
            if op is None:
                op = FusedOp(len(ops), "pass", [])
                ops.append(op)
            op.nodes.append(node)
            op.stage = stage
            op.open = not t.ends_pass
            if t.step_chain:
                recurrences[_recurrence_key(node)] = op
        owner[node.name] = op
    _wire(graph, ops, owner, aliases, fly)
    for op in ops:
        op.layer, op.role = graph.meta.layer_of(op.name), graph.meta.role_of(op.name)
    return ops


def _recurrence_key(node: Node) -> tuple:
    """What a recurrence (scan, delta_scan) and its final-state twin share."""
    return node.kind.removesuffix("_state"), node.operands, tuple(sorted(node.attrs.items()))


# Conversions the Fetch Adapter does as a pass reads its operands (tcp-hardware.md, Fetch Adapter).
FETCH_CASTS = {(f, t) for f in ("fp8e4m3", "fp8e5m2") for t in ("bf16", "f32")} | {
    ("bf16", "f32"),
    ("f32", "bf16"),
}


def _fetch_converts(graph: Graph, cast: Node) -> bool:
    return (graph[cast.operands[0]].type.dtype.name, cast.type.dtype.name) in FETCH_CASTS


def on_the_fly(graph: Graph, aliases: dict[str, str]) -> dict[str, tuple[tuple[str, ...], tuple[Node, ...]]]:
    """Element-wise transforms of weights alone (dequantise codes x scales, Gemma's 1 + w, casts):
    value -> (the params it reads, the transform's nodes). They are computed as the consuming pass
    fetches its weights, so the transformed weights never exist in DM or HBM."""
    fly: dict[str, tuple[tuple[str, ...], tuple[Node, ...]]] = {}
    for n in graph.nodes:
        if not (traits(n.kind).elementwise or traits(n.kind).view or is_lookup(graph, n)):
            continue
        params: list[str] = []
        chain: list[Node] = []
        for o in n.operands:
            r = aliases[o]
            source = traits(graph[r].kind)
            if source.weight or source.immediate:
                params += [r] if source.weight else []
            elif r in fly:
                params += fly[r][0]
                chain += fly[r][1]
            else:
                break
        else:
            if params:
                own = () if traits(n.kind).view or aliases[n.name] != n.name else (n,)
                nodes = {c.name: c for c in [*chain, *own]}  # Nodes are not hashable; dedupe by name
                fly[n.name] = (tuple(dict.fromkeys(params)), tuple(nodes.values()))
    return fly


def is_lookup(graph: Graph, node: Node) -> bool:
    """A gather from a constant table (MXFP4's fp4 -> fp8 codes) or by a constant index (each
    element's block scale of a weight with partial edge blocks, picked by its position): the
    Fetch Adapter's lookup as the weight is fetched, not a TensorDMA move."""
    return node.kind == "gather" and any(traits(graph[o].kind).immediate for o in node.operands)


def _can_join(op: FusedOp, node: Node, stage: int) -> bool:
    return (
        op.kind == "pass"
        and op.open
        and stage >= op.stage
        and not (traits(node.kind).stage == CONTRACTION_STAGE and op.contraction is not None)
    )


def view_roots(graph: Graph) -> dict[str, str]:
    """Each value's root through free views: a reshape is the same bytes under new axes, a scalar
    const is an immediate, and a cast of a value in memory happens in the Fetch Adapter of the
    pass that reads it (bf16 -> f32, fp8 -> bf16, int4 -> int32)."""
    roots: dict[str, str] = {}
    memory = {n.name for n in graph.nodes if traits(n.kind).in_memory}
    for n in graph.nodes:
        t = traits(n.kind)
        if t.view or (t.stage == "cast" and roots[n.operands[0]] in memory):
            roots[n.name] = roots[n.operands[0]]
        else:
            roots[n.name] = n.name
    return roots


def _wire(graph: Graph, ops: list[FusedOp], owner: dict[str, FusedOp], aliases: dict[str, str], fly) -> None:
    """Fills each op's memory inputs and outputs (values crossing its boundary). A transform of
    weights is charged to the first pass that reads it; later readers fetch and transform again,
    but its work is counted once, so the program carries exactly the graph's FLOPs."""
    used_outside: set[str] = {aliases[o] for o in graph.outputs}
    charged: set[str] = set()
    for op in ops:
        inside = {n.name for n in op.nodes}
        for n in op.nodes:
            for o in n.operands:
                r = aliases[o]
                if r in fly:
                    params, chain = fly[r]
                    for p in params:
                        if p not in op.inputs:
                            op.inputs.append(p)
                    op.prologue += [c for c in chain if c.name not in charged]
                    charged.update(c.name for c in chain)
                elif r not in inside:
                    if r not in op.inputs:
                        op.inputs.append(r)
                    used_outside.add(r)
    for op in ops:
        op.outputs = [n.name for n in op.nodes if n.name in used_outside]
        if op.kind != "pass":
            op.outputs = [n.name for n in op.nodes]
