"""The cost of a grouped einsum (MoE experts): how many experts a pass reads, and their GEMMs.

A grouped einsum contracts rows sorted by expert with the whole stacked weight [E, ...]. Each
expert hit by routing is read once per pass and runs one GEMM over its rows; an expert no token
picked is neither read nor run. Which experts are hit depends on the data, and costing sees
none, so the pass is costed at the expected count under UNIFORM ROUTING: every token picks its
top_k distinct experts of E uniformly at random, independently of the other tokens. One token
misses a given expert with probability 1 - k/E, all T tokens with (1 - k/E)^T, so

    experts hit = E (1 - (1 - k/E)^T),   T = rows / k (prefill: batch x prompt; decode: batch).

The hit experts' GEMMs are placed as one batched einsum whose batch axis is the experts hit
(rounded up) and whose rows are the mean rows per hit expert (T k / hit, rounded up): the same
placement search as any einsum decides whether experts spread over slices (decode: a row or a
few each) or follow one another in time (prefill), each with its own stationary weights. Real
routers are skewed: they hit fewer experts (less weight traffic) but load the busiest unevenly
(a longer tail than the mean GEMM); neither is modelled. Every limit comes from the Hardware.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir import Axis, TensorType
from ir.ops import OpCall
from ir.ops.einsum import format_equation, parse_equation
from ir.ops.moe import grouped_axes
from simulator.targets.rngd.mapping.placement import EinsumShape, Placement, place
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.spec import Hardware


def expected_experts_hit(experts: int, top_k: int, tokens: int) -> float:
    """E (1 - (1 - k/E)^T): the experts T tokens hit at top-k under uniform routing."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class GroupedCost:
    """A grouped einsum as the pass runs it: `hit` experts, each one GEMM of `rows` rows."""

    experts: int  # E, the group axis's size
    group: str  # the group axis's name
    top_k: int
    tokens: int
    hit: float  # expected experts hit (uniform routing)
    rows: int  # rows per hit expert (the mean, rounded up)
    placement: Placement  # all hit experts' GEMMs back to back

    @property
    def weight_fraction(self) -> float:
        """The share of the stacked weights the pass reads: the experts it hits."""
        return self.hit / self.experts

    def share(self, t: TensorType) -> float:
        """The share of a value the pass touches: the hit experts' slices of a stacked weight (or
        of its scales), all of anything else."""
        return self.weight_fraction if t.sizes.get(self.group) == self.experts else 1.0

    def read_bytes(self, t: TensorType) -> int:
        return math.ceil(t.nbytes * self.share(t))

    def describe(self) -> str:
        return (
            f"grouped[{self.group}={self.experts}]: {self.hit:.1f} experts hit x {self.rows} rows "
            f"(expected under uniform routing, E(1-(1-k/E)^T), k={self.top_k}, T={self.tokens})"
        )


def grouped_cost(call: OpCall, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> GroupedCost:
    """The expected cost of one grouped_einsum on one chip (see the module docstring)."""
    x, w, _ = call.operands
    rows_axis, group = grouped_axes(call)
    experts, top_k = w.size(group), call.attrs["top_k"]
    tokens = x.size(rows_axis) // top_k
    hit = expected_experts_hit(experts, top_k, tokens)
    # The hit experts as a batch axis of whole GEMMs (rounded up: an expert hit at all runs), each
    # with its own stationary weights and the mean rows, so hit x rows covers every row.
    n = math.ceil(hit)
    rows = math.ceil(x.size(rows_axis) / n)

    def batched(t: TensorType) -> TensorType:
        axes = [Axis(a.name, rows) if a.name == rows_axis else a for a in t.axes if a.name != group]
        return t.with_axes([Axis(group, n), *axes])

    inputs, output = parse_equation(call.attrs["eq"])
    weight = [group, *(a for a in inputs[1] if a != group)]
    eq = format_equation([[group, *inputs[0]], weight], [group, *output])
    placement = place(EinsumShape.of(eq, (batched(x), batched(w)), batched(call.out)), hw, policy)
    return GroupedCost(experts, group, top_k, tokens, hit, rows, placement)
