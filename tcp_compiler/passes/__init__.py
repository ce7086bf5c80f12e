"""Graph-to-graph passes: each takes a Graph and returns a new, verified one.

Passes never mutate their input, keep the outputs' names and types and the weight values, and
keep the names of the values they leave in place (reports trace ops by name).

PIPELINE is the named list `run_passes` applies in order; an observer hears each name as it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ir import Graph, verify
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.passes.decompose import RULES, decompose
from tcp_compiler.passes.simplify import cse, dce, fold_constants, simplify, verified_once

Pass = Callable[[Graph], Graph]

# Decompose first: its scalar constants repeat per node, and simplify merges and folds them.
PIPELINE: Mapping[str, Pass] = {"decompose": decompose, "simplify": simplify}


def run_passes(g: Graph, passes: Mapping[str, Pass] = PIPELINE, observer: Observer = QUIET) -> Graph:
    """Applies the named `passes` in order, verifying the result once (none gives back `g` itself)."""
    if not passes:
        return g
    with verified_once():
        for name, p in passes.items():
            observer.step(name)
            g = p(g)
    verify(g)
    return g


__all__ = ["PIPELINE", "RULES", "Pass", "cse", "dce", "decompose", "fold_constants", "run_passes", "simplify"]
