"""The printer: a Graph as .tir text, the form users read and `ir.parser` reads back exactly."""

from __future__ import annotations

import json
import math
import re
from itertools import chain

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


# Every character a value name, op kind, attribute key or axis name may hold for the text form to
# be unambiguous (what `verify` allows, and more): with only these, different graphs print differently.
_PLAIN = re.compile(r"[A-Za-z0-9_.]*")


def same_text(a: Graph, b: Graph) -> bool:
    """`print_graph(a) == print_graph(b)`, mostly without printing either: the graphs compare part
    by part (attributes and types by their text), and only graphs with names the text form cannot
    keep apart are printed."""
    if _same_parts(a, b):
        return True
    if _plain(a) and _plain(b):
        return False  # parts that differ print differently: the parser reads the text back exactly
    return print_graph(a) == print_graph(b)


def _same_parts(a: Graph, b: Graph) -> bool:
    """True only when every part of a prints as that of b."""
    if a.name != b.name or a.outputs != b.outputs or len(a.nodes) != len(b.nodes):
        return False
    for x, y in zip(a.nodes, b.nodes, strict=True):
        if x is y:
            continue
        if x.name != y.name or x.kind != y.kind or x.operands != y.operands:
            return False
        if x.type is not y.type and format_type(x.type) != format_type(y.type):
            return False
        if x.attrs or y.attrs:
            if list(x.attrs) != list(y.attrs):
                return False
            for k, u in x.attrs.items():
                if not _same_attr(u, y.attrs[k]):
                    return False
    return True


def _same_attr(u: AttrValue, v: AttrValue) -> bool:
    """format_attr(u) == format_attr(v); equal bools, ints, strings and non-zero floats of one type
    print alike, anything else (NaN, signed zeros, 1 against 1.0 or True) compares by its text."""
    t = type(u)
    if t is type(v):
        if t is tuple:
            return len(u) == len(v) and all(map(_same_attr, u, v))
        if (t is str or t is int or t is bool) and u == v:
            return True
        if t is float and u == v and u != 0.0:
            return True
    return format_attr(u) == format_attr(v)


def _plain(g: Graph) -> bool:
    """Whether every name, kind, attribute key and axis name in g is made of _PLAIN characters."""
    nodes = g.nodes
    text = "".join(
        chain(
            g.outputs,
            (n.name for n in nodes),
            (n.kind for n in nodes),
            chain.from_iterable(n.operands for n in nodes),
            chain.from_iterable(n.attrs for n in nodes),
            (str(t.dtype) + "".join(t.names) for t in {id(n.type): n.type for n in nodes}.values()),
        )
    )
    return _PLAIN.fullmatch(text) is not None
