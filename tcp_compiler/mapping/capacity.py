"""HBM capacity per chip: weights + KV cache + activations that spill, against what the chip has."""

from __future__ import annotations

from dataclasses import dataclass

from ir import Graph
from tcp_compiler.errors import TcpcError
from tcp_compiler.mapping.machine import Machine
from tcp_compiler.mapping.residency import HBM, residency

CHIP_COUNTS = (1, 2, 4, 8)  # the multi-chip topologies RNGD supports


@dataclass(frozen=True)
class Capacity:
    weights: int
    kv_cache: int
    activations: int  # intermediates too big for DM, spilled to HBM
    available: int

    @property
    def needed(self) -> int:
        return self.weights + self.kv_cache + self.activations

    @property
    def free(self) -> int:
        return self.available - self.needed

    def chips_needed(self, chips_now: int) -> int | None:
        """The smallest supported chip count that fits, if sharding splits everything evenly."""
        total = self.needed * chips_now
        return next((n for n in CHIP_COUNTS if total / n <= self.available), None)


def model_capacity(model, machine: Machine) -> Capacity:
    """Capacity of one chip running a built model graph (tcp_compiler.frontend ModelGraph)."""
    graph = model.graph
    weights = sum(graph[n].type.nbytes for n in model.bindings)
    kv_cache = sum(graph[o].type.nbytes for o in graph.outputs if o != "logits")
    return capacity(graph, machine, weights, kv_cache)


def capacity(graph: Graph, machine: Machine, weights: int, kv_cache: int) -> Capacity:
    where = residency(graph, machine)
    outputs = set(graph.outputs)
    spilled = sum(
        n.type.nbytes
        for n in graph.nodes
        if where[n.name] == HBM and n.kind not in ("input", "param", "reshape") and n.name not in outputs
    )
    return Capacity(weights, kv_cache, spilled, machine.hbm_capacity)


def check_capacity(cap: Capacity, what: str, machine: Machine, chips: int) -> None:
    if cap.needed <= cap.available:
        return
    fits = cap.chips_needed(chips)
    advice = f"it would fit on {fits} chips" if fits else f"it does not fit even on {CHIP_COUNTS[-1]} chips"
    raise TcpcError(
        f"{what} needs {cap.needed:,} bytes of HBM per chip ({cap.weights:,} weights, {cap.kv_cache:,} KV "
        f"cache, {cap.activations:,} activations) but '{machine.name}' has {cap.available:,}; {advice}"
    )
