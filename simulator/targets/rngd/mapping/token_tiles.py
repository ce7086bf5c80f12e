"""Activations tiled along the tokens where they do not fit DM whole.

A prefill's projections, norms, residual adds and all-reduces treat each token's row on its own.
When an intermediate between them does not fit its share of DM (residency.dm_budget), a compiler
does not spill it to HBM and read it back pass after pass: it runs the whole stretch of such ops
one token tile at a time, so DM holds a tile of each intermediate, not all of it (as a card split
into PE ranks must: 1/8 of the DM holds 1/8 of each activation's bytes only with 1/8 of its tokens).
What this costs is counted, not assumed away: every tile streams the stretch's weights from HBM
again (nothing keeps a layer's weights resident in DM across its tiles), and values read by ops
outside the stretch (the residual stream across attention, the KV cache) still go to memory whole.

A tiled run is a maximal stretch of consecutive fused ops of one layer that treat the tokens apart
(`treats_tokens_apart`: passes whose tokens stay the token axis, and collectives joining rows of
tokens, a sequence-parallel stream's reduce-scatters and all-gathers too: its tiles cut the
fewest tokens any of its values holds, `fewest_tokens`). Its tiled values are the
intermediates that the base rule spills, are made and read only inside the run, and fit the DM
budget in some number of token tiles; `least` is the fewest tiles (a power of two dividing the
tokens) in which each of them does. A value too large even for the most tiles (one row of a few
tokens) is not tiled: it spills as before. Whether a run that can be tiled is tiled is a question
of time, not bytes (a spill hidden behind the passes' compute costs nothing, a weight read per
tile may not be hidden): the schedule (mapping/schedule.py: token_tiles) estimates the run both
ways, in its best tile count from `least` up and spilled, and tiles it only where that is faster
(a TileChoice); it then emits the run tile by tile, as a software pipeline.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ir import Graph, Node
from ir.ops.einsum import parse_equation
from simulator.targets.rngd.mapping.fusion import FusedOp
from simulator.targets.rngd.mapping.traits import traits

TOKENS = "S"  # the token axis of a prefill's activations (frontend.builder)


@dataclass(frozen=True)
class TiledRun:
    """A run of fused ops executed a token tile at a time, because its `values` do not fit DM whole."""

    ops: tuple[int, ...]  # the fused ops' indices, consecutive
    tokens: int  # the size of the token axis the run cuts
    least: int  # the fewest tiles in which each of `values` fits the DM budget
    values: tuple[str, ...]  # the intermediates held in DM a tile at a time
    largest: int  # the bytes of the largest of them, whole
    spills: int  # the bytes spilling them would move: each stored once and read by each reader
    weights: int  # the bytes of the run's weights, which every tile streams from HBM again

    def tile_counts(self) -> list[int]:
        """The tile counts to try: the powers of two from `least` that divide the tokens."""
        found, c = [], self.least
        while c <= self.tokens and self.tokens % c == 0:
            found.append(c)
            c *= 2
        return found


def joins_tokens(node: Node) -> bool:
    """Whether a collective joins rows of tokens, each row on its own: an all-reduce of them, or
    a reduce-scatter or all-gather along them (a sequence-parallel residual stream's: cut into
    tiles, each tile's rows are scattered and gathered back alike)."""
    if node.kind == "all_reduce":
        return TOKENS in node.type.names
    return node.kind in ("reduce_scatter", "all_gather") and node.attrs["axis"] == TOKENS


def fewest_tokens(graph: Graph, ops: Collection[FusedOp]) -> int | None:
    """The token count the tiles of `ops` cut: the fewest tokens any of their values and operands
    holds (a sequence-parallel stream holds 1 / chips of them), when every other count is a
    multiple of it (the tiles line up); None without tokens or when they would not line up."""
    sizes = {graph[v].type.size(TOKENS) for op in ops for n in op.nodes for v in (n.name, *n.operands)
             if TOKENS in graph[v].type.names}  # fmt: skip
    if not sizes or any(s % min(sizes) for s in sizes):
        return None
    return min(sizes)


@dataclass(frozen=True)
class TileChoice:
    """A run that can be tiled, with the schedule's estimate of it both ways (cycles of the whole
    run: mapping/schedule.py token_tiles): tiled in `tiles` tiles, or with its values spilled."""

    run: TiledRun
    tiles: int  # the tile count the schedule cuts the run in, if tiled (the fastest from `least` up)
    tiled_cycles: float
    spilled_cycles: float

    @property
    def tiled(self) -> bool:
        """Whether the run is tiled: only where that is estimated faster than spilling."""
        return self.tiled_cycles < self.spilled_cycles

    def note(self, graph: Graph, ops: list[FusedOp], budget: int, clock_hz: float) -> dict:
        """The run as a prefill note (report AttentionNote, form "tiled"): its fewest tiles, and the
        estimated times that chose tiles over spills (the bytes behind them too)."""
        run, first = self.run, ops[self.run.ops[0]]
        block, ms = run.tokens // run.least, 1e3 / clock_hz
        tiled, spilled = self.tiled_cycles, self.spilled_cycles
        return {
            "op": first.name, "role": first.role, "form": "tiled", "block": block, "tiles": run.least,
            "reason": f"intermediates of up to {run.largest:,} B ({len(run.values)}) exceed DM "
                      f"({budget:,} B); tiles of {block:,} tokens hold {-(-run.largest // run.least):,} B; "
                      f"in {self.tiles} tiles the run takes an estimated {tiled:,.0f} cycles "
                      f"({tiled * ms:.3f} ms), spilled {spilled:,.0f} ({spilled * ms:.3f} ms): each tile "
                      f"after the first re-reads {run.weights:,} B of weights, spilling would move "
                      f"{run.spills:,} B",
        }  # fmt: skip


def treats_tokens_apart(graph: Graph, op: FusedOp) -> bool:
    """Whether each token's results of `op` need only that token's inputs: a collective joining
    rows of tokens (`joins_tokens`), or a pass of element-wise work, casts, reductions over other
    axes and einsums that keep the tokens (none sums over them) as the token axis of what it
    makes (a pass that hands them on named otherwise, as RoPE's rotation hands attention its
    queries Sq, would write all of them from every tile)."""
    if op.kind == "collective":
        return joins_tokens(op.nodes[0])
    if op.kind != "pass":
        return False
    if any(TOKENS in graph[v].type.names for v in op.inputs) and any(
        TOKENS not in graph[v].type.names for v in op.outputs
    ):
        return False
    for node in op.nodes:  # the prologue transforms weights as they are fetched: no tokens
        operands = [graph[o].type for o in node.operands]
        if any(TOKENS in t.names for t in operands) and TOKENS not in node.type.names:
            return False  # reduces the tokens away
        kind = node.kind
        if kind == "einsum":
            inputs, output = parse_equation(node.attrs["eq"])
            if sum(TOKENS in axes for axes in inputs) > 1 and TOKENS not in output:
                return False  # the tokens meet tokens (attention)
        elif kind == "reduce":
            if TOKENS in node.attrs["axes"]:
                return False
        elif not traits(kind).elementwise and kind != "where":
            return False
    return True


def _inputs_cut(graph: Graph, op: FusedOp, spilled: Collection[str]) -> bool:
    """Whether a tile of `op` loads a tile of each spilled input it reads tokens of: the value in
    HBM has the token axis too, not only the views and casts the pass reads it through, which may
    name the tokens otherwise (attention's output joined from its query tiles: every tile would
    load it whole). An input in DM is read a tile at a time whatever its axes are named."""
    memory = set(op.inputs)
    for node in [*op.prologue, *op.nodes]:
        for o in node.operands:
            root = o
            while root not in memory and (traits(graph[root].kind).view or graph[root].kind == "cast"):
                root = graph[root].operands[0]
            if root in spilled and TOKENS in graph[o].type.names and TOKENS not in graph[root].type.names:
                return False
    return True


def tileable_runs(
    graph: Graph, ops: list[FusedOp], spilled: Collection[str], budget: int
) -> tuple[TiledRun, ...]:
    """The runs of `ops` that can be tiled along the tokens: each maximal stretch of one layer's
    ops that treat the tokens apart and make an intermediate in `spilled` (too large for DM whole)
    that only the stretch reads and that fits `budget` in some number of token tiles."""
    made = {v for op in ops for v in op.outputs}
    readers: dict[str, set[int]] = {}
    for op in ops:
        for v in op.inputs:
            for read in _made_values(graph, v, made):
                readers.setdefault(read, set()).add(op.index)
    runs, i = [], 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j].layer == ops[i].layer and treats_tokens_apart(graph, ops[j]) \
                and _inputs_cut(graph, ops[j], spilled):  # fmt: skip
            j += 1
        if j > i:
            run = _tiled(graph, ops[i:j], spilled, readers, budget)
            if run is not None:
                runs.append(run)
        i = max(j, i + 1)
    return tuple(runs)


def _made_values(graph: Graph, v: str, made: Collection[str]) -> list[str]:
    """`v` and, where no op makes it, what it is a view or cast of back to an op's output: a
    pass reading a cast the Fetch Adapter does as it fetches (a gathered bf16 stream read as f32)
    reads the value the op before it made."""
    found = [v]
    while v not in made and (traits(graph[v].kind).view or graph[v].kind == "cast"):
        v = graph[v].operands[0]
        found.append(v)
    return found


def _tiled(graph: Graph, stretch: list[FusedOp], spilled: Collection[str], readers: dict[str, set[int]],
           budget: int) -> TiledRun | None:  # fmt: skip
    """The stretch as a tiled run, or None when none of its spilled values can be held a tile at a time."""
    inside = {op.index for op in stretch}
    count = fewest_tokens(graph, stretch)
    if count is None:
        return None  # no token axis, or cuts that would not line up
    most = count & -count  # the largest power of two dividing the tokens
    values = [
        v for op in stretch for v in op.outputs
        if v in spilled and TOKENS in graph[v].type.names and readers.get(v, set()) <= inside
        and -(-graph[v].type.nbytes // most) <= budget
    ]  # fmt: skip
    if not values:
        return None
    largest = max(graph[v].type.nbytes for v in values)
    least = 2
    while -(-largest // least) > budget:
        least *= 2
    # Spilled, each value is stored once and read by each reader; tiled, each tile after the first
    # streams the run's weights again (what the times that decide come from: TileChoice).
    spills = sum(graph[v].type.nbytes * (1 + len(readers[v])) for v in values)
    weights = sum(graph[v].type.nbytes for v in {w for op in stretch for w in op.inputs}
                  if traits(graph[v].kind).weight)  # fmt: skip
    return TiledRun(tuple(sorted(inside)), count, least, tuple(values), largest, spills, weights)
