"""Facts derived from a graph alone, computed once per graph object.

A sweep over spec values reschedules the same graphs (the lowering's spec-free front is kept,
tcp_compiler.pipeline), so what follows from a graph and a few hashable arguments (its fused ops,
its attention matches, where values live for one DM budget) is kept on the graph, not recomputed
per spec. A graph still being built is not memoised: the key holds its node count, and the entries
go when the graph does (a finalizer).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from ir.graph import Graph

T = TypeVar("T")
_MEMO: dict[int, dict[tuple, Any]] = {}  # id(graph) -> its entries (graphs compare by value, unhashable)


def per_graph(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn(graph, *args)` kept per graph and hashable args; callers must not mutate what it returns."""

    @functools.wraps(fn)
    def kept(graph: Graph, *args: Hashable) -> T:
        memo = _MEMO.get(id(graph))
        if memo is None:
            memo = _MEMO[id(graph)] = {}
            weakref.finalize(graph, _MEMO.pop, id(graph), None)
        key = (fn.__qualname__, len(graph.nodes), *args)
        if key not in memo:
            memo[key] = fn(graph, *args)
        return memo[key]

    return kept
