"""The numpy reference interpreter: every later stage is checked against what it computes.

Floats compute in float32 and every result is rounded onto its declared dtype's grid (bf16, f16,
fp8, i8, i4), so quantised graphs behave numerically like the hardware that stores them.
Graphs with collectives run SPMD: one rank per chip, side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ir.errors import InterpretError
from ir.graph import Graph
from ir.ops import REGISTRY, EvalContext
from ir.verify import verify


def interpret(
    graph: Graph,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Runs a single-chip graph; returns its outputs by name."""
    return interpret_spmd(graph, [inputs or {}], [params or {}])[0]


def interpret_spmd(
    graph: Graph,
    inputs: Sequence[Mapping[str, np.ndarray]],
    params: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Runs one copy of the graph per rank (len(inputs) ranks); params default to the graph's."""
    verify(graph)
    ranks = len(inputs)
    params = params if params is not None else [{}] * ranks
    if len(params) != ranks:
        raise InterpretError(f"{len(inputs)} ranks of inputs but {len(params)} of params")
    ctxs = [EvalContext(r, ranks, inputs[r], {**graph.param_values, **params[r]}) for r in range(ranks)]
    last_use = {o: i for i, node in enumerate(graph.nodes) for o in node.operands}
    keep = set(graph.outputs)
    values: dict[str, list[np.ndarray]] = {}
    for i, node in enumerate(graph.nodes):
        call = graph.call(node)
        args = [[values[o][r] for o in node.operands] for r in range(ranks)]
        with np.errstate(all="ignore"):
            results = REGISTRY[node.kind].evaluate_ranks(args, call, ctxs)
            values[node.name] = [node.type.dtype.round(np.asarray(x)) for x in results]
        for x in values[node.name]:
            if x.shape != node.type.shape:
                raise InterpretError(
                    f"%{node.name} = {node.kind} computed shape {list(x.shape)}, type says {node.type}"
                )
        for o in set(node.operands):
            if last_use[o] == i and o not in keep:
                del values[o]
    return [{o: values[o][r] for o in graph.outputs} for r in range(ranks)]
