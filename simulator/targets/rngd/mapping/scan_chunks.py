"""Which form each selective scan of a prefill runs in: chunked (SSD: contractions on the
Contraction Engine, a short recurrence over chunks on the Vector Engine) when its decay allows it,
else step by step on the Vector Engine; and the chunk length.

The chunk length L trades two kinds of intermediates against each other: the decay mask and the
weighted C.B of every chunk grow as S x L (per position, one row of L), the states the chunks carry
as S / L x the state. L is the power of two that moves the fewest of those bytes among those whose
one chunk (its L x L mask and weights, and the state it carries) fits the DM budget of an
intermediate (residency.dm_budget / policy.scan_share), so a chunk's work stays on chip.
"""

from __future__ import annotations

import math

from ir import Graph, Node
from ir.memo import per_graph
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import dm_budget
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.passes.chunked_scan import SCANS, chunk_scans, chunkable

F32_BYTES = 4  # the chunked form computes in float32 (tcp_compiler.passes.chunked_scan)

Chunks = dict[str, int]  # scan or scan_state -> chunk length


def plan_scans(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY
) -> tuple[list[dict], Chunks]:
    """One note per scan longer than one step (its form and why), and the chunk length of each scan
    and scan_state to rewrite."""
    budget = dm_budget(hw, policy) // policy.scan_share
    notes, chunks = [], {}
    for node in graph.nodes:
        if node.kind not in SCANS:
            continue
        steps = graph[node.operands[0]].type.size(node.attrs["axis"])
        if steps == 1:
            continue  # a decode step: one step on the VE, nothing to chunk
        pair, state = _sizes(graph, node)
        length, moved = _chunk(steps, pair, state, budget) if chunkable(graph, node) else (None, 0)
        if length is None:
            why = (
                f"one chunk's state ({F32_BYTES * state:,} B) exceeds DM ({budget:,} B)"
                if chunkable(graph, node)
                else "its decay varies along the state axes the readout sums (no SSD form)"
            )
            if node.kind == "scan":
                reason = f"{why}: {steps:,} steps on the VE"
                notes.append({"op": node.name, "role": graph.meta.role_of(node.name), "form": "sequential",
                              "reason": reason})  # fmt: skip
            continue
        chunks[node.name] = length
        if node.kind == "scan":
            notes.append({
                "op": node.name, "role": graph.meta.role_of(node.name), "form": "chunked", "block": length,
                "tiles": -(-steps // length),
                "reason": f"chunks of {length} positions move {moved:,} B of masks and states, the fewest of "
                          f"the chunk lengths whose one chunk fits DM ({budget:,} B)",
            })  # fmt: skip
    return notes, chunks


def _sizes(graph: Graph, node: Node) -> tuple[int, int]:
    """(elements per pair of positions of a chunk: the decay mask, its weighted C.B and C.B;
    elements of the state)."""
    x, dt, a, b, c, h0 = (graph[o].type for o in node.operands)
    axis = node.attrs["axis"]
    summed = {n for n in h0.names if n not in x.names}

    def per_position(*types) -> int:
        sizes = {ax.name: ax.size for t in types for ax in t.axes if ax.name not in {axis, *summed}}
        return math.prod(sizes.values())

    decay = per_position(dt, a, c, b)  # the mask and the weights span the heads and C.B's axes
    return 2 * decay + per_position(b, c), h0.numel


def _chunk(steps: int, pair: int, state: int, budget: int) -> tuple[int | None, int]:
    """(chunk length, bytes of masks and states it moves), or (None, 0) when no chunk fits."""
    best, best_moved = None, 0
    length = 1
    while True:
        chunks = -(-steps // length)
        one = F32_BYTES * (length * length * pair + state)
        if one <= budget:
            # the masks and weights over all chunks, and the states: each chunk's contribution,
            # the states after the recurrence and the states entering each chunk
            moved = F32_BYTES * (chunks * length * length * pair + 3 * chunks * state)
            if best is None or moved <= best_moved:
                best, best_moved = length, moved
        if length >= steps:
            return best, best_moved
        length *= 2


def rewrite_scans(graph: Graph, chunks: Chunks) -> Graph:
    """The graph with the planned scans in chunked form (those of `chunks` it has); kept per graph
    and plan (ir.memo), so specs that plan the same chunks share one rewritten graph."""
    return _rewritten(graph, tuple(sorted(chunks.items())))


@per_graph
def _rewritten(graph: Graph, chunks: tuple[tuple[str, int], ...]) -> Graph:
    present = {name: length for name, length in chunks if name in graph}
    return chunk_scans(graph, present) if present else graph
