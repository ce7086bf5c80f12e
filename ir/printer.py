"""The printer: a Graph as .tir text, the form users read and `ir.parser` reads back exactly."""

from __future__ import annotations

import json
import math
import re

from ir.graph import Graph, Node
from ir.ops import AttrValue
from ir.types import TensorType
from ir.verify import RESERVED_WORDS as _RESERVED

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def format_name(text: str) -> str:
    """Bare when it reads back as a name, else a JSON-quoted string."""
    if _IDENT.fullmatch(text) and text not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def format_attr(value: AttrValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return format_name(value)
    return "[" + ", ".join(format_attr(v) for v in value) + "]"


def format_type(t: TensorType) -> str:
    return str(t)


def format_node(node: Node) -> str:
    operands = ", ".join(f"%{o}" for o in node.operands)
    attrs = ""
    if node.attrs:
        attrs = " {" + ", ".join(f"{k} = {format_attr(v)}" for k, v in node.attrs.items()) + "}"
    return f"%{node.name} = {node.kind}({operands}){attrs} : {format_type(node.type)}"


def print_graph(graph: Graph) -> str:
    lines = [f"graph {format_name(graph.name)} {{"]
    lines += [f"  {format_node(n)}" for n in graph.nodes]
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
