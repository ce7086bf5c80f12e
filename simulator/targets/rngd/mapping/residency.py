"""Where values live: weights, graph inputs and outputs in HBM; intermediates in DM when they fit.

The rule is explicit per value (no global efficiency knob): an intermediate stays in DM if it
fits its share of the chip's DM (MappingPolicy.dm_share: the rest holds double-buffered tiles of
the passes that produce and read it), and spills to HBM otherwise. An intermediate that a graph
output views (a prefill's keys, which are also its KV cache) is written through: its pass stores
it to HBM and its other readers still find it in DM (DM_STORED). An intermediate too large for
its share whole that a run of token-separable ops makes and reads can be held a token tile at a
time instead (mapping/token_tiles.py): where the schedule finds that faster than spilling it
(mapping/schedule.py: token_tiles), it lives in DM, and the schedule runs the run's ops tile by tile.
"""

from __future__ import annotations

from ir import Graph
from ir.memo import per_graph
from simulator.targets.rngd.mapping.fusion import fuse
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.token_tiles import TiledRun, tileable_runs
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.spec import Hardware

HBM, DM, DM_STORED = "hbm", "dm", "dm+hbm"


def writes_hbm(where: str) -> bool:
    """Whether the op producing a value of this residency stores it to HBM."""
    return where in (HBM, DM_STORED)


def dm_budget(hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> int:
    """The most bytes one intermediate may occupy in DM before it spills to HBM."""
    return hw.dm_bytes // policy.dm_share


def placed(nbytes: int, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> str:
    """Where an intermediate of `nbytes` lives: DM if it fits the budget, else HBM."""
    return _within(nbytes, dm_budget(hw, policy))


def _within(nbytes: int, budget: int) -> str:
    return DM if nbytes <= budget else HBM


@per_graph
def residency_at(graph: Graph, budget: int, tiled: tuple[TiledRun, ...] = ()) -> dict[str, str]:
    """Where each value lives when an intermediate may take `budget` bytes of DM, the values of the
    `tiled` runs (of `tileable`'s) a token tile at a time (kept per graph: do not mutate it)."""
    if not tiled:
        return _whole_at(graph, budget)
    where = dict(_whole_at(graph, budget))
    for run in tiled:
        where.update(dict.fromkeys(run.values, DM))
    return where


@per_graph
def tileable(graph: Graph, budget: int) -> tuple[TiledRun, ...]:
    """The runs of the graph's fused ops that can hold their too-large intermediates a token tile
    at a time (mapping/token_tiles.py) when an intermediate may take `budget` bytes of DM."""
    where = _whole_at(graph, budget)
    outputs = set(graph.outputs)
    spilled = {n.name for n in graph.nodes if where[n.name] == HBM and n.name not in outputs
               and not (traits(n.kind).in_memory or traits(n.kind).view)}  # fmt: skip
    return tileable_runs(graph, fuse(graph), spilled, budget) if spilled else ()


@per_graph
def _whole_at(graph: Graph, budget: int) -> dict[str, str]:
    """Where each value lives when it must fit `budget` whole (no token tiles)."""
    outputs = set(graph.outputs)
    viewed = set(outputs)  # values some output views, through any chain of views
    for node in reversed(graph.nodes):
        if node.name in viewed and traits(node.kind).view:
            viewed.add(node.operands[0])
    where: dict[str, str] = {}
    for node in graph.nodes:
        t = traits(node.kind)
        if t.in_memory or node.name in outputs:
            where[node.name] = HBM
        elif t.view:
            where[node.name] = where[node.operands[0]]
        else:
            where[node.name] = _within(node.type.nbytes, budget)
            if node.name in viewed and where[node.name] == DM:
                where[node.name] = DM_STORED
    return where
