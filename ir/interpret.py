"""The numpy reference interpreter: every later stage is checked against what it computes.

Floats compute in float32 and every result is rounded onto its declared dtype's grid (bf16, f16,
fp8, i8, i4), so quantised graphs behave numerically like the hardware that stores them.
Graphs with collectives run SPMD: one rank per chip, side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ir.errors import InterpretError, NonFiniteError
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
    finite: bool = False,
) -> list[dict[str, np.ndarray]]:
    """Runs one copy of the graph per rank (len(inputs) ranks); params default to the graph's.
    With `finite`, the first op whose result holds NaN or +inf raises NonFiniteError naming it
    (-inf is an additive mask's value; an overflow to -inf alone shows in what follows)."""
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
        if finite:
            for r, x in enumerate(values[node.name]):
                _check_finite(node.name, node.kind, x, args[r])
        for o in set(node.operands):
            if last_use[o] == i and o not in keep:
                del values[o]
    return [{o: values[o][r] for o in graph.outputs} for r in range(ranks)]


def _check_finite(name: str, kind: str, x: np.ndarray, operands: list[np.ndarray]) -> None:
    """One isfinite pass over the result; the search for what is wrong only on the rare result
    that fails. NaN and +inf are always wrong; -inf is an additive mask's value, so it is wrong
    only where an op makes it from operands without one (an overflow), not in a graph constant."""
    if x.dtype.kind != "f" or np.isfinite(x).all():
        return
    nan, inf = int(np.isnan(x).sum()), int(np.isposinf(x).sum())
    inherited = any(o.dtype.kind == "f" and np.isneginf(o).any() for o in operands)
    minus = int(np.isneginf(x).sum()) if kind not in ("const", "param") and not inherited else 0
    if nan or inf or minus:
        counts = ((nan, "NaN"), (inf, "+inf"), (minus, "-inf"))
        what = " and ".join(f"{n:,} {label}" for n, label in counts if n)
        message = f"%{name} = {kind} computed {what} of {x.size:,} values, the first op to go non-finite"
        raise NonFiniteError(message)
