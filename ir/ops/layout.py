"""Layout ops: reshape (a free view), transpose, slice and concat along a named axis."""

from __future__ import annotations

import numpy as np

from ir.ops.base import AttrSpec, OpCost, OpDef, register, require, same_sizes
from ir.ops.broadcast import align
from ir.types import Axis


@register
class Reshape(OpDef):
    kind = "reshape"
    min_operands = max_operands = 1
    needs_result_type = True
    summary = (
        "Reinterpret the elements, row-major, under new axes (split H into G x Hkv, rename S to Sq). "
        "A view: it moves no bytes."
    )
    example = "%q5 = reshape(%q) : f32[B=1, S=8, H=8, R=2, Kp=32]"

    def infer(self, call):
        (x,) = call.operands
        require(
            call.out.dtype == x.dtype,
            f"reshape keeps the dtype: {call.label(0)} is {x.dtype} but the result is {call.out.dtype}",
        )
        require(
            call.out.numel == x.numel,
            f"reshape keeps the element count: {call.label(0)} : {x} has {x.numel}, "
            f"the result {call.out} has {call.out.numel}",
        )
        return call.out

    def evaluate(self, args, call, ctx):
        return args[0].reshape(call.out.shape)

    def cost(self, call):
        """A view: no bytes move."""
        return OpCost()


@register
class Transpose(OpDef):
    kind = "transpose"
    min_operands = max_operands = 1
    needs_result_type = True
    summary = "Reorder the axes into the order the result type lists them."
    example = "%kt = transpose(%k) : f32[B=1, H=8, S=8, K=64]"

    def infer(self, call):
        (x,) = call.operands
        require(
            call.out.dtype == x.dtype and sorted(call.out.axes, key=str) == sorted(x.axes, key=str),
            f"transpose result {call.out} must hold the same axes and dtype as {call.label(0)} : {x}",
        )
        return call.out

    def evaluate(self, args, call, ctx):
        return align(args[0], call.operands[0].names, call.out.names)


@register
class Slice(OpDef):
    kind = "slice"
    min_operands = max_operands = 1
    attrs = {
        "axis": AttrSpec("str", doc="the axis to cut"),
        "start": AttrSpec("int", doc="first index kept"),
        "stop": AttrSpec("int", doc="one past the last index kept"),
    }
    summary = "Keep indices [start, stop) of one axis (the LM head's last position in prefill)."
    example = "%last = slice(%x) {axis = S, start = 7, stop = 8} : f32[B=1, S=1, D=64]"

    def infer(self, call):
        (x,) = call.operands
        axis, start, stop = call.attrs["axis"], call.attrs["start"], call.attrs["stop"]
        require(axis in x.names, f"slice axis '{axis}' is not an axis of {call.label(0)} : {x}")
        size = x.size(axis)
        require(
            0 <= start < stop <= size,
            f"slice [{start}, {stop}) is not a non-empty range inside axis '{axis}' of size {size}",
        )
        return x.with_axes(Axis(a.name, stop - start) if a.name == axis else a for a in x.axes)

    def evaluate(self, args, call, ctx):
        k = call.operands[0].index(call.attrs["axis"])
        index = [slice(None)] * call.operands[0].rank
        index[k] = slice(call.attrs["start"], call.attrs["stop"])
        return args[0][tuple(index)]

    def cost(self, call):
        """Reads only the kept part."""
        return OpCost(0, call.out.nbytes, call.out.nbytes)


@register
class Concat(OpDef):
    kind = "concat"
    min_operands, max_operands = 1, None
    attrs = {"axis": AttrSpec("str", doc="the axis to join along")}
    summary = "Join operands along one axis; every other axis must match."
    example = "%kv = concat(%past, %new) {axis = S} : bf16[B=1, H=8, S=9, K=64]"

    def infer(self, call):
        axis = call.attrs["axis"]
        first = call.operands[0]
        for i, t in enumerate(call.operands):
            require(axis in t.names, f"concat axis '{axis}' is not an axis of {call.label(i)} : {t}")
            require(
                t.names == first.names and t.dtype == first.dtype,
                f"concat operands must have the same axes and dtype: {call.label(0)} : {first}, "
                f"{call.label(i)} : {t}",
            )
        same_sizes(
            [(label, t.with_axes(a for a in t.axes if a.name != axis)) for label, t in call.labelled()]
        )
        total = sum(t.size(axis) for t in call.operands)
        return first.with_axes(Axis(a.name, total) if a.name == axis else a for a in first.axes)

    def evaluate(self, args, call, ctx):
        return np.concatenate(args, axis=call.operands[0].index(call.attrs["axis"]))
