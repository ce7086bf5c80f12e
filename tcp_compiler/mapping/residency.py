"""Where values live: weights, graph inputs and outputs in HBM; intermediates in DM when they fit.

The rule is explicit per value (no global efficiency knob): an intermediate stays in DM if it
fits in a quarter of the chip's DM (the rest holds double-buffered tiles of the passes that
produce and read it), and spills to HBM otherwise.
"""

from __future__ import annotations

from ir import Graph
from tcp_compiler.mapping.machine import Machine

HBM, DM = "hbm", "dm"


def residency(graph: Graph, machine: Machine) -> dict[str, str]:
    outputs = set(graph.outputs)
    budget = machine.dm_bytes // 4
    where: dict[str, str] = {}
    for node in graph.nodes:
        if node.kind in ("input", "param") or node.name in outputs:
            where[node.name] = HBM
        elif node.kind == "reshape":
            where[node.name] = where[node.operands[0]]
        else:
            where[node.name] = DM if node.type.nbytes <= budget else HBM
    return where
