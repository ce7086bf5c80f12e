"""FLOPs, bytes and arithmetic intensity per op and per graph, from each op's cost rule.

FLOPs: an einsum is 2 x the product of all its axis sizes x (operands - 1); elementwise ops count
one per result element and reduces one per input element; data movement counts none.
Bytes: what the op reads and writes in memory (a gather reads only the rows it picks; a reshape
is a view and moves nothing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ir.graph import Graph, Node
from ir.ops import REGISTRY, OpCost


@dataclass(frozen=True)
class NodeCost:
    node: Node
    cost: OpCost


@dataclass(frozen=True)
class GraphCost:
    graph: str
    per_node: tuple[NodeCost, ...]
    total: OpCost

    @property
    def counts_by_kind(self) -> dict[str, int]:
        return dict(Counter(nc.node.kind for nc in self.per_node))

    @property
    def flops_by_kind(self) -> dict[str, int]:
        flops: Counter[str] = Counter()
        for nc in self.per_node:
            flops[nc.node.kind] += nc.cost.flops
        return dict(flops)

    def to_json(self) -> dict:
        """The machine-readable form `tcpc inspect --json` prints."""
        return {
            "graph": self.graph,
            "op_count": len(self.per_node),
            "counts_by_kind": self.counts_by_kind,
            "flops_by_kind": self.flops_by_kind,
            "total_flops": self.total.flops,
            "total_bytes_read": self.total.bytes_read,
            "total_bytes_written": self.total.bytes_written,
            "total_link_bytes": self.total.link_bytes,
            "intensity": self.total.intensity,
            "ops": [
                {
                    "name": nc.node.name,
                    "kind": nc.node.kind,
                    "type": str(nc.node.type),
                    "flops": nc.cost.flops,
                    "bytes_read": nc.cost.bytes_read,
                    "bytes_written": nc.cost.bytes_written,
                    "link_bytes": nc.cost.link_bytes,
                    "intensity": nc.cost.intensity,
                }
                for nc in self.per_node
            ],
        }


def node_cost(graph: Graph, node: Node) -> OpCost:
    return REGISTRY[node.kind].cost(graph.call(node))


def analyze(graph: Graph) -> GraphCost:
    per_node = tuple(NodeCost(n, node_cost(graph, n)) for n in graph.nodes)
    total = sum((nc.cost for nc in per_node), OpCost())
    return GraphCost(graph.name, per_node, total)
