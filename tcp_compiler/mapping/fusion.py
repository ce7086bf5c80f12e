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
from ir.ops.elementwise import BINARY, UNARY

STAGES = ("contraction", "vector", "cast", "transpose")
FREE = {"reshape", "input", "param", "const"}  # views, values in memory, immediates: no work
DMA = {"gather", "scatter", "concat", "slice"}  # TensorDMA moves
COLLECTIVE = {"all_reduce", "reduce_scatter", "all_gather"}


def stage_of(node: Node) -> str:
    if node.kind == "einsum":
        return "contraction"
    if node.kind == "cast":
        return "cast"
    if node.kind == "transpose":
        return "transpose"
    return "vector"


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

    @property
    def name(self) -> str:
        anchor = self.contraction or self.nodes[0]
        return anchor.name

    @property
    def contraction(self) -> Node | None:
        return next((n for n in self.nodes if n.kind == "einsum"), None)

    @property
    def layer(self) -> int:
        """The decoder layer the op belongs to (names l{i}.*), or -1."""
        head = self.name.split(".")[0]
        return int(head[1:]) if head.startswith("l") and head[1:].isdigit() else -1


def fuse(graph: Graph) -> list[FusedOp]:
    """Groups the graph's ops into FusedOps in topological order.

    An op joins the pass that computed its latest operand when that pass is still open (no
    reduction yet), the op's stage does not go back up the pipeline, and it is not a second
    einsum; otherwise it starts a pass of its own.
    """
    aliases = view_roots(graph)
    fly = on_the_fly(graph, aliases)
    ops: list[FusedOp] = []
    owner: dict[str, FusedOp] = {}  # value root -> the op that computes it
    for node in graph.nodes:
        if node.name in aliases and aliases[node.name] != node.name or node.kind in FREE or node.name in fly:
            continue
        producers = [owner[aliases[o]] for o in node.operands if aliases[o] in owner]
        if node.kind in DMA or node.kind in COLLECTIVE:
            op = FusedOp(len(ops), "dma" if node.kind in DMA else "collective", [node])
            ops.append(op)
        else:
            stage = STAGES.index(stage_of(node))
            latest = max(producers, key=lambda p: p.index, default=None)
            op = latest if latest is not None and _can_join(latest, node, stage) else None
            if op is None and node.kind == "cast" and latest is not None and _fetch_converts(graph, node):
                # Its operand is written to memory by a finished pass: readers convert it as they
                # fetch it (Fetch Adapter) instead of a pass of its own reading and rewriting it.
                aliases[node.name] = aliases[node.operands[0]]
                continue
            if op is None:
                op = FusedOp(len(ops), "pass", [])
                ops.append(op)
            op.nodes.append(node)
            op.stage = stage
            op.open = node.kind not in ("reduce", "topk")  # a reduction ends the pass
        owner[node.name] = op
    _wire(graph, ops, owner, aliases, fly)
    return ops


ELEMENTWISE = set(UNARY) | set(BINARY) | {"cast"}
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
        if n.kind not in ELEMENTWISE and n.kind != "reshape":
            continue
        params: list[str] = []
        chain: list[Node] = []
        for o in n.operands:
            r = aliases[o]
            if graph[r].kind in ("param", "const"):
                params += [r] if graph[r].kind == "param" else []
            elif r in fly:
                params += fly[r][0]
                chain += fly[r][1]
            else:
                break
        else:
            if params:
                own = () if n.kind == "reshape" or aliases[n.name] != n.name else (n,)
                nodes = {c.name: c for c in [*chain, *own]}  # Nodes are not hashable; dedupe by name
                fly[n.name] = (tuple(dict.fromkeys(params)), tuple(nodes.values()))
    return fly


def _can_join(op: FusedOp, node: Node, stage: int) -> bool:
    return (
        op.kind == "pass"
        and op.open
        and stage >= op.stage
        and not (node.kind == "einsum" and op.contraction is not None)
    )


def view_roots(graph: Graph) -> dict[str, str]:
    """Each value's root through free views: a reshape is the same bytes under new axes, a scalar
    const is an immediate, and a cast of a value in memory happens in the Fetch Adapter of the
    pass that reads it (bf16 -> f32, fp8 -> bf16, int4 -> int32)."""
    roots: dict[str, str] = {}
    memory = {n.name for n in graph.nodes if n.kind in ("input", "param")}
    for n in graph.nodes:
        if n.kind == "reshape" or (n.kind == "cast" and roots[n.operands[0]] in memory):
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
