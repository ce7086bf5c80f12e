"""The graph: SSA nodes in topological order, named outputs, optional weight values.

Builders call `graph.add(kind, *operands, **attrs)`; the op's type rule gives the result type,
so a graph built through `add` is well typed by construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ir.errors import VerifyError
from ir.ops import REGISTRY, AttrValue, OpCall
from ir.typecheck import check_call
from ir.types import TensorType

if TYPE_CHECKING:  # networkx costs ~0.1 s to import; only the graph view needs it
    import networkx as nx

NAME_RE = re.compile(r"[A-Za-z0-9_.]+")


@dataclass
class Node:
    """One SSA value and the op that defines it. `line` is where the text form defined it."""

    name: str
    kind: str
    operands: tuple[str, ...]
    attrs: dict[str, AttrValue]
    type: TensorType
    line: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"%{self.name} = {self.kind}"


@dataclass
class GraphMeta:
    """What a model graph says about itself beyond its ops, so later stages never parse names:
    which decoder layer each value belongs to and the role it plays there, which outputs are the
    KV cache, which axes have the KV length, and which input a pipeline stage receives. The text
    form does not carry it; passes keep it (see `derive`)."""

    layers: dict[str, int] = field(default_factory=dict)  # value -> decoder layer, -1: none
    # value -> its role: the same for the value in every layer (`l0.down` ... `l15.down`: `down`),
    # every tile of one value alike (a tile index reads `*`); absent: the value's own name
    roles: dict[str, str] = field(default_factory=dict)
    kv_outputs: tuple[str, ...] = ()  # outputs that hold the KV cache
    kv_axes: tuple[str, ...] = ()  # axis names whose size is the KV length (cached positions)
    # KV axes of sliding-window layers -> their window: a ring buffer of at most that many slots
    kv_windows: dict[str, int] = field(default_factory=dict)
    received: str | None = None  # the input a later pipeline stage receives from the one before it
    # value a pass made -> the value it was made from (whose name its own extends: `l3.attn` ->
    # `l3.attn.Sq512.blk1.scores`), so a copy of a layer renames it with its source
    origins: dict[str, str] = field(default_factory=dict)

    def layer_of(self, name: str) -> int:
        return self.layers.get(name, -1)

    def role_of(self, name: str) -> str:
        return self.roles.get(name, name)

    def kv_sizes(self, positions: int) -> dict[str, int]:
        """Each KV axis's size when the cache holds `positions` tokens: windowed ones stop growing."""
        return {a: min(positions, self.kv_windows.get(a, positions)) for a in self.kv_axes}

    def derive(self, made: Mapping[str, str], source: str) -> None:
        """Values a pass made in place of (or from) `source` belong to its layer and were made
        from it (their names extend source's); `made` maps each to what its role adds to source's
        (`.sig`; a tile's `.blk*`), "" for the same role."""
        layer, role = self.layer_of(source), self.role_of(source)
        for name, suffix in made.items():
            self.layers.setdefault(name, layer)
            self.roles.setdefault(name, role + suffix)
            if name != source:
                if not name.startswith(source):
                    raise ValueError(f"value {name!r} made from {source!r} must extend its name")
                self.origins.setdefault(name, source)

    def copy(self) -> GraphMeta:
        return GraphMeta(
            dict(self.layers), dict(self.roles), self.kv_outputs, self.kv_axes, dict(self.kv_windows),
            self.received, dict(self.origins),
        )


class Graph:
    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.outputs: list[str] = []
        self.param_values: dict[str, np.ndarray] = {}
        self.meta = GraphMeta()
        self._by_name: dict[str, Node] = {}
        self._counter = 0

    # -- construction ------------------------------------------------------------------------
    def append(self, node: Node) -> Node:
        """Adds a node as given (the parser's path); `verify` checks it later."""
        if node.name in self._by_name:
            raise VerifyError(f"value %{node.name} is defined twice")
        self.nodes.append(node)
        self._by_name[node.name] = node
        return node

    def add(
        self,
        kind: str,
        *operands: Node | str,
        name: str | None = None,
        type: TensorType | None = None,
        **attrs: AttrValue,
    ) -> Node:
        """Adds an op, inferring its result type (pass `type` for reshape, cast, sources)."""
        if kind not in REGISTRY:
            raise VerifyError(f"unknown op '{kind}'")
        op = REGISTRY[kind]
        names = tuple(o.name if isinstance(o, Node) else o for o in operands)
        attrs = {k: _freeze(v) for k, v in attrs.items()}
        name = name if name is not None else self.fresh_name()
        for o in names:
            if o not in self._by_name:
                raise VerifyError(f"%{name} = {kind}: operand %{o} is not defined")
        if op.needs_result_type and type is None:
            raise VerifyError(f"%{name} = {kind} needs an explicit result type")
        call = OpCall(kind, name, tuple(self[n].type for n in names), attrs, type, names)
        result = check_call(op, call, where=f"%{name} = {kind}")
        return self.append(Node(name, kind, names, attrs, result))

    def fresh_name(self) -> str:
        while str(self._counter) in self._by_name:
            self._counter += 1
        self._counter += 1
        return str(self._counter - 1)

    def input(self, name: str, type: TensorType) -> Node:
        return self.add("input", name=name, type=type)

    def param(self, name: str, type: TensorType, value: np.ndarray | None = None) -> Node:
        node = self.add("param", name=name, type=type)
        if value is not None:
            self.param_values[name] = np.asarray(value)
        return node

    def const(self, value: AttrValue, type: TensorType, name: str | None = None) -> Node:
        return self.add("const", name=name, type=type, value=value)

    def set_outputs(self, *values: Node | str) -> None:
        self.outputs = [v.name if isinstance(v, Node) else v for v in values]

    # -- queries -----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise VerifyError(f"value %{name} is not defined") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Graph)
            and self.name == other.name
            and self.nodes == other.nodes
            and self.outputs == other.outputs
        )

    def of_kind(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]

    def call(self, node: Node) -> OpCall:
        """The view of `node` that op rules take."""
        return OpCall(
            node.kind,
            node.name,
            tuple(self._by_name[o].type for o in node.operands),
            node.attrs,
            node.type,
            node.operands,
        )

    def users(self) -> Mapping[str, list[str]]:
        result: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for o in n.operands:
                result[o].append(n.name)
        return result

    def to_networkx(self) -> nx.MultiDiGraph:
        """Values as nodes (with `kind`, `type`); one edge per operand use, tagged with its index."""
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        for n in self.nodes:
            g.add_node(n.name, kind=n.kind, type=str(n.type))
            for i, o in enumerate(n.operands):
                g.add_edge(o, n.name, operand=i)
        return g


def _freeze(value) -> AttrValue:
    """Lists become tuples so attributes are hashable and compare by value."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value
