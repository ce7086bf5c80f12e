"""The verifier: every node's operands exist earlier, its attributes fit, its type rule agrees.

Errors name the op, the value and the mismatch, prefixed with `FILE:LINE:` when the graph came
from text, e.g. `layer.tir:12: %s = einsum: axis 'K' has size 16 in %q but 32 in %k`.
"""

from __future__ import annotations

import re

from ir.errors import TypeRuleError, VerifyError
from ir.graph import NAME_RE, Graph, Node
from ir.ops import OpCall, OpDef
from ir.ops.base import REGISTRY
from ir.types import TensorType


def arity_text(op: OpDef) -> str:
    """How many operands an op takes, in words."""
    if op.max_operands is None:
        return f"at least {op.min_operands}"
    if op.min_operands == op.max_operands:
        return str(op.min_operands)
    return f"{op.min_operands} to {op.max_operands}"


def _type_mismatch(declared: TensorType, inferred: TensorType) -> str | None:
    if declared == inferred:
        return None
    if declared.dtype != inferred.dtype:
        return f"result dtype is {declared.dtype} but the op gives {inferred.dtype}"
    if declared.names != inferred.names:
        return (
            f"result axes are [{' '.join(declared.names)}] but the op gives "
            f"[{' '.join(inferred.names)}] ({inferred})"
        )
    for d, i in zip(declared.axes, inferred.axes, strict=True):
        if d.size != i.size:
            return f"result axis '{d.name}' has size {d.size} but the op gives {i.size}"
    return f"result type is {declared} but the op gives {inferred}"


_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words the grammar reads as something other than a name.
RESERVED_WORDS = {"true", "false", "inf", "nan", "graph", "return"}


# Result types whose axis names and sizes passed _check_names (a model repeats a few dozen types).
_NAMED_TYPES: set[TensorType] = set()


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
    if len(_NAMED_TYPES) >= _CHECKED_LIMIT:
        _NAMED_TYPES.clear()
    _NAMED_TYPES.add(node.type)


# Successful checks by (kind, operand types, attributes, declared type): a type rule is a pure
# function of those, and a model repeats the same few dozen calls in every layer.
_CHECKED: dict[tuple, TensorType] = {}
_CHECKED_LIMIT = 100_000


def check_call(op: OpDef, call: OpCall, where: str) -> TensorType:
    """Checks one op use and returns its result type; raises VerifyError prefixed by `where`."""
    key = _check_key(call)
    hit = _CHECKED.get(key) if key is not None else None
    if hit is not None:
        return hit
    result = _check_call(op, call, where)
    if key is not None:
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED[key] = result
    return result


def _check_key(call: OpCall) -> tuple | None:
    """The memo key of a call, or None when an attribute is not a plain value. Attributes enter by
    their text, so True and 1, or 0.0 and -0.0, which are equal as keys, stay apart."""
    if not all(isinstance(v, (bool, int, float, str, tuple)) or v is None for v in call.attrs.values()):
        return None
    return (call.kind, call.operands, repr(tuple(call.attrs.items())), call.result)


def _check_call(op: OpDef, call: OpCall, where: str) -> TensorType:
    try:
        n = len(call.operands)
        if n < op.min_operands or (op.max_operands is not None and n > op.max_operands):
            raise TypeRuleError(f"takes {arity_text(op)} operands, got {n}")
        for key in call.attrs:
            if key not in op.attrs:
                allowed = ", ".join(op.attrs) or "none"
                raise TypeRuleError(f"unknown attribute '{key}' (allowed: {allowed})")
        for key, spec in op.attrs.items():
            if key in call.attrs:
                spec.check(key, call.attrs[key])
            elif spec.required:
                raise TypeRuleError(f"missing attribute '{key}' ({spec.doc})")
        inferred = op.infer(call)
        if call.result is not None:
            mismatch = _type_mismatch(call.result, inferred)
            if mismatch:
                raise TypeRuleError(mismatch)
        return inferred
    except TypeRuleError as e:
        raise VerifyError(f"{where}: {e}") from None


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
        call = graph.call(node)
        key = _check_key(call)
        if key is None or key not in _CHECKED:  # else check_call would return the memo's result
            check_call(REGISTRY[node.kind], call, _where(node, source))
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
