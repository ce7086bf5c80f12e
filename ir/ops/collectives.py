"""Collectives across chips, inserted by tensor-parallel sharding.

A graph with collectives describes one chip of an SPMD program; the interpreter runs all ranks
side by side and these ops are where the ranks meet.
"""

from __future__ import annotations

import numpy as np

from ir.errors import InterpretError
from ir.ops.base import AttrSpec, OpCost, OpDef, register, require
from ir.types import Axis

_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class _Collective(OpDef):
    min_operands = max_operands = 1

    def _check_ranks(self, call, ctxs) -> int:
        chips = call.attrs["chips"]
        if len(ctxs) != chips:
            raise InterpretError(
                f"%{call.name} = {call.kind} spans {chips} chips but the graph runs on {len(ctxs)} ranks"
            )
        return chips

    def _base_infer(self, call) -> None:
        require(call.attrs["chips"] >= 1, f"chips must be positive, got {call.attrs['chips']}")

    def _split_infer(self, call, factor_in: bool):
        self._base_infer(call)
        (x,) = call.operands
        axis, chips = call.attrs["axis"], call.attrs["chips"]
        require(axis in x.names, f"axis '{axis}' is not an axis of {call.label(0)} : {x}")
        size = x.size(axis)
        if factor_in:
            require(size % chips == 0, f"axis '{axis}' of size {size} does not split over {chips} chips")
            new = size // chips
        else:
            new = size * chips
        return x.with_axes(Axis(a.name, new) if a.name == axis else a for a in x.axes)

    def evaluate(self, args, call, ctx):
        raise InterpretError(f"%{call.name} = {call.kind} needs every rank at once")


_CHIPS = AttrSpec("int", doc="number of chips in the group")
_OP = AttrSpec("str", choices=tuple(_COMBINE), doc="sum, max or min")
_AXIS = AttrSpec("str", doc="the axis split or joined across chips")


@register
class AllReduce(_Collective):
    kind = "all_reduce"
    attrs = {"op": _OP, "chips": _CHIPS}
    summary = "Every chip gets the elementwise sum (max, min) of all chips' tensors."
    example = "%y = all_reduce(%partial) {op = sum, chips = 4} : f32[B=1, S=8, D=64]"

    def infer(self, call):
        self._base_infer(call)
        return call.operands[0]

    def evaluate_ranks(self, args, call, ctxs):
        self._check_ranks(call, ctxs)
        total = _COMBINE[call.attrs["op"]].reduce([a[0] for a in args])
        return [total.copy() for _ in args]

    def cost(self, call):
        """Ring all-reduce: a reduce-scatter then an all-gather, 2(n-1) steps; each chip combines
        (n-1)/n of the tensor and sends 2(n-1)/n of it, 1/n per step."""
        (x,) = call.operands
        n = call.attrs["chips"]
        return OpCost(x.numel * (n - 1) // n, x.nbytes, x.nbytes, 2 * x.nbytes * (n - 1) // n, 2 * (n - 1))


@register
class ReduceScatter(_Collective):
    kind = "reduce_scatter"
    attrs = {"op": _OP, "axis": _AXIS, "chips": _CHIPS}
    summary = "Combine all chips' tensors; chip r keeps the r-th of `chips` equal parts of `axis`."
    example = "%y = reduce_scatter(%p) {op = sum, axis = D, chips = 4} : f32[B=1, S=8, D=16]"

    def infer(self, call):
        return self._split_infer(call, factor_in=True)

    def evaluate_ranks(self, args, call, ctxs):
        chips = self._check_ranks(call, ctxs)
        total = _COMBINE[call.attrs["op"]].reduce([a[0] for a in args])
        k = call.operands[0].index(call.attrs["axis"])
        return np.split(total, chips, axis=k)

    def cost(self, call):
        """Ring reduce-scatter: n-1 steps; each chip combines and sends (n-1)/n of its input."""
        (x,) = call.operands
        n = call.attrs["chips"]
        return OpCost(x.numel * (n - 1) // n, x.nbytes, call.out.nbytes, x.nbytes * (n - 1) // n, n - 1)


@register
class AllGather(_Collective):
    kind = "all_gather"
    attrs = {"axis": _AXIS, "chips": _CHIPS}
    summary = "Concatenate every chip's tensor along `axis`, in rank order, on every chip."
    example = "%y = all_gather(%x) {axis = D, chips = 4} : f32[B=1, S=8, D=64]"

    def infer(self, call):
        return self._split_infer(call, factor_in=False)

    def evaluate_ranks(self, args, call, ctxs):
        self._check_ranks(call, ctxs)
        k = call.operands[0].index(call.attrs["axis"])
        joined = np.concatenate([a[0] for a in args], axis=k)
        return [joined.copy() for _ in args]

    def cost(self, call):
        """Ring all-gather: n-1 steps; each chip receives the (n-1)/n of the result it does not hold."""
        n = call.attrs["chips"]
        out = call.out.nbytes
        return OpCost(0, call.operands[0].nbytes, out, out * (n - 1) // n, n - 1)


@register
class Send(OpDef):
    """A pipeline stage hands its activations to the next stage's chips (point to point).

    The value is unchanged: each stage is its own graph, and the next one takes the sent tensor as
    an input. The cost is one transfer of the tensor over the link, from each chip of the stage's
    tensor-parallel group to its peer in the next group.
    """

    kind = "send"
    min_operands = max_operands = 1
    attrs = {"stage": AttrSpec("int", doc="the pipeline stage that receives the tensor")}
    summary = "Hand a tensor to the next pipeline stage's chips over the chip links (value unchanged)."
    example = "%h_out = send(%h) {stage = 1} : bf16[B=1, S=8, D=64]"

    def infer(self, call):
        require(call.attrs["stage"] >= 1, f"stage must be at least 1, got {call.attrs['stage']}")
        return call.operands[0]

    def evaluate(self, args, call, ctx):
        return args[0].copy()

    def cost(self, call):
        (x,) = call.operands
        return OpCost(0, x.nbytes, 0, x.nbytes, 1)
