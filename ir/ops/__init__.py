"""The op registry; importing this package registers every op kind."""

from ir.ops import collectives, einsum, elementwise, indexing, layout, reduce, select, sources  # noqa: F401
from ir.ops.base import REGISTRY, AttrSpec, AttrValue, EvalContext, OpCall, OpCost, OpDef, lookup

__all__ = ["REGISTRY", "AttrSpec", "AttrValue", "EvalContext", "OpCall", "OpCost", "OpDef", "lookup"]
