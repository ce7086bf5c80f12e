"""The parser: .tir text to a Graph. Every failure is a ParseError `FILE:LINE:COL: ...`.

Syntax comes from grammar.lark (LALR, so errors list exactly the tokens that could come next);
names are resolved here: unknown ops and dtypes, undefined or redefined values.
"""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Tree
from lark.lexer import PatternStr

from ir.dtypes import DTYPES
from ir.errors import ParseError
from ir.graph import Graph, Node
from ir.ops import REGISTRY
from ir.types import Axis, TensorType

_FRIENDLY = {
    "VALUE": "a value like %x",
    "IDENT": "a name",
    "SIZE": "an axis size",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "$END": "end of file",
}


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("ir").joinpath("grammar.lark").read_text()
    return lark.Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=False)


def _describe(terminals) -> str:
    parser = _parser()
    names = []
    for t in sorted(terminals):
        if t in _FRIENDLY:
            names.append(_FRIENDLY[t])
            continue
        try:
            pattern = parser.get_terminal(t).pattern
        except KeyError:
            names.append(t)
            continue
        names.append(f"'{pattern.value}'" if isinstance(pattern, PatternStr) else t)
    names = sorted(set(names))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class _Builder:
    """Walks the parse tree into a Graph, resolving names as it goes."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, token: Token, message: str) -> ParseError:
        return ParseError(f"{self.source}:{token.line}:{token.column}: {message}")

    def graph(self, tree: Tree) -> Graph:
        name_tok, *stmts, ret = tree.children
        graph = Graph(self.text(name_tok))
        for stmt in stmts:
            graph.append(self.node(stmt, graph))
        for tok in ret.children:
            graph.outputs.append(self.use(tok, graph))
        return graph

    def text(self, token: Token) -> str:
        return json.loads(token) if token.type == "STRING" else str(token)

    def use(self, token: Token, graph: Graph) -> str:
        name = token[1:]
        if name not in graph:
            raise self.fail(token, f"value %{name} is not defined (define values before use)")
        return name

    def node(self, stmt: Tree, graph: Graph) -> Node:
        value, kind, operands, *rest = stmt.children
        attrs_tree = rest[0] if len(rest) == 2 else None
        type_tree = rest[-1]
        name = value[1:]
        if name in graph:
            raise self.fail(value, f"value %{name} is defined twice")
        if kind not in REGISTRY:
            close = [f"'{c}'" for c in difflib.get_close_matches(str(kind), REGISTRY, n=3)]
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise self.fail(kind, f"unknown op '{kind}'{hint}")
        names = tuple(self.use(t, graph) for t in operands.children)
        attrs = self.attrs(attrs_tree) if attrs_tree is not None else {}
        return Node(name, str(kind), names, attrs, self.type(type_tree), line=value.line)

    def attrs(self, tree: Tree) -> dict:
        attrs = {}
        for attr in tree.children:
            key, value = attr.children
            if key in attrs:
                raise self.fail(key, f"attribute '{key}' is given twice")
            attrs[str(key)] = self.value(value)
        return attrs

    def value(self, tree):
        kind = tree.data
        if kind == "list":
            return tuple(self.value(v) for v in tree.children)
        if kind == "true":
            return True
        if kind == "false":
            return False
        (token,) = tree.children
        if kind == "int":
            return int(token)
        if kind == "float":
            return float(token)
        return self.text(token)

    def type(self, tree: Tree) -> TensorType:
        dtype_tok, *axis_trees = tree.children
        if dtype_tok not in DTYPES:
            raise self.fail(dtype_tok, f"unknown dtype '{dtype_tok}'; expected one of {', '.join(DTYPES)}")
        axes = []
        for axis in axis_trees:
            name, size = axis.children
            if any(a.name == name for a in axes):
                raise self.fail(name, f"axis '{name}' appears twice in one type")
            if int(size) <= 0:
                raise self.fail(size, f"axis '{name}' must have a positive size, got {size}")
            axes.append(Axis(str(name), int(size)))
        return TensorType(DTYPES[str(dtype_tok)], tuple(axes))


def parse(text: str, source: str = "<string>") -> Graph:
    """Parses one graph; does not verify types (see ir.verify / ir.load)."""
    try:
        tree = _parser().parse(text)
        return _Builder(source).graph(tree.children[0])
    except lark.exceptions.UnexpectedToken as e:
        got = "end of file" if e.token.type == "$END" else repr(str(e.token))
        raise ParseError(
            f"{source}:{e.line}:{e.column}: expected {_describe(e.expected)}, got {got}"
        ) from None
    except lark.exceptions.UnexpectedCharacters as e:
        raise ParseError(
            f"{source}:{e.line}:{e.column}: unexpected character {text[e.pos_in_stream]!r}; "
            f"expected {_describe(e.allowed)}"
        ) from None
    except lark.exceptions.UnexpectedEOF as e:
        line = text.count("\n") + 1
        column = len(text) - text.rfind("\n")
        raise ParseError(
            f"{source}:{line}:{column}: unexpected end of file; expected {_describe(e.expected)}"
        ) from None
    except lark.exceptions.LarkError as e:
        raise ParseError(f"{source}:1:1: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise ParseError(f"{source}:1:1: nesting too deep") from None


def load(path: str | Path) -> Graph:
    """Reads, parses and verifies a .tir file; errors name the file."""
    from ir.verify import verify

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    graph = parse(text, str(path))
    verify(graph, str(path))
    return graph
