"""gather and scatter along one named axis: embeddings, RoPE tables, KV-cache writes.

The index tensor's axes split in two: those that share a name with a table axis are batch axes
(matched element by element, as in take_along_axis), the others replace the indexed axis in the
result, in the index's order. Embedding: table [V, D], index [B, S] -> [B, S, D].
KV write: cache [B, H, P, K], index [B, T] (B shared), updates [B, H, T, K].
"""

from __future__ import annotations

import numpy as np

from ir.errors import InterpretError
from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require
from ir.ops.broadcast import align
from ir.types import TensorType


def gathered_type(
    table: TensorType, index: TensorType, axis: str, table_label: str, index_label: str
) -> TensorType:
    """The type of table[index] along `axis` (see the module docstring)."""
    require(axis in table.names, f"axis '{axis}' is not an axis of {table_label} : {table}")
    require(index.dtype.is_int, f"index {index_label} must be an integer type, got {index.dtype}")
    for a in index.axes:
        if a.name in table.names and a.name != axis:
            size = table.size(a.name)
            require(
                size == a.size,
                f"axis '{a.name}' has size {size} in {table_label} but {a.size} in {index_label}",
            )
    new = [a for a in index.axes if a.name not in table.names or a.name == axis]
    axes = []
    for a in table.axes:
        axes.extend(new if a.name == axis else [a])
    names = [a.name for a in axes]
    require(len(set(names)) == len(names), f"result axes [{' '.join(names)}] repeat a name")
    return table.with_axes(axes)


def _coordinates(table: TensorType, index: TensorType, axis: str, index_array: np.ndarray):
    """Advanced-index tuple that picks the gathered elements, shaped like the result."""
    out = gathered_type(table, index, axis, "table", "index")
    out_names = out.names
    coords = []
    for a in table.axes:
        if a.name == axis:
            coords.append(align(index_array, index.names, out_names))
        else:
            shape = [a.size if n == a.name else 1 for n in out_names]
            coords.append(np.arange(a.size).reshape(shape))
    return tuple(coords)


def _check_bounds(index_array: np.ndarray, size: int, call: OpCall) -> None:
    if index_array.size and (index_array.min() < 0 or index_array.max() >= size):
        raise InterpretError(
            f"%{call.name} = {call.kind}: index {call.label(1)} holds values in "
            f"[{index_array.min()}, {index_array.max()}] but axis '{call.attrs['axis']}' has size {size}"
        )


@register
class Gather(OpDef):
    kind = "gather"
    min_operands = max_operands = 2
    attrs = {"axis": AttrSpec("str", doc="the table axis the index selects along")}
    summary = "Rows of a table picked by an integer index tensor (embedding lookup, RoPE table)."
    example = "%x = gather(%w_emb, %ids) {axis = V} : bf16[B=1, S=8, D=64]"

    def infer(self, call):
        table, index = call.operands
        return gathered_type(table, index, call.attrs["axis"], call.label(0), call.label(1))

    def evaluate(self, args, call, ctx):
        table, index = call.operands
        axis = call.attrs["axis"]
        _check_bounds(args[1], table.size(axis), call)
        return args[0][_coordinates(table, index, axis, args[1])]

    def cost(self, call):
        """Reads the index and only the rows it picks, not the whole table."""
        return OpCost(0, call.operands[1].nbytes + call.out.nbytes, call.out.nbytes)


@register
class Scatter(OpDef):
    kind = "scatter"
    min_operands = max_operands = 3
    attrs = {"axis": AttrSpec("str", doc="the destination axis the index selects along")}
    summary = (
        "A copy of the destination with the indexed rows replaced by the updates (KV-cache write); "
        "the updates have the type gather would return for the same index."
    )
    example = "%k2 = scatter(%k_cache, %pos, %k_new) {axis = P} : bf16[B=1, H=8, P=128, K=64]"

    def infer(self, call):
        dest, index, updates = call.operands
        expected = gathered_type(dest, index, call.attrs["axis"], call.label(0), call.label(1))
        require(
            updates == expected,
            f"updates {call.label(2)} : {updates} must have type {expected} "
            f"(the destination with axis '{call.attrs['axis']}' replaced by the index's axes)",
        )
        return dest

    def evaluate(self, args, call, ctx):
        dest, index, _ = call.operands
        axis = call.attrs["axis"]
        _check_bounds(args[1], dest.size(axis), call)
        result = np.array(args[0], copy=True)
        result[_coordinates(dest, index, axis, args[1])] = args[2]
        return result

    def cost(self, call):
        """In place: reads the index and the updates, writes only the updated rows."""
        _, index, updates = call.operands
        return OpCost(0, index.nbytes + updates.nbytes, updates.nbytes)
