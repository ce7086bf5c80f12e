"""Graph-to-graph passes: each takes a Graph and returns a new, verified one.

Passes never mutate their input, keep the outputs' names and types and the weight values, and
keep the names of the values they leave in place (reports trace ops by name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ir import Graph, verify
from tcp_compiler.passes.decompose import RULES, decompose
from tcp_compiler.passes.simplify import cse, dce, fold_constants, simplify, verified_once

Pass = Callable[[Graph], Graph]

# Decompose first: its scalar constants repeat per node, and simplify merges and folds them.
PIPELINE: list[Pass] = [decompose, simplify]


def run_passes(g: Graph, passes: Sequence[Pass] = PIPELINE) -> Graph:
    """Applies `passes` in order, verifying the result once (an empty list gives back `g` itself)."""
    if not passes:
        return g
    with verified_once():
        for p in passes:
            g = p(g)
    verify(g)
    return g


__all__ = ["PIPELINE", "RULES", "Pass", "cse", "dce", "decompose", "fold_constants", "run_passes", "simplify"]
