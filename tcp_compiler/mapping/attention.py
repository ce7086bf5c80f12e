"""Which attention form each layer uses: plain softmax when a head's scores fit on chip, else the
online-softmax rewrite over key blocks small enough that each block's scores do."""

from __future__ import annotations

from ir import Graph
from tcp_compiler.mapping.machine import Machine
from tcp_compiler.mapping.residency import dm_budget
from tcp_compiler.passes.online_softmax import find_attention, online_softmax


def choose_attention(graph: Graph, machine: Machine) -> tuple[Graph, list[dict]]:
    """The graph with online softmax where the plain scores would spill, and one note per attention."""
    budget = dm_budget(machine)  # scores above it would spill (tcp_compiler.mapping.residency)
    notes, blocks = [], {}
    for m in find_attention(graph):
        scores = m.maximum.operands[0]
        nbytes = graph[scores].type.nbytes
        size = graph[scores].type.size(m.axis)
        if nbytes <= budget:
            notes.append(
                {"op": m.out.name, "form": "plain", "reason": f"scores {nbytes:,} B fit DM ({budget:,} B)"}
            )
            continue
        block = 1 << (size.bit_length() - 1)  # a power of two; the last block may be shorter
        while block > 1 and nbytes * block // size > budget // 2:
            block //= 2
        blocks.setdefault(block, set()).add(m.out.name)
        notes.append({
            "op": m.out.name, "form": "online", "block": block,
            "reason": f"scores {nbytes:,} B exceed DM ({budget:,} B); blocks of {block} keys hold "
                      f"{nbytes * block // size:,} B",
        })  # fmt: skip
    for block, names in sorted(blocks.items()):
        graph = online_softmax(graph, block, only=names)
    return graph, notes
