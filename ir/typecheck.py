"""One op use checked against its op's definition: arity, attributes and the type rule.

Graph.add checks each op as it is added and ir.verify checks a whole graph; both use check_call,
which memoises successful checks (a model repeats the same few dozen calls in every layer).
"""

from __future__ import annotations

from ir.errors import TypeRuleError, VerifyError
from ir.ops import OpCall, OpDef
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


