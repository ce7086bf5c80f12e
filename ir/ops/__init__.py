"""The op registry; importing this package registers every op kind."""

from ir.ops import (  # noqa: F401
    collectives,
    einsum,
    elementwise,
    indexing,
    layout,
    moe,
    reduce,
    scan,
    select,
    sources,
)
from ir.ops.base import REGISTRY, AttrSpec, AttrValue, EvalContext, OpCall, OpCost, OpDef, lookup

__all__ = ["REGISTRY", "AttrSpec", "AttrValue", "EvalContext", "OpCall", "OpCost", "OpDef", "lookup"]
