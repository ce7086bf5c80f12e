"""Which blocks of an attention mask are provably all False, from the mask's own IR.

Flash-style kernels skip the key blocks a causal, sliding-window, chunked or packed-document mask
hides entirely (about half the score work of a long causal prefill). Which ones can be skipped
follows from how the mask is computed: this module evaluates the mask's subgraph over index
intervals (an iota over a block takes the values of that block's index range), so any mask built
from iotas, constants, + / -, a chunk's start x - x mod C, comparisons and and / or is
understood; whatever depends on run-time inputs (sequence lengths, segment ids) is unknown, and a
block is skipped only when the mask is False there whatever those inputs are.
"""

from __future__ import annotations

from collections.abc import Mapping

from ir import Graph, Node

Interval = tuple[float, float]  # the least and greatest value an integer node takes on the block
Truth = bool | None  # a boolean node: always True, always False, or either


def all_masked(graph: Graph, mask: str, spans: Mapping[str, tuple[int, int]]) -> bool:
    """True when `mask` is False at every index of the block `spans` (axis -> [start, stop))."""
    return _truth(graph, graph[mask], spans, {}) is False


def _truth(graph: Graph, node: Node, spans, memo: dict) -> Truth:
    if node.name in memo:
        return memo[node.name]
    operands = [graph[o] for o in node.operands]
    result: Truth = None
    if node.kind == "and":
        parts = [_truth(graph, o, spans, memo) for o in operands]
        result = False if False in parts else (True if all(p is True for p in parts) else None)
    elif node.kind == "or":
        parts = [_truth(graph, o, spans, memo) for o in operands]
        result = True if True in parts else (False if all(p is False for p in parts) else None)
    elif node.kind == "not":
        inner = _truth(graph, operands[0], spans, memo)
        result = None if inner is None else not inner
    elif node.kind in _COMPARE and len(operands) == 2:
        a, b = (_interval(graph, o, spans, memo) for o in operands)
        if a is not None and b is not None:
            result = _COMPARE[node.kind](a, b)
    memo[node.name] = result
    return result


def _interval(graph: Graph, node: Node, spans, memo: dict) -> Interval | None:
    key = ("interval", node.name)
    if key in memo:
        return memo[key]
    result: Interval | None = None
    if node.kind == "iota":
        axis = node.attrs["axis"]
        lo, hi = spans.get(axis, (0, node.type.size(axis)))
        result = (lo, hi - 1)
    elif node.kind == "const" and "value" in node.attrs and isinstance(node.attrs["value"], (int, float)):
        result = (node.attrs["value"], node.attrs["value"])
    elif (start := _chunk_start(graph, node)) is not None:  # x - x mod C: rises with x
        x = _interval(graph, graph[node.operands[0]], spans, memo)
        if x is not None:
            result = (x[0] - x[0] % start, x[1] - x[1] % start)
    elif node.kind in ("add", "sub") and len(node.operands) == 2:
        a, b = (_interval(graph, graph[o], spans, memo) for o in node.operands)
        if a is not None and b is not None:
            result = (a[0] + b[0], a[1] + b[1]) if node.kind == "add" else (a[0] - b[1], a[1] - b[0])
    memo[key] = result
    return result


def _chunk_start(graph: Graph, node: Node) -> int | None:
    """C when `node` is x - (x mod C) for a constant C > 0: the start of x's chunk of C (Llama 4's
    chunked attention), which interval arithmetic on the two terms apart would lose."""
    if node.kind != "sub" or len(node.operands) != 2:
        return None
    x, rest = node.operands
    mod = graph[rest]
    if mod.kind != "mod" or len(mod.operands) != 2 or mod.operands[0] != x:
        return None
    c = graph[mod.operands[1]]
    value = c.attrs.get("value") if c.kind == "const" else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _decided(always: bool, never: bool) -> Truth:
    return True if always else (False if never else None)


_COMPARE = {
    "le": lambda a, b: _decided(a[1] <= b[0], a[0] > b[1]),
    "lt": lambda a, b: _decided(a[1] < b[0], a[0] >= b[1]),
    "ge": lambda a, b: _decided(a[0] >= b[1], a[1] < b[0]),
    "gt": lambda a, b: _decided(a[0] > b[1], a[1] <= b[0]),
    "eq": lambda a, b: _decided(a[0] == a[1] == b[0] == b[1], a[1] < b[0] or b[1] < a[0]),
    "ne": lambda a, b: _decided(a[1] < b[0] or b[1] < a[0], a[0] == a[1] == b[0] == b[1]),
}
