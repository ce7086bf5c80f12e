"""Which attention form each layer uses: plain softmax when a layer's scores fit on chip, else the
online-softmax rewrite over tiles of queries x keys small enough that each tile's scores, and its
query rows' accumulator, do."""

from __future__ import annotations

from ir import Graph
from ir.memo import per_graph
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import dm_budget
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.passes.online_softmax import Attention, find_attention, online_softmax


def choose_attention(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY
) -> tuple[Graph, list[dict]]:
    """The graph with online softmax where the plain scores would spill, and one note per attention
    (the compile pipeline plans and rewrites in two steps, so an observer hears the plan between)."""
    notes, tiles = plan_attention(graph, hw, policy)
    return rewrite_attention(graph, tiles), notes


Tiling = dict[tuple[str, int, int], set[str]]  # (query axis or "", rows, block) -> attention outputs


def plan_attention(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY
) -> tuple[list[dict], Tiling]:
    """One note per attention (its form and why), and the attentions to rewrite grouped by tiling."""
    budget = dm_budget(hw, policy)  # scores above it would spill (simulator.targets.rngd.mapping.residency)
    notes, tiles = [], {}
    for m in find_attention(graph):
        scores = graph[m.maximum.operands[0]].type
        nbytes = scores.nbytes
        if nbytes <= budget:
            notes.append(
                {"op": m.out.name, "form": "plain", "reason": f"scores {nbytes:,} B fit DM ({budget:,} B)"}
            )
            continue
        rows_axis = _query_axis(graph, m)
        queries = scores.size(rows_axis) if rows_axis else 1
        keys = scores.size(m.axis)
        rows, block, held = _tile(
            nbytes // (queries * keys), 4 * m.out.type.numel // queries, queries, keys,
            budget // policy.attention_share,
        )  # fmt: skip
        tiles.setdefault((rows_axis or "", rows, block), set()).add(m.out.name)
        notes.append({
            "op": m.out.name, "form": "online", "block": block, "rows": rows,
            "tiles": -(-queries // rows) * -(-keys // block),
            "reason": f"scores {nbytes:,} B exceed DM ({budget:,} B); tiles of {rows} queries x {block} keys "
                      f"hold {held:,} B",
        })  # fmt: skip
    return notes, tiles


def rewrite_attention(graph: Graph, tiles: Tiling) -> Graph:
    """The graph with the planned attentions in online-softmax tiles (those of `tiles` it has);
    kept per graph and tiling (ir.memo), so specs that plan the same tiles share one rewritten
    graph and what is kept on it (do not mutate it)."""
    return _rewritten(graph, tuple(sorted((key, tuple(sorted(names))) for key, names in tiles.items())))


@per_graph
def _rewritten(graph: Graph, tiles: tuple[tuple[tuple[str, int, int], tuple[str, ...]], ...]) -> Graph:
    for (axis, rows, block), names in tiles:
        names = {n for n in names if n in graph}
        if names:
            graph = online_softmax(graph, block, only=names, rows=(axis, rows) if axis else None)
    return graph


def _tile(per_score: int, per_row: int, queries: int, keys: int, budget: int) -> tuple[int, int, int]:
    """(query rows, keys, score bytes) of the largest power-of-two tile whose scores and f32
    accumulator each fit `budget`: the longer side halves first (keys on a tie)."""
    rows, block = 1 << (queries.bit_length() - 1), 1 << (keys.bit_length() - 1)
    while (rows * block * per_score > budget or rows * per_row > budget) and rows * block > 1:
        if block >= rows and block > 1:
            block //= 2
        else:
            rows //= 2
    return rows, block, rows * block * per_score


def _query_axis(graph: Graph, m: Attention) -> str | None:
    """The query axis: the one the mask shares with the output besides the key axis (None when the
    mask has no such axis, as in decode, or there is no mask)."""
    if m.masked is None:
        return None
    mask = graph[m.masked.operands[0]].type.names
    return next((a for a in mask if a != m.axis and a in m.out.type.names), None)
