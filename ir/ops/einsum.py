"""einsum over named axes: broadcast, multiply, and sum the axes missing from the output.

The equation spells every operand's axes in order (`"B S D, D F -> B S F"`), so the text shows
what is contracted; the type rule checks each list against the operand's actual axes.
"""

from __future__ import annotations

import math
import string

import numpy as np

from ir.ops.base import AttrSpec, OpCall, OpCost, OpDef, register, require, same_sizes
from ir.types import Axis, TensorType


def parse_equation(eq: str) -> tuple[list[list[str]], list[str]]:
    """`"A B, B C -> A C"` -> ([["A", "B"], ["B", "C"]], ["A", "C"])."""
    from ir.errors import TypeRuleError

    if eq.count("->") != 1:
        raise TypeRuleError(f"einsum equation {eq!r} needs exactly one '->'")
    lhs, rhs = eq.split("->")
    inputs = [part.split() for part in lhs.split(",")]
    return inputs, rhs.split()


def format_equation(inputs: list[list[str]], output: list[str]) -> str:
    return ", ".join(" ".join(axes) for axes in inputs) + " -> " + " ".join(output)


@register
class Einsum(OpDef):
    kind = "einsum"
    min_operands, max_operands = 1, None
    attrs = {"eq": AttrSpec("str", doc="operand axes, comma separated, '->' result axes")}
    summary = (
        "Multiply the operands over the union of their axes and sum the axes the result lacks. "
        "The result dtype may be wider than the operands' (bf16 x bf16 accumulates in f32)."
    )
    example = '%y = einsum(%x, %w) {eq = "B S D, D F -> B S F"} : f32[B=1, S=8, F=64]'

    def infer(self, call: OpCall) -> TensorType:
        inputs, output = parse_equation(call.attrs["eq"])
        require(
            len(inputs) == len(call.operands),
            f"equation {call.attrs['eq']!r} names {len(inputs)} operands but the op has {len(call.operands)}",
        )
        for i, (axes, t) in enumerate(zip(inputs, call.operands, strict=True)):
            require(
                tuple(axes) == t.names,
                f"equation lists axes [{' '.join(axes)}] for {call.label(i)} but its type is {t}",
            )
        dtypes = {t.dtype for t in call.operands}
        require(
            len(dtypes) == 1,
            "einsum operands must share one dtype (insert a cast), got "
            + ", ".join(f"{call.label(i)}: {t.dtype}" for i, t in enumerate(call.operands)),
        )
        (dtype,) = dtypes
        require(dtype.kind != "bool", "einsum needs numeric operands, got bool")
        sizes = same_sizes(call.labelled())
        require(len(set(output)) == len(output), f"result axes [{' '.join(output)}] repeat a name")
        for name in output:
            require(name in sizes, f"result axis '{name}' is not an axis of any operand")
        out_dtype = dtype
        if call.result is not None:
            require(
                call.result.dtype.kind == dtype.kind or dtype.is_int and call.result.dtype.is_float,
                f"einsum of {dtype} operands cannot produce {call.result.dtype}",
            )
            out_dtype = call.result.dtype
        return TensorType(out_dtype, tuple(Axis(n, sizes[n]) for n in output))

    def evaluate(self, args, call, ctx):
        inputs, output = parse_equation(call.attrs["eq"])
        letters = {}
        for name in [n for axes in inputs for n in axes]:
            letters.setdefault(name, string.ascii_letters[len(letters)])
        spec = ",".join("".join(letters[n] for n in axes) for axes in inputs)
        spec += "->" + "".join(letters[n] for n in output)
        work = np.int64 if call.operands[0].dtype.is_int else np.float32
        return np.einsum(spec, *[a.astype(work) for a in args], optimize=len(args) > 2)

    def cost(self, call):
        inputs, _ = parse_equation(call.attrs["eq"])
        sizes = same_sizes(call.labelled())
        space = math.prod(sizes.values())
        flops = 2 * space * (len(call.operands) - 1) if len(call.operands) > 1 else space
        return OpCost(flops, sum(t.nbytes for t in call.operands), call.out.nbytes)
