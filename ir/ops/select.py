"""topk: indices of the k largest elements along an axis (MoE routing)."""

from __future__ import annotations

import numpy as np

from ir.dtypes import I32
from ir.ops.base import AttrSpec, OpCost, OpDef, register, require
from ir.types import Axis


@register
class TopK(OpDef):
    kind = "topk"
    min_operands = max_operands = 1
    attrs = {
        "axis": AttrSpec("str", doc="the axis to select along"),
        "k": AttrSpec("int", doc="how many indices to keep"),
        "new_axis": AttrSpec("str", doc="the name of the result axis of size k that replaces `axis`"),
    }
    summary = (
        "Indices (i32) of the k largest elements along `axis`, largest first, lower index first on "
        "ties; `new_axis` of size k takes the place of `axis`. Values follow by a `gather`."
    )
    example = "%idx = topk(%probs) {axis = E, k = 2, new_axis = Kk} : i32[B=1, S=8, Kk=2]"

    def infer(self, call):
        (x,) = call.operands
        axis, k, new = call.attrs["axis"], call.attrs["k"], call.attrs["new_axis"]
        require(axis in x.names, f"topk axis '{axis}' is not an axis of {call.label(0)} : {x}")
        require(x.dtype.kind != "bool", "topk needs a numeric operand, got bool")
        require(1 <= k <= x.size(axis), f"k = {k} must be in [1, {x.size(axis)}] (the size of '{axis}')")
        require(new == axis or new not in x.names, f"new_axis '{new}' is already an axis of {x}")
        return x.with_axes(Axis(new, k) if a.name == axis else a for a in x.axes).with_dtype(I32)

    def evaluate(self, args, call, ctx):
        k = call.operands[0].index(call.attrs["axis"])
        order = np.argsort(-args[0].astype(np.float64), axis=k, kind="stable")
        return np.take(order, np.arange(call.attrs["k"]), axis=k)

    def cost(self, call):
        """k compare passes over the input; reads it once, writes the indices."""
        (x,) = call.operands
        return OpCost(call.attrs["k"] * x.numel, x.nbytes, call.out.nbytes)
