"""Where values live: weights, graph inputs and outputs in HBM; intermediates in DM when they fit.

The rule is explicit per value (no global efficiency knob): an intermediate stays in DM if it
fits in a quarter of the chip's DM (the rest holds double-buffered tiles of the passes that
produce and read it), and spills to HBM otherwise.
"""

from __future__ import annotations

from ir import Graph
from tcp_compiler.mapping.machine import Machine

HBM, DM = "hbm", "dm"


DM_SHARE = 4  # an intermediate may take up to 1/DM_SHARE of the chip's DM


def dm_budget(machine: Machine) -> int:
    """The most bytes one intermediate may occupy in DM before it spills to HBM."""
    return machine.dm_bytes // DM_SHARE


def placed(nbytes: int, machine: Machine) -> str:
    """Where an intermediate of `nbytes` lives: DM if it fits the budget, else HBM."""
    return DM if nbytes <= dm_budget(machine) else HBM


def residency(graph: Graph, machine: Machine) -> dict[str, str]:
    outputs = set(graph.outputs)
    where: dict[str, str] = {}
    for node in graph.nodes:
        if node.kind in ("input", "param") or node.name in outputs:
            where[node.name] = HBM
        elif node.kind == "reshape":
            where[node.name] = where[node.operands[0]]
        else:
            where[node.name] = placed(node.type.nbytes, machine)
    return where
