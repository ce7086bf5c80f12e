"""One fused op's view at other axis sizes, resizing each distinct type it mentions once.

A decode step resizes the KV-dependent ops' views at every new length. A view repeats its types
(a node's result is the next node's operand, and an input or output of the op), so the plan lists
the distinct types once, notes which of them mention a resized axis, and rebuilds the view from
positions: the same OpView that resizing each occurrence gives, at a fraction of the hashing.
"""

from __future__ import annotations

from collections.abc import Callable

from ir import Axis, TensorType
from simulator.targets.rngd.mapping.schedule import NodeView, OpView


def resize_type(t: TensorType, sizes: dict[str, int]) -> TensorType:
    """t with the named axes at new sizes (t itself when it has none of them)."""
    if sizes.keys().isdisjoint(t.names):
        return t
    return t.with_axes(a if a.name not in sizes else Axis(a.name, sizes[a.name]) for a in t.axes)


class ResizePlan:
    """A view as positions into its distinct types; `at` rebuilds it with some types resized."""

    def __init__(self, view: OpView, fixed_in: tuple[bool, ...], fixed_out: tuple[bool, ...],
                 axes: tuple[str, ...]) -> None:  # fmt: skip
        index: dict[TensorType, int] = {}

        def pos(t: TensorType) -> int:
            return index.setdefault(t, len(index))

        self.view = view
        self.nodes = tuple(
            (n.kind, n.attrs, pos(n.type), tuple(pos(t) for t in n.operands)) for n in view.nodes
        )
        self.inputs = tuple(
            (pos(t), w, kind, fixed) for (t, w, kind), fixed in zip(view.inputs, fixed_in, strict=True)
        )
        self.outputs = tuple(
            (pos(t), w, fixed) for (t, w), fixed in zip(view.outputs, fixed_out, strict=True)
        )
        self.types = tuple(index)
        self.resized = tuple(i for i, t in enumerate(self.types) if not set(axes).isdisjoint(t.names))

    def at(
        self, sizes: dict[str, int], memo: dict[TensorType, TensorType],
        where: Callable[[TensorType, str, bool], str],
    ) -> OpView:  # fmt: skip
        """The view at `sizes`; `memo` holds types resized to them already (views share types),
        `where(type, old residency, fixed)` the residency of a resized value."""
        types = list(self.types)
        for i in self.resized:
            t = types[i]
            found = memo.get(t)
            if found is None:
                found = memo[t] = resize_type(t, sizes)
            types[i] = found
        nodes = tuple(
            NodeView(kind, attrs, types[t], tuple(types[o] for o in operands))
            for kind, attrs, t, operands in self.nodes
        )
        inputs = tuple((types[t], where(types[t], w, fixed), kind) for t, w, kind, fixed in self.inputs)
        outputs = tuple((types[t], where(types[t], w, fixed)) for t, w, fixed in self.outputs)
        view = self.view
        return OpView(view.kind, nodes, inputs, outputs, view.chunks, view.fetched)
