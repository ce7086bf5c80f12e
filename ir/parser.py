"""The parser: .tir text to a Graph. Every failure is a ParseError `FILE:LINE:COL: ...`.

Syntax comes from grammar.lark (LALR, so errors list exactly the tokens that could come next);
names are resolved here: unknown ops and dtypes, undefined or redefined values.

Limits, so that no file makes reading, verifying or costing it unbounded or crash: a file is at most
MAX_FILE_BYTES (the largest bundled model's whole prefill graph is under 0.5 MB) and a regular file
(not a device or FIFO); an axis has at most MAX_AXIS_SIZE elements and a type MAX_ELEMENTS; an
integer attribute fits 64 bits; strings are valid Unicode (no lone surrogates).
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import os
import stat
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

MAX_FILE_BYTES = 8 << 20
MAX_AXIS_SIZE = 1 << 32
MAX_ELEMENTS = 1 << 62
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_MAX_INT_DIGITS = 20  # checked before int(): Python refuses to convert over 4,300 digits

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
        if token.type != "STRING":
            return str(token)
        text = json.loads(token)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise self.fail(
                token, f"string has a lone surrogate {text[e.start]!r}; it is not valid Unicode text"
            ) from None
        return text

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
            return self.integer(token)
        if kind == "float":
            return float(token)
        return self.text(token)

    def integer(self, token: Token) -> int:
        """An integer attribute, which must fit 64 bits like every index and count the ops take."""
        value = int(token) if len(token.lstrip("+-0")) <= _MAX_INT_DIGITS else None
        if value is None or not _INT_MIN <= value <= _INT_MAX:
            shown = token if len(token) <= 24 else f"{token[:20]}... ({len(token)} digits)"
            raise self.fail(token, f"integer {shown} does not fit 64 bits")
        return value

    def type(self, tree: Tree) -> TensorType:
        dtype_tok, *axis_trees = tree.children
        if dtype_tok not in DTYPES:
            raise self.fail(dtype_tok, f"unknown dtype '{dtype_tok}'; expected one of {', '.join(DTYPES)}")
        axes = []
        for axis in axis_trees:
            name, size = axis.children
            if any(a.name == name for a in axes):
                raise self.fail(name, f"axis '{name}' appears twice in one type")
            n = int(size) if len(size.lstrip("0")) <= _MAX_INT_DIGITS else MAX_AXIS_SIZE + 1
            if n <= 0:
                raise self.fail(size, f"axis '{name}' must have a positive size, got {size}")
            if n > MAX_AXIS_SIZE:
                shown = size if len(size) <= 24 else f"{size[:20]}... ({len(size)} digits)"
                raise self.fail(size, f"axis '{name}' has size {shown}, over the limit {MAX_AXIS_SIZE:,}")
            axes.append(Axis(str(name), n))
        result = TensorType(DTYPES[str(dtype_tok)], tuple(axes))
        if math.prod(a.size for a in axes) > MAX_ELEMENTS:
            raise self.fail(dtype_tok, f"type {result} has more than {MAX_ELEMENTS:,} elements")
        return result


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
        text = _read_source(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ParseError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    graph = parse(text, str(path))
    verify(graph, str(path))
    return graph


def _read_source(path: Path) -> bytes:
    """The file's bytes, at most MAX_FILE_BYTES, from a regular file only: a device (/dev/zero)
    never ends and a FIFO blocks, so neither is read. (simulator.files.read_input does the same for
    specs and configs; ir/ does not depend on simulator/.)"""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise OSError(errno.EISDIR, "it is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket)")
        too_large = OSError(errno.EFBIG, f"larger than the {MAX_FILE_BYTES:,}-byte limit for .tir files")
        if info.st_size > MAX_FILE_BYTES:
            raise too_large
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_FILE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_FILE_BYTES:
            raise too_large
        return b"".join(chunks)
    finally:
        os.close(fd)
