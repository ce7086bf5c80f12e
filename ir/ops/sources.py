"""Ops with no operands: graph inputs, weights (params), constants and index ramps (iota)."""

from __future__ import annotations

import numpy as np

from ir.errors import InterpretError
from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require
from ir.types import TensorType


class _Source(OpDef):
    needs_result_type = True

    def infer(self, call: OpCall) -> TensorType:
        return call.out


def _feed(store, call: OpCall, what: str) -> np.ndarray:
    if call.name not in store:
        raise InterpretError(f"no value given for {what} %{call.name} : {call.out}")
    array = np.asarray(store[call.name])
    if array.shape != call.out.shape:
        raise InterpretError(
            f"{what} %{call.name} expects shape {list(call.out.shape)} ({call.out}), got {list(array.shape)}"
        )
    return array


@register
class Input(_Source):
    kind = "input"
    summary = "A graph input (token ids, positions, a KV cache), fed by name when the graph runs."
    example = "%ids = input() : i32[B=1, S=8]"

    def evaluate(self, args, call, ctx):
        return _feed(ctx.inputs, call, "input")

    def cost(self, call):
        """Free: the value already sits in memory."""
        return OpCost()


@register
class Param(_Source):
    kind = "param"
    summary = "A weight, bound by name to a tensor (values are optional: costing needs only the type)."
    example = "%w_q = param() : bf16[D=4096, H=32, K=128]"

    def evaluate(self, args, call, ctx):
        return _feed(ctx.params, call, "param")

    def cost(self, call):
        """Free: the value already sits in memory."""
        return OpCost()


@register
class Const(_Source):
    kind = "const"
    attrs = {
        "value": AttrSpec("scalar", required=False, doc="one value splatted over the type"),
        "values": AttrSpec("scalar_list", required=False, doc="every element, row-major"),
    }
    summary = "A constant: one `value` splatted over its type, or all `values` row-major."
    example = "%scale = const() {value = 0.125} : f32[]"

    def infer(self, call):
        has_value, has_values = "value" in call.attrs, "values" in call.attrs
        require(has_value != has_values, "const needs exactly one of 'value' or 'values'")
        if has_values:
            n = len(call.attrs["values"])
            require(
                n == call.out.numel,
                f"'values' has {n} elements but {call.out} holds {call.out.numel}",
            )
        return call.out

    def evaluate(self, args, call, ctx):
        # Values stay in float64 / int64 / bool here; the interpreter rounds them onto the
        # dtype like any other result, so a float constant of an int type rounds as a cast does.
        if "value" in call.attrs:
            return np.full(call.out.shape, call.attrs["value"])
        return np.array(call.attrs["values"], dtype=np.float64).reshape(call.out.shape)

    def cost(self, call):
        """Writes its result; reads nothing."""
        return OpCost(0, 0, call.out.nbytes)


@register
class Iota(_Source):
    kind = "iota"
    attrs = {"axis": AttrSpec("str", doc="the axis whose index each element holds")}
    summary = "Each element holds its index along `axis` (positions, mask coordinates)."
    example = "%i = iota() {axis = Sq} : i32[Sq=8, Sk=8]"

    def infer(self, call):
        axis = call.attrs["axis"]
        require(axis in call.out.names, f"iota axis '{axis}' is not an axis of {call.out}")
        require(call.out.dtype.kind != "bool", "iota needs a numeric dtype, not bool")
        return call.out

    def evaluate(self, args, call, ctx):
        t = call.out
        k = t.index(call.attrs["axis"])
        ramp = np.arange(t.shape[k]).reshape([-1 if i == k else 1 for i in range(t.rank)])
        return np.broadcast_to(ramp, t.shape).astype(t.dtype.storage)

    def cost(self, call):
        """Writes its result; reads nothing."""
        return OpCost(0, 0, call.out.nbytes)
