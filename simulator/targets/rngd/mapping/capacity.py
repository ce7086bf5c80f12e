"""HBM capacity per chip: weights + KV cache + activations that spill, against what the chip has."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ir import Graph
from ir.memo import per_graph
from simulator.targets.rngd.mapping.fusion import on_the_fly, view_roots
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import HBM, dm_budget, residency_at
from simulator.targets.rngd.mapping.schedule import tiled_runs
from simulator.targets.rngd.mapping.token_tiles import TiledRun
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.errors import CapacityError


@dataclass(frozen=True)
class Capacity:
    weights: int
    kv_cache: int
    activations: int  # the peak of intermediates too big for DM, spilled to HBM at once
    available: int

    @property
    def needed(self) -> int:
        return self.weights + self.kv_cache + self.activations

    @property
    def free(self) -> int:
        return self.available - self.needed

    @property
    def fits(self) -> bool:
        return self.needed <= self.available


def capacity(
    graph: Graph,
    weights: Iterable[str],
    hw: Hardware,
    policy: MappingPolicy = DEFAULT_POLICY,
    ignore: frozenset[str] = frozenset(),
    spills: Graph | None = None,
) -> Capacity:
    """HBM use of one chip running `graph`: its weights (the params named; tables sized by the
    positions grow with the graph), the KV cache outputs it declares, and its peak of spilled values
    (of `spills` when given: a graph with the same peak, smaller to sweep)."""
    weights = sum(graph[n].type.nbytes for n in weights)
    kv_cache = sum(graph[o].type.nbytes for o in graph.meta.kv_outputs)
    peak = peak_spill(graph if spills is None else spills, hw, policy, ignore)
    return Capacity(weights, kv_cache, peak, hw.hbm.capacity_bytes)


def peak_spill(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, ignore: frozenset[str] = frozenset()
) -> int:
    """The most HBM that intermediates spilled out of DM hold at any one time: each lives from
    the op that makes it to its last reader (views share their root's bytes). Values in `ignore`
    are not counted (a lower bound, for values a later rewrite will replace), nor are weights as
    a pass fetches them (casts of values in memory, dequantised or stacked expert weights): the
    Fetch Adapter and the pass transform them on the way in, so they never exist in memory.
    Of the spec it reads the DM budget and the runs held a token tile at a time (which are chosen
    by time), so it is kept per graph, budget and runs."""
    return _peak_spill(graph, dm_budget(hw, policy), tiled_runs(graph, hw, policy), ignore)


@per_graph
def _peak_spill(graph: Graph, budget: int, tiled: tuple[TiledRun, ...], ignore: frozenset[str]) -> int:
    where = residency_at(graph, budget, tiled)
    roots = view_roots(graph)
    fetched = {n for n, r in roots.items() if r != n} | set(on_the_fly(graph, roots))
    outputs = set(graph.outputs)
    root: dict[str, str] = {}
    for n in graph.nodes:
        root[n.name] = root[n.operands[0]] if traits(n.kind).view else n.name
    last_use = {}
    for i, n in enumerate(graph.nodes):
        for o in n.operands:
            last_use[root[o]] = i
    spilled = {
        n.name: n.type.nbytes
        for n in graph.nodes
        if where[n.name] == HBM
        and not (traits(n.kind).in_memory or traits(n.kind).view)
        and n.name not in outputs
        and n.name not in ignore
        and n.name not in fetched
    }
    live = peak = 0
    ends: dict[int, int] = {}
    for i, n in enumerate(graph.nodes):
        if n.name in spilled:
            live += spilled[n.name]
            end = last_use.get(n.name, i)
            ends[end] = ends.get(end, 0) + spilled[n.name]
        peak = max(peak, live)
        live -= ends.pop(i, 0)
    return peak


def check_capacity(cap: Capacity, what: str, hw: Hardware, at_least: bool = False) -> None:
    """Raises a CapacityError with the figures; `at_least`: `cap` is a lower bound (checked before
    a rewrite that can only add to it), and the message says so."""
    if not cap.fits:
        raise capacity_error(cap, what, hw.name, at_least)


def capacity_error(cap: Capacity, what: str, hw: str, at_least: bool = False, advice: str = "",
                   **fits: object) -> CapacityError:  # fmt: skip
    """The error of `cap` not fitting, `advice` a template (naming options, filled by `fits`)."""
    return CapacityError(
        "{what} {needs} {needed:,} bytes of HBM per chip ({weights:,} weights, {kv_cache:,} KV cache, "
        "{activations:,} activations) but '{hw}' has {available:,}" + advice,
        what=what, needs="needs at least" if at_least else "needs", hw=hw, needed=cap.needed,
        weights=cap.weights, kv_cache=cap.kv_cache, activations=cap.activations, available=cap.available,
        **fits,
    )  # fmt: skip
