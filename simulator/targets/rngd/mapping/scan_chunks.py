"""Which form each selective scan of a prefill runs in: chunked (SSD: contractions on the
Contraction Engine, a short recurrence over chunks on the Vector Engine) when its decay allows it,
else step by step on the Vector Engine; and the chunk length.

The chunk length L trades two kinds of intermediates against each other: the decay mask and the
weighted C.B of every chunk grow as S x L (per position, one row of L), the states the chunks carry
as S / L x the state. L is the power of two that moves the fewest of those bytes among those whose
one chunk (its L x L mask and weights, and the state it carries) fits the DM budget of an
intermediate (residency.dm_budget / policy.scan_share), so a chunk's work stays on chip.

Chunking pays only past a few dozen steps (its contractions and the masks they need cost more than
a short recurrence), so the scan alone is scheduled and timed both ways and the faster form kept.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ir import F32, Graph, Node, TensorType
from ir.memo import per_graph
from simulator.engine import simulate as run_engine
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import dm_budget
from simulator.targets.rngd.mapping.schedule import schedule
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.passes.chunked_scan import SCANS, block_scans, chunk_scans, chunkable

F32_BYTES = F32.bits // 8  # the chunked form computes in float32 (tcp_compiler.passes.chunked_scan)

Chunks = dict[str, tuple[int, int]]  # scan or its state op -> (chunk length, block length)


def plan_scans(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY
) -> tuple[list[dict], Chunks]:
    """One note per scan (or delta_scan) longer than one step (its form and why), and the chunk
    length of each scan and state op to rewrite."""
    budget = dm_budget(hw, policy) // policy.scan_share
    notes, chunks = [], {}
    for node in graph.nodes:
        if node.kind not in SCANS:
            continue
        steps = graph[node.operands[0]].type.size(node.attrs["axis"])
        if steps == 1:
            continue  # a decode step: one step on the VE, nothing to chunk
        pair, largest, state = _sizes(graph, node)
        length, moved = _chunk(steps, pair, state, budget) if chunkable(graph, node) else (None, 0)
        block = _block(steps, length, largest, state, dm_budget(hw, policy)) if length else 0
        family = node.kind.removesuffix("_state")
        types = tuple(graph[o].type for o in node.operands)
        timed = _timed(family, types, node.attrs["axis"], length, block, hw, policy)
        if length is None or timed[1] >= timed[0]:
            if length is not None:
                why = f"step by step ({timed[0]:,} cycles) beats chunks of {length} ({timed[1]:,} cycles)"
            elif chunkable(graph, node):
                why = f"one chunk's state ({F32_BYTES * state:,} B) exceeds DM ({budget:,} B)"
            else:
                why = "no chunked form (chunked_scan.chunkable)"
            if node.kind == family:
                reason = f"{why}: {steps:,} steps on the VE"
                notes.append({"op": node.name, "role": graph.meta.role_of(node.name), "form": "sequential",
                              "reason": reason})  # fmt: skip
            continue
        chunks[node.name] = (length, block)
        if node.kind == family:
            blocks = f" in blocks of {block:,} positions (whose masks stay in DM)" if block < steps else ""
            notes.append({
                "op": node.name, "role": graph.meta.role_of(node.name), "form": "chunked", "block": length,
                "tiles": -(-steps // length),
                "reason": f"chunks of {length} positions move {moved:,} B of masks and states, the fewest of "
                          f"the chunk lengths whose one chunk fits DM ({budget:,} B){blocks}; {timed[1]:,} "
                          f"cycles against {timed[0]:,} step by step",
            })  # fmt: skip
    return notes, chunks


def _sizes(graph: Graph, node: Node) -> tuple[int, int, int]:
    """(elements per pair of positions of a chunk, of its largest tensor alone, elements a chunk
    carries). The selective scan: the decay mask, its weighted C.B and C.B per pair; the state.
    The delta rule: per pair and head the key products, the decay, A, its inverse and the power
    being squared, q.k and its decayed scores (7); the state and the transition over the key axis."""
    types = [graph[o].type for o in node.operands]
    h0, axis = types[-1], node.attrs["axis"]
    if node.kind.startswith("delta_scan"):
        q, k, v, g, beta, _ = types
        keys = [n for n in k.names if n not in v.names]
        per_head = math.prod(s for n, s in g.sizes.items() if n != axis)
        return 7 * per_head, per_head, h0.numel + per_head * math.prod(k.size(n) ** 2 for n in keys)
    x, dt, a, b, c, _ = types
    summed = {n for n in h0.names if n not in x.names}

    def per_position(*ts) -> int:
        sizes = {ax.name: ax.size for t in ts for ax in t.axes if ax.name not in {axis, *summed}}
        return math.prod(sizes.values())

    decay = per_position(dt, a, c, b)  # the mask and the weights span the heads and C.B's axes
    return 2 * decay + per_position(b, c), decay, h0.numel


def _block(steps: int, length: int, largest: int, state: int, budget: int) -> int:
    """The most positions (whole chunks, a power of two of them) whose largest per-pair tensor and
    carried states each fit the DM budget of one intermediate, so they stay in DM; `steps` when
    the whole sequence does."""
    block = length
    while block < steps and F32_BYTES * 2 * block * max(length * largest, state // length) <= budget:
        block *= 2
    return min(block, steps)


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


@lru_cache(maxsize=256)
def _timed(
    family: str,
    types: tuple[TensorType, ...],
    axis: str,
    length: int | None,
    block: int,
    hw: Hardware,
    policy: MappingPolicy,
) -> tuple[int, int]:
    """(cycles step by step, cycles in chunks of `length` and blocks of `block`; 0 without a
    length) of a scan (or delta_scan) and its state op over operands of `types`, scheduled alone
    (operands and results in HBM)."""
    if length is None:
        return 0, 0
    g = Graph(family)
    operands = [g.input(f"operand{i}", t) for i, t in enumerate(types)]
    g.add(family, *operands, name="y", axis=axis)
    g.add(f"{family}_state", *operands, name="h", axis=axis)
    g.set_outputs("y", "h")
    forms = (g, _apply(g, {"y": (length, block), "h": (length, block)}))
    rates = (hw.hbm.sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)
    return tuple(math.ceil(run_engine(schedule(f, hw, policy), *rates).end.max()) for f in forms)


def rewrite_scans(graph: Graph, chunks: Chunks) -> Graph:
    """The graph with the planned scans in chunked form, in blocks (those of `chunks` it has); kept
    per graph and plan (ir.memo), so specs that plan the same chunks share one rewritten graph."""
    return _rewritten(graph, tuple(sorted(chunks.items())))


@per_graph
def _rewritten(graph: Graph, plan: tuple[tuple[str, tuple[int, int]], ...]) -> Graph:
    return _apply(graph, {name: sizes for name, sizes in plan if name in graph})


def _apply(graph: Graph, plan: Chunks) -> Graph:
    """Blocks, then chunks, the planned scans."""
    if not plan:
        return graph
    blocked, origin = block_scans(graph, {name: block for name, (_, block) in plan.items()})
    lengths = {name: plan[source][0] for name, source in origin.items()}
    for name, (length, _) in plan.items():  # the scans shorter than their block, kept whole
        if name not in origin and name in blocked and blocked[name].kind in SCANS:
            lengths[name] = length
    return chunk_scans(blocked, lengths)
