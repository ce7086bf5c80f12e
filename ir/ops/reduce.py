"""reduce: sum, max or min over named axes (softmax pieces, norms, router top-1 statistics)."""

from __future__ import annotations

import numpy as np

from ir.ops.base import AttrSpec, OpCost, OpDef, register, require

_REDUCERS = {"sum": np.sum, "max": np.max, "min": np.min}


@register
class Reduce(OpDef):
    kind = "reduce"
    min_operands = max_operands = 1
    attrs = {
        "op": AttrSpec("str", choices=tuple(_REDUCERS), doc="sum, max or min"),
        "axes": AttrSpec("str_list", doc="the axes to reduce away"),
    }
    summary = "Sum, max or min over the listed axes; the result keeps the other axes in order."
    example = "%m = reduce(%s) {op = max, axes = [Sk]} : f32[B=1, H=8, Sq=8]"

    def infer(self, call):
        (x,) = call.operands
        axes = call.attrs["axes"]
        require(len(axes) > 0, "reduce needs at least one axis")
        require(len(set(axes)) == len(axes), f"reduce axes [{' '.join(axes)}] repeat a name")
        for name in axes:
            require(name in x.names, f"reduce axis '{name}' is not an axis of {call.label(0)} : {x}")
        require(x.dtype.kind != "bool", "reduce needs a numeric operand, got bool")
        return x.with_axes(a for a in x.axes if a.name not in axes)

    def evaluate(self, args, call, ctx):
        (x,) = call.operands
        dims = tuple(x.index(n) for n in call.attrs["axes"])
        work = args[0].astype(np.int64) if x.dtype.is_int else args[0]
        return _REDUCERS[call.attrs["op"]](work, axis=dims)

    def cost(self, call):
        (x,) = call.operands
        return OpCost(x.numel, x.nbytes, call.out.nbytes)
