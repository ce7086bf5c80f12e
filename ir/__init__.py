"""tcpc's IR: einsum / gather / reduce graphs over named axes, their text form and semantics."""

from typing import TYPE_CHECKING, Any

from ir.analysis import GraphCost, analyze
from ir.dtypes import BF16, BOOL, DTYPES, E8M0, F16, F32, FP8E4M3, FP8E5M2, I4, I8, I32, U4, DType
from ir.errors import InterpretError, NonFiniteError, ParseError, TirError, VerifyError
from ir.graph import Graph, Node
from ir.interpret import interpret, interpret_spmd
from ir.printer import print_graph
from ir.types import Axis, TensorType
from ir.verify import verify

if TYPE_CHECKING:
    from ir.parser import load, parse


def __getattr__(name: str) -> Any:
    """`load` and `parse` import the parser (and lark, ~0.05 s) on first use: compiling a model
    never reads text."""
    if name in ("load", "parse"):
        from ir import parser

        value = getattr(parser, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ir' has no attribute {name!r}")


__all__ = [
    "BF16",
    "BOOL",
    "DTYPES",
    "E8M0",
    "F16",
    "F32",
    "FP8E4M3",
    "FP8E5M2",
    "I4",
    "I8",
    "I32",
    "U4",
    "DType",
    "Axis",
    "TensorType",
    "Graph",
    "Node",
    "GraphCost",
    "analyze",
    "interpret",
    "interpret_spmd",
    "load",
    "parse",
    "print_graph",
    "verify",
    "InterpretError",
    "NonFiniteError",
    "ParseError",
    "TirError",
    "VerifyError",
]
