"""Mixture-of-experts routing as grouped work: dispatch, bincount, grouped_einsum, combine.

Why not gather each routed slot's expert weights: that materialises T x k copies of an expert
(HBM traffic and capacity grow with the prompt). Real MoE kernels group tokens by expert instead,
so each expert's weights are read once per pass and its GEMM covers the tokens routed to it.

Shapes stay static while routing is data dependent. The design:

- `dispatch(x, idx)` orders the routed slots by expert: the stable sort of `idx` (flattened in
  its axis order) puts every slot of expert 0 first, then expert 1, ...; slots of one expert keep
  token order. Row r of the result is the token row of x that sorted slot r reads, so the rows
  axis R has exactly T x k entries (no padding to a capacity, nothing dropped).
- `bincount(idx)` counts the slots per expert: the runtime group sizes.
- `grouped_einsum(rows, w, counts)` contracts each contiguous group of rows with its expert's
  slice of the whole stacked weight [E, ...]: FLOPs are rows x one expert's (T x k x one expert),
  and each expert's weights are read at most once.
- `combine(y, idx, weights)` returns each token's weighted sum over its k slots, finding slot
  (token, j)'s row by the same stable sort.

dispatch and combine recompute the order from `idx` (the sort is deterministic), so no
permutation value has to be carried between them.
"""

from __future__ import annotations

import math
import string

import numpy as np

from ir.errors import InterpretError
from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require, same_sizes
from ir.ops.einsum import parse_equation
from ir.types import Axis, TensorType

# The grouped contractions: einsum's FLOP rule per row, over one group's slice of the weight.
CONTRACTIONS = frozenset({"einsum", "grouped_einsum"})


def slot_order(idx: np.ndarray) -> np.ndarray:
    """Flat slot indices sorted by expert, stably (the order dispatch and combine share)."""
    return np.argsort(idx.reshape(-1), kind="stable")


def _check_index(call: OpCall, i: int) -> TensorType:
    t = call.operands[i]
    require(t.dtype.is_int, f"{call.label(i)} must be an integer index, got {t.dtype}")
    require(t.rank > 0, f"{call.label(i)} must have at least one axis")
    return t


@register
class Dispatch(OpDef):
    kind = "dispatch"
    min_operands = max_operands = 2
    attrs = {"axis": AttrSpec("str", doc="the result's rows axis (one row per routed slot)")}
    summary = (
        "The token rows of x each routed slot reads, ordered by expert: the stable sort of the index "
        "(expert per slot) groups every expert's slots, in token order. Index axes that x has are "
        "token axes; the others are slot axes (x may have them all: each slot then reads its own "
        "element, so dispatch(idx, idx) is each row's expert). Result: rows `axis` = slots, then x's "
        "other axes."
    )
    example = "%rows = dispatch(%x, %idx) {axis = R} : bf16[R=16, D=64]"

    def infer(self, call):
        x, idx = call.operands[0], _check_index(call, 1)
        axis = call.attrs["axis"]
        same_sizes(call.labelled())
        require(axis not in x.names and axis not in idx.names, f"rows axis '{axis}' is already an axis")
        feature = [a for a in x.axes if a.name not in idx.names]
        return x.with_axes([Axis(axis, idx.numel), *feature])

    def evaluate(self, args, call, ctx):
        x, idx = call.operands
        tokens = [n for n in idx.names if n in x.names]
        feature = [n for n in x.names if n not in idx.names]
        # x laid out as [token axes in idx order, feature], broadcast over the slot axes
        moved = np.transpose(args[0], [x.index(n) for n in tokens + feature])
        shape = [idx.size(n) if n in x.names else 1 for n in idx.names] + [x.size(n) for n in feature]
        expand = moved.reshape(shape)
        per_slot = np.broadcast_to(expand, idx.shape + tuple(x.size(n) for n in feature))
        flat = per_slot.reshape(idx.numel, *(x.size(n) for n in feature))
        return flat[slot_order(args[1])]

    def cost(self, call):
        """A TensorDMA gather: reads the index and one token row per slot, writes the rows."""
        return OpCost(0, call.operands[1].nbytes + call.out.nbytes, call.out.nbytes)


@register
class Bincount(OpDef):
    kind = "bincount"
    min_operands = max_operands = 1
    needs_result_type = True
    summary = (
        "How many elements of an integer index equal each value 0 .. n-1, n the size of the "
        "result's one axis (the routed slots per expert, the group sizes of a grouped_einsum)."
    )
    example = "%counts = bincount(%idx) : i32[E=8]"

    def infer(self, call):
        _check_index(call, 0)
        out = call.out
        require(out.dtype.is_int and out.rank == 1, f"bincount gives a 1-axis integer count, not {out}")
        return out

    def evaluate(self, args, call, ctx):
        n = call.out.shape[0]
        values = args[0].reshape(-1)
        if values.size and (values.min() < 0 or values.max() >= n):
            raise InterpretError(
                f"%{call.name} = bincount: {call.label(0)} holds values in [{values.min()}, "
                f"{values.max()}] but the result counts {n}"
            )
        return np.bincount(values.astype(np.int64), minlength=n)

    def cost(self, call):
        """One compare-and-count per index element."""
        (idx,) = call.operands
        return OpCost(idx.numel, idx.nbytes, call.out.nbytes)


def grouped_axes(call: OpCall) -> tuple[str, str]:
    """(rows axis of x, group axis of w) of a grouped_einsum, checked."""
    inputs, output = parse_equation(call.attrs["eq"])
    group = call.attrs["group"]
    require(len(inputs) == 2, f"grouped_einsum equation {call.attrs['eq']!r} must name 2 operands")
    x, w = inputs
    require(
        group in w and group not in x and group not in output,
        f"group axis '{group}' must be an axis of the weight only, not of the rows or the result",
    )
    rows = [a for a in x if a not in w]
    require(
        len(rows) == 1 and rows[0] in output,
        f"the rows operand needs exactly one axis the weight lacks, kept in the result; got {rows}",
    )
    return rows[0], group


@register
class GroupedEinsum(OpDef):
    kind = "grouped_einsum"
    min_operands = max_operands = 3
    attrs = {
        "eq": AttrSpec("str", doc="the rows and the stacked weight's axes, '->' result axes"),
        "group": AttrSpec("str", doc="the weight's group (expert) axis; each row uses one of its slices"),
        "top_k": AttrSpec("int", doc="distinct groups per token (rows / top_k tokens); costing only"),
    }
    summary = (
        "An einsum per group of rows: the rows operand is sorted by group and `counts` (integer, over "
        "the group axis) says how many consecutive rows each group takes; they contract with that "
        "group's slice of the stacked weight. FLOPs are einsum's with the group axis left out."
    )
    example = (
        '%y = grouped_einsum(%rows, %w, %counts) {eq = "R D, E F D -> R F", group = E, top_k = 2} '
        ": f32[R=16, F=32]"
    )

    def infer(self, call):
        x, w, counts = call.operands
        rows, group = grouped_axes(call)
        inputs, output = parse_equation(call.attrs["eq"])
        for i, (axes, t) in enumerate(zip(inputs, (x, w), strict=True)):
            require(
                tuple(axes) == t.names,
                f"equation lists axes [{' '.join(axes)}] for {call.label(i)} but its type is {t}",
            )
        require(
            x.dtype == w.dtype and x.dtype.kind != "bool",
            f"grouped_einsum operands must share one numeric dtype, got {x.dtype} and {w.dtype}",
        )
        require(
            counts.dtype.is_int and counts.names == (group,) and counts.size(group) == w.size(group),
            f"counts {call.label(2)} : {counts} must be an integer [{group}={w.size(group)}]",
        )
        k = call.attrs["top_k"]
        require(
            1 <= k <= w.size(group) and x.size(rows) % k == 0,
            f"top_k = {k} must be in [1, {w.size(group)}] and divide the {x.size(rows)} rows",
        )
        sizes = same_sizes([(call.label(0), x), (call.label(1), w)])
        require(len(set(output)) == len(output), f"result axes [{' '.join(output)}] repeat a name")
        dtype = x.dtype
        if call.result is not None:
            require(
                call.result.dtype.kind == dtype.kind or dtype.is_int and call.result.dtype.is_float,
                f"grouped_einsum of {dtype} operands cannot produce {call.result.dtype}",
            )
            dtype = call.result.dtype
        return TensorType(dtype, tuple(Axis(n, sizes[n]) for n in output))

    def evaluate(self, args, call, ctx):
        x, w, _ = call.operands
        rows, group = grouped_axes(call)
        inputs, output = parse_equation(call.attrs["eq"])
        counts = args[2].astype(np.int64)
        if counts.min() < 0 or counts.sum() != x.size(rows):
            raise InterpretError(
                f"%{call.name} = grouped_einsum: counts {call.label(2)} sum to {counts.sum()} "
                f"(min {counts.min()}) but there are {x.size(rows)} rows"
            )
        letters = {n: string.ascii_letters[i] for i, n in enumerate(dict.fromkeys(inputs[0] + inputs[1]))}
        w_axes = [a for a in inputs[1] if a != group]
        spec = "".join(letters[n] for n in inputs[0]) + "," + "".join(letters[n] for n in w_axes)
        spec += "->" + "".join(letters[n] for n in output)
        work = np.int64 if x.dtype.is_int else np.float32
        xs, ws = args[0].astype(work), args[1].astype(work)
        out = np.zeros(call.out.shape, dtype=work)
        r_in, r_out, g = x.index(rows), call.out.index(rows), w.index(group)
        start = 0
        for e, n in enumerate(counts):
            if n:
                part = np.take(xs, np.arange(start, start + n), axis=r_in)
                where = (slice(None),) * r_out + (slice(start, start + n),)
                out[where] = np.einsum(spec, part, np.take(ws, e, axis=g))
                start += n
        return out

    def cost(self, call):
        """2 x rows x one group's axes (einsum's rule without the group axis); reads the rows, the
        counts and at most the whole stacked weight (each group once; the mapping reads only the
        groups it expects routing to hit), writes the result."""
        x, w, counts = call.operands
        _, group = grouped_axes(call)
        sizes = same_sizes([(call.label(0), x), (call.label(1), w)])
        flops = 2 * math.prod(s for n, s in sizes.items() if n != group)
        return OpCost(flops, x.nbytes + w.nbytes + counts.nbytes, call.out.nbytes)


@register
class Combine(OpDef):
    kind = "combine"
    min_operands = max_operands = 3
    attrs = {
        "axis": AttrSpec("str", doc="the rows axis of the per-slot results (as dispatch made it)"),
        "slots": AttrSpec("str_list", doc="the index's slot axes, summed away"),
    }
    summary = (
        "Each token's weighted sum over its routed slots: slot s of the index reads row r of y, where "
        "r is s's place in dispatch's order (the stable sort of the index); `weights` has the index's "
        "axes. Result: the index's token axes, then y's axes other than the rows."
    )
    example = "%y = combine(%out, %idx, %gates) {axis = R, slots = [Kk]} : f32[B=1, S=8, D=64]"

    def infer(self, call):
        y, idx, weights = call.operands
        _check_index(call, 1)
        axis, slots = call.attrs["axis"], call.attrs["slots"]
        require(
            axis in y.names and y.size(axis) == idx.numel,
            f"{call.label(0)} : {y} needs rows axis '{axis}' of size {idx.numel} (one row per slot)",
        )
        require(
            len(slots) > 0 and all(s in idx.names for s in slots),
            f"slots [{' '.join(slots)}] must be axes of {call.label(1)} : {idx}",
        )
        require(
            weights.axes == idx.axes and weights.dtype.is_float,
            f"weights {call.label(2)} : {weights} must be float with the index's axes {idx}",
        )
        require(y.dtype.is_float, f"combine needs float rows, got {y.dtype}")
        tokens = [a for a in idx.axes if a.name not in slots]
        feature = [a for a in y.axes if a.name != axis]
        names = [a.name for a in tokens + feature]
        require(len(set(names)) == len(names), f"result axes [{' '.join(names)}] repeat a name")
        return TensorType(y.dtype, tuple(tokens + feature))

    def evaluate(self, args, call, ctx):
        y, idx, _ = call.operands
        axis, slots = call.attrs["axis"], call.attrs["slots"]
        feature = [n for n in y.names if n != axis]
        rows = np.transpose(args[0], [y.index(axis)] + [y.index(n) for n in feature]).astype(np.float32)
        place = np.empty(idx.numel, dtype=np.int64)
        place[slot_order(args[1])] = np.arange(idx.numel)
        per_slot = rows[place].reshape(idx.shape + tuple(y.size(n) for n in feature))
        weights = args[2].astype(np.float32).reshape(idx.shape + (1,) * len(feature))
        return (per_slot * weights).sum(axis=tuple(idx.index(s) for s in slots))  # tokens, feature

    def cost(self, call):
        """A multiply and an add per slot element; reads the rows, index and weights, writes the sum."""
        y, idx, weights = call.operands
        return OpCost(2 * y.numel, y.nbytes + idx.nbytes + weights.nbytes, call.out.nbytes)
