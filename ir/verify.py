"""The verifier: every node's operands exist earlier, its attributes fit, its type rule agrees.

Errors name the op, the value and the mismatch, prefixed with `FILE:LINE:` when the graph came
from text, e.g. `layer.tir:12: %s = einsum: axis 'K' has size 16 in %q but 32 in %k`.
"""

from __future__ import annotations

import re

from ir.errors import TypeRuleError, VerifyError
from ir.graph import NAME_RE, Graph, Node
from ir.ops.base import REGISTRY
from ir.typecheck import check_call
from ir.types import TensorType

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words the grammar reads as something other than a name.
RESERVED_WORDS = {"true", "false", "inf", "nan", "graph", "return"}


# Result types whose axis names and sizes passed _check_names (a model repeats a few dozen types).
_NAMED_TYPES: set[TensorType] = set()
_NAMED_TYPES_LIMIT = 100_000


def _check_names(node: Node) -> None:
    """Names must read back from text: value names [A-Za-z0-9_.]+, axis names identifiers."""
    if not NAME_RE.fullmatch(node.name):
        raise TypeRuleError(f"value name {node.name!r} may use only letters, digits, '_' and '.'")
    if node.type in _NAMED_TYPES:
        return
    for axis in node.type.axes:
        if not _AXIS_NAME.fullmatch(axis.name) or axis.name in RESERVED_WORDS:
            raise TypeRuleError(f"axis name {axis.name!r} is not an identifier")
        if axis.size <= 0:
            raise TypeRuleError(f"axis '{axis.name}' must have a positive size, got {axis.size}")
    if len(set(node.type.names)) != node.type.rank:
        raise TypeRuleError(f"result type {node.type} repeats an axis name")
    if len(_NAMED_TYPES) >= _NAMED_TYPES_LIMIT:
        _NAMED_TYPES.clear()
    _NAMED_TYPES.add(node.type)


def verify(graph: Graph, source: str | None = None) -> None:
    """Raises VerifyError at the first ill-formed node or output."""
    defined: set[str] = set()
    for node in graph.nodes:
        if node.kind not in REGISTRY:
            raise VerifyError(f"{_where(node, source)}: unknown op '{node.kind}'")
        for o in node.operands:
            if o not in defined:
                raise VerifyError(f"{_where(node, source)}: operand %{o} is not defined before it is used")
        try:
            _check_names(node)
        except TypeRuleError as e:
            raise VerifyError(f"{_where(node, source)}: {e}") from None
        check_call(REGISTRY[node.kind], graph.call(node), _where(node, source))
        defined.add(node.name)
    if not graph.outputs:
        raise VerifyError(f"{source + ': ' if source else ''}graph {graph.name} returns nothing")
    for o in graph.outputs:
        if o not in defined:
            raise VerifyError(
                f"{source + ': ' if source else ''}graph {graph.name} returns %{o}, which is not defined"
            )


def _where(node: Node, source: str | None) -> str:
    prefix = ""
    if source is not None:
        prefix = f"{source}:{node.line}: " if node.line is not None else f"{source}: "
    return f"{prefix}%{node.name} = {node.kind}"
