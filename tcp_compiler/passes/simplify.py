"""Exact clean-ups: dead code, common subexpressions, constant folding and algebraic identities.

Every rewrite here preserves values bit for bit under the interpreter's rules (folded constants
are computed by `ir.interpret` itself), so any later stage can be checked against the original
graph. Passes build a new graph and leave their input alone; surviving values keep their names
and the graph's outputs keep their names and types.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ir import Graph, Node, TensorType, VerifyError, interpret, verify
from ir.printer import format_attr, same_text

# Largest result (in elements) folded into a `const`: bigger masks stay as the iota/compare ops
# that make them, so the graph text (and the weights a backend must store) stays small.
MAX_FOLD_ELEMENTS = 4096
SOURCES = frozenset({"input", "param", "const", "iota"})
# Collectives compute from every rank's operand (reduce_scatter even keeps a rank's own part),
# so a value computed on one rank is not theirs.
_RANK_DEPENDENT = frozenset({"all_reduce", "reduce_scatter", "all_gather"})
_MAX_ROUNDS = 64


# -- shared by every pass -----------------------------------------------------------------------
def new_graph(g: Graph) -> Graph:
    """An empty graph with g's name, (shared, never mutated) weight values and metadata."""
    out = Graph(g.name)
    out.param_values = dict(g.param_values)
    out.meta = g.meta.copy()
    return out


def clone(node: Node, operands: tuple[str, ...] | None = None) -> Node:
    """A copy of node (optionally reading other operands), so the input graph is never shared."""
    operands = node.operands if operands is None else operands
    return Node(node.name, node.kind, operands, dict(node.attrs), node.type)


_VERIFY_EACH = ContextVar("verify_each", default=True)


@contextmanager
def verified_once() -> Iterator[None]:
    """Inside, passes skip verifying their outputs; the composite pass verifies its result once."""
    token = _VERIFY_EACH.set(False)
    try:
        yield
    finally:
        _VERIFY_EACH.reset(token)


def finish(src: Graph, out: Graph, pass_name: str) -> Graph:
    """Sets src's outputs on out, checks they kept their types, and verifies out (unless a
    composite pass will verify its final result: see verified_once)."""
    out.set_outputs(*src.outputs)
    for name in src.outputs:
        if name not in out or out[name].type != src[name].type:
            got = out[name].type if name in out else "nothing"
            raise VerifyError(f"pass {pass_name} changed output %{name}: {src[name].type} -> {got}")
    if _VERIFY_EACH.get():
        verify(out)
    return out


def splat_value(node: Node) -> np.generic | None:
    """The one value a `const` holds (rounded onto its dtype), or None if it holds several."""
    if node.kind != "const":
        return None
    if "value" in node.attrs:
        raw = np.asarray([node.attrs["value"]])
    else:
        raw = np.asarray(node.attrs["values"], dtype=np.float64)  # as the const op reads them
    with np.errstate(all="ignore"):  # out-of-range values saturate or become inf, as interpreted
        rounded = node.type.dtype.round(raw)
    first = rounded.ravel()[0]
    if not np.all(rounded == first) or np.any(np.signbit(rounded) != np.signbit(first)):
        return None
    return first


# -- dead code ----------------------------------------------------------------------------------
def dce(g: Graph) -> Graph:
    """Drops every node no output depends on (unused inputs and params too)."""
    live = set(g.outputs)
    for node in reversed(g.nodes):
        if node.name in live:
            live.update(node.operands)
    out = new_graph(g)
    for node in g.nodes:
        if node.name in live:
            out.append(clone(node))
    return finish(g, out, "dce")


# -- common subexpressions ----------------------------------------------------------------------
def _cse_key(node: Node, operands: tuple[str, ...]) -> Hashable | None:
    """What makes two nodes compute the same value; None for inputs and params (names are identity).

    Attributes compare by their text form, so `0.0` and `-0.0` (or `1` and `1.0`) stay apart.
    """
    if node.kind in ("input", "param"):
        return None
    attrs = tuple(sorted((k, format_attr(v)) for k, v in node.attrs.items()))
    return node.kind, operands, attrs, node.type


def cse(g: Graph) -> Graph:
    """Merges nodes with the same kind, operands, attributes and type into the first one.

    A duplicate that is a graph output stays (its name must survive); later duplicates still
    merge into the first.
    """
    out = new_graph(g)
    outputs = set(g.outputs)
    rename: dict[str, str] = {}
    first: dict[Hashable, str] = {}
    for node in g.nodes:
        operands = tuple(rename.get(o, o) for o in node.operands)
        key = _cse_key(node, operands)
        if key is not None and key in first and node.name not in outputs:
            rename[node.name] = first[key]
            continue
        if key is not None:
            first.setdefault(key, node.name)
        out.append(clone(node, operands))
    return finish(g, out, "cse")


# -- constant folding and identities ------------------------------------------------------------
def _const_attrs(array: np.ndarray, t: TensorType) -> dict:
    """`value` when every element is the same (bit for bit), else all `values` row-major."""
    py = {"float": float, "int": int, "bool": bool}[t.dtype.kind]
    flat = array.ravel()
    bits = flat.view(np.uint32) if flat.dtype == np.float32 else flat
    if np.all(bits == bits[0]):
        return {"value": py(flat[0])}
    return {"values": tuple(py(v) for v in flat)}


class _Folder:
    """One fold_constants walk: the graph being built, renames, and values of constant nodes."""

    def __init__(self, g: Graph) -> None:
        self.out = new_graph(g)
        self.outputs = set(g.outputs)
        self.rename: dict[str, str] = {}
        self.constant: set[str] = set()  # names in `out` computed from const / iota only
        self.values: dict[str, np.ndarray] = {}  # memo of constant non-source nodes
        self.position: dict[str, int] = {}

    def visit(self, node: Node) -> None:
        node = _merge_views(self.out, clone(node, tuple(self.rename.get(o, o) for o in node.operands)))
        same = _identity_of(self.out, node)
        if same is not None and node.name not in self.outputs:
            self.rename[node.name] = same
            return
        if self._foldable(node):
            value = self._evaluate(node)
            node = Node(node.name, "const", (), _const_attrs(value, node.type), node.type)
        self.position[node.name] = len(self.out.nodes)
        self.out.append(node)
        if node.kind in ("const", "iota") or self._computes_from_constants(node):
            self.constant.add(node.name)

    def _computes_from_constants(self, node: Node) -> bool:
        return (
            node.kind not in SOURCES
            and node.kind not in _RANK_DEPENDENT
            and all(o in self.constant for o in node.operands)
        )

    def _foldable(self, node: Node) -> bool:
        return self._computes_from_constants(node) and node.type.numel <= MAX_FOLD_ELEMENTS

    def _evaluate(self, node: Node) -> np.ndarray:
        """node's value by the interpreter: a one-op graph fed its operands' values as inputs."""
        needed = self._unevaluated_ancestors(node)
        for name in sorted(needed, key=self.position.__getitem__):
            self.values[name] = self._run(self.out[name])
        return self._run(node)

    def _unevaluated_ancestors(self, node: Node) -> set[str]:
        needed: set[str] = set()
        stack = list(node.operands)
        while stack:
            name = stack.pop()
            if name in needed or name in self.values or self.out[name].kind in SOURCES:
                continue
            needed.add(name)
            stack.extend(self.out[name].operands)
        return needed

    def _run(self, node: Node) -> np.ndarray:
        sub, feeds = Graph("fold"), {}
        for name in dict.fromkeys(node.operands):
            operand = self.out[name]
            if operand.kind in SOURCES:
                sub.append(clone(operand))
            else:
                sub.append(Node(name, "input", (), {}, operand.type))
                feeds[name] = self.values[name]
        sub.append(clone(node))
        sub.set_outputs(node.name)
        return interpret(sub, feeds)[node.name]


def _merge_views(g: Graph, node: Node) -> Node:
    """reshape(reshape(x)) -> reshape(x), transpose(transpose(x)) -> transpose(x)."""
    if node.kind in ("reshape", "transpose"):
        inner = g[node.operands[0]]
        while inner.kind == node.kind:
            node.operands = inner.operands
            inner = g[node.operands[0]]
    return node


def _identity_of(g: Graph, node: Node) -> str | None:
    """The operand node equals bit for bit, for every input, or None.

    x * 1, 1 * x, x / 1; x + 0, x - 0 for integers; x + (-0.0) and x - (+0.0) for floats (x + 0.0
    would turn -0.0 into 0.0); cast to its own dtype; reshape or transpose to its own type.
    """
    if node.kind in ("cast", "reshape", "transpose"):
        (x,) = node.operands
        return x if g[x].type == node.type else None
    if node.kind not in ("mul", "div", "add", "sub"):
        return None
    a, b = node.operands
    candidates = [(a, b), (b, a)] if node.kind in ("mul", "add") else [(a, b)]
    for x, c in candidates:
        value = splat_value(g[c])
        if value is not None and g[x].type == node.type and _neutral(node.kind, value, node.type):
            return x
    return None


def _neutral(kind: str, value: np.ndarray, t: TensorType) -> bool:
    if kind in ("mul", "div"):
        return bool(value == 1)
    if value != 0:
        return False
    if t.dtype.is_int:
        return True
    # x + (-0.0) and x - (+0.0) are exact for every x, signed zeros included.
    return bool(np.signbit(value)) == (kind == "add")


def fold_constants(g: Graph) -> Graph:
    """Computes small constant subexpressions into `const`s and drops exact identities.

    A node folds when everything it reads comes from `const` / `iota` only (never an input or
    param) and its result has at most MAX_FOLD_ELEMENTS elements; its value comes from
    `ir.interpret`, so rounding is the interpreter's. Identities whose node is a graph output stay
    (the output's name must survive).
    """
    folder = _Folder(g)
    for node in g.nodes:
        folder.visit(node)
    return finish(g, folder.out, "fold_constants")


def simplify(g: Graph) -> Graph:
    """fold_constants, cse and dce until the graph stops changing (its text form stays the same);
    verified once, at the end (by the composite pass inside verified_once)."""
    verify_result = _VERIFY_EACH.get()  # inside verified_once, the composite pass verifies it
    current = g
    with verified_once():
        for _ in range(_MAX_ROUNDS):
            changed = dce(cse(fold_constants(current)))
            # Unchanged means the same text: NaN attributes compare as equal; == would not.
            if same_text(changed, current):
                current = changed
                break
            current = changed
    if verify_result:
        verify(current)
    return current
