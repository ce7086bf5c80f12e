"""Ill-typed uses of every op kind: the verifier's one-line message names the op, the value and the
mismatch, both for text (`t.tir:LINE: %y = kind: ...`) and for graphs built with Graph.add.

Each case is a few statements whose last one, `%y`, is ill-typed. It is checked three ways:
parse + verify of the text; Graph.add with the declared type (same message, without the location);
and, for ops that infer their type, Graph.add without a type (same message, unless the mismatch is
in the declared type itself, which inference cannot get wrong).
"""

from __future__ import annotations

import re

import pytest

import ir
from ir.ops import REGISTRY
from ir.ops.elementwise import BINARY, UNARY


def source(stmts: str) -> str:
    body = "\n".join("  " + s.strip() for s in stmts.strip().splitlines())
    return f"graph t {{\n{body}\n  return %y\n}}\n"


def case(id: str, stmts: str, *fragments: str, declared: bool = False):
    """`declared`: the mismatch is between the declared and the inferred result type."""
    return pytest.param(stmts, fragments, declared, id=id)


def kind_of(stmts: str) -> str:
    return re.search(r"%y = (\w+)\(", stmts.strip().splitlines()[-1]).group(1)


CASES = [
    # -- sources -----------------------------------------------------------------------------------
    case(
        "input with an operand",
        "%a = input() : f32[A=2]\n%y = input(%a) : f32[A=2]",
        "takes 0 operands, got 1",
    ),
    case(
        "param with an attribute",
        "%y = param() {value = 1.0} : f32[A=2]",
        "unknown attribute 'value' (allowed: none)",
    ),
    case("const without value", "%y = const() : f32[A=2]", "const needs exactly one of 'value' or 'values'"),
    case(
        "const with value and values",
        "%y = const() {value = 1.0, values = [1.0, 2.0]} : f32[A=2]",
        "exactly one of 'value' or 'values'",
    ),
    case(
        "const values count",
        "%y = const() {values = [1, 2, 3]} : i32[A=2]",
        "'values' has 3 elements but i32[A=2] holds 2",
    ),
    case(
        "const value of wrong type",
        '%y = const() {value = "one"} : f32[A=2]',
        "attribute 'value' must be a number or boolean, got 'one'",
    ),
    case(
        "iota axis missing",
        "%y = iota() {axis = B} : i32[A=4]",
        "iota axis 'B' is not an axis of i32[A=4]",
    ),
    case("iota of bool", "%y = iota() {axis = A} : bool[A=4]", "iota needs a numeric dtype, not bool"),
    case(
        "iota without axis",
        "%y = iota() : i32[A=4]",
        "missing attribute 'axis' (the axis whose index each element holds)",
    ),
    # -- einsum ------------------------------------------------------------------------------------
    case(
        "einsum axis size mismatch",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=32, N=8]
        %y = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[M=4, N=8]
        """,
        "axis 'K' has size 16 in %a but 32 in %b",
    ),
    case(
        "einsum equation axes differ from operand",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=16, N=8]
        %y = einsum(%a, %b) {eq = "K M, K N -> M N"} : f32[M=4, N=8]
        """,
        "equation lists axes [K M] for %a but its type is f32[M=4, K=16]",
    ),
    case(
        "einsum equation operand count",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=16, N=8]
        %y = einsum(%a, %b) {eq = "M K -> M"} : f32[M=4]
        """,
        "equation 'M K -> M' names 1 operands but the op has 2",
    ),
    case(
        "einsum mixed dtypes",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : bf16[K=16, N=8]
        %y = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[M=4, N=8]
        """,
        "einsum operands must share one dtype",
        "%a: f32, %b: bf16",
    ),
    case(
        "einsum result axis from nowhere",
        """
        %a = input() : f32[M=4, K=16]
        %y = einsum(%a) {eq = "M K -> M Z"} : f32[M=4, Z=1]
        """,
        "result axis 'Z' is not an axis of any operand",
    ),
    case(
        "einsum without arrow",
        '%a = input() : f32[M=4, K=16]\n%y = einsum(%a) {eq = "M K"} : f32[M=4]',
        "einsum equation 'M K' needs exactly one '->'",
    ),
    case(
        "einsum of bool",
        '%a = input() : bool[M=4]\n%y = einsum(%a, %a) {eq = "M, M -> M"} : bool[M=4]',
        "einsum needs numeric operands, got bool",
    ),
    case(
        "einsum declared dtype of another kind",
        '%a = input() : f32[M=4, K=2]\n%y = einsum(%a) {eq = "M K -> M"} : i32[M=4]',
        "einsum of f32 operands cannot produce i32",
        declared=True,
    ),
    case(
        "einsum declared axis size",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=16, N=8]
        %y = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[M=4, N=9]
        """,
        "result axis 'N' has size 9 but the op gives 8",
        declared=True,
    ),
    case(
        "einsum declared axis order",
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=16, N=8]
        %y = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[N=8, M=4]
        """,
        "result axes are [N M] but the op gives [M N] (f32[M=4, N=8])",
        declared=True,
    ),
    case(
        "einsum eq of wrong type",
        "%a = input() : f32[M=4]\n%y = einsum(%a) {eq = 3} : f32[M=4]",
        "attribute 'eq' must be a name or string, got 3",
    ),
    # -- elementwise -------------------------------------------------------------------------------
    case(
        "binary broadcast size mismatch",
        "%a = input() : f32[A=2, B=3]\n%b = input() : f32[B=4]\n%y = mul(%a, %b) : f32[A=2, B=3]",
        "axis 'B' has size 3 in %a but 4 in %b",
    ),
    case(
        "binary declared dtype",
        "%a = input() : f32[A=2]\n%y = add(%a, %a) : bf16[A=2]",
        "result dtype is bf16 but the op gives f32",
        declared=True,
    ),
    case(
        "comparison declared non-bool",
        "%a = input() : f32[A=2]\n%y = lt(%a, %a) : f32[A=2]",
        "result dtype is f32 but the op gives bool",
        declared=True,
    ),
    case(
        "binary declared axis order",
        "%a = input() : f32[A=2, B=3]\n%b = input() : f32[B=3]\n%y = sub(%b, %a) : f32[B=3, A=2]",
        "result axes are [B A] but the op gives [A B]",
        declared=True,
    ),
    case(
        "binary with three operands",
        "%a = input() : f32[A=2]\n%y = add(%a, %a, %a) : f32[A=2]",
        "takes 2 operands, got 3",
    ),
    case(
        "unary with an unknown attribute",
        "%a = input() : f32[A=2]\n%y = exp(%a) {base = 2} : f32[A=2]",
        "unknown attribute 'base' (allowed: none)",
    ),
    case(
        "unary declared axis size",
        "%a = input() : f32[A=2]\n%y = tanh(%a) : f32[A=3]",
        "result axis 'A' has size 3 but the op gives 2",
        declared=True,
    ),
    case(
        "where with non-bool condition",
        """
        %c = input() : f32[A=2]
        %a = input() : f32[A=2]
        %y = where(%c, %a, %a) : f32[A=2]
        """,
        "condition %c must be bool, got f32",
    ),
    case(
        "where with mixed branch dtypes",
        """
        %c = input() : bool[A=2]
        %a = input() : f32[A=2]
        %b = input() : bf16[A=2]
        %y = where(%c, %a, %b) : f32[A=2]
        """,
        "operands must share one dtype (insert a cast), got %a: f32, %b: bf16",
    ),
    case(
        "where condition axis size",
        """
        %c = input() : bool[A=3]
        %a = input() : f32[A=2]
        %y = where(%c, %a, %a) : f32[A=2]
        """,
        "axis 'A' has size 3 in %c but 2 in %a",
    ),
    case(
        "xielu of i32",
        """
        %x = input() : i32[A=2]
        %p = input() : i32[]
        %y = xielu(%x, %p, %p) {beta = 0.5, eps = -1e-06} : i32[A=2]
        """,
        "xielu needs float operands, got i32",
    ),
    case(
        "xielu with scalars of another dtype",
        """
        %x = input() : bf16[A=2]
        %p = input() : f32[]
        %y = xielu(%x, %p, %p) {beta = 0.5, eps = -1e-06} : bf16[A=2]
        """,
        "operands must share one dtype (insert a cast), got %x: bf16, %p: f32",
    ),
    case(
        "cast changing axes",
        "%a = input() : f32[A=2, B=3]\n%y = cast(%a) : bf16[B=3, A=2]",
        "cast keeps the axes: %a : f32[A=2, B=3] but the result is bf16[B=3, A=2]",
    ),
    case(
        "cast changing a size",
        "%a = input() : f32[A=2]\n%y = cast(%a) : i8[A=4]",
        "cast keeps the axes: %a : f32[A=2] but the result is i8[A=4]",
    ),
    # -- gather / scatter --------------------------------------------------------------------------
    case(
        "gather with float index",
        """
        %t = input() : f32[V=10, D=4]
        %i = input() : f32[S=3]
        %y = gather(%t, %i) {axis = V} : f32[S=3, D=4]
        """,
        "index %i must be an integer type, got f32",
    ),
    case(
        "gather axis missing",
        """
        %t = input() : f32[V=10, D=4]
        %i = input() : i32[S=3]
        %y = gather(%t, %i) {axis = X} : f32[S=3, D=4]
        """,
        "axis 'X' is not an axis of %t : f32[V=10, D=4]",
    ),
    case(
        "gather batch axis size",
        """
        %t = input() : f32[B=3, S=5, D=4]
        %i = input() : i32[B=2]
        %y = gather(%t, %i) {axis = S} : f32[B=3, D=4]
        """,
        "axis 'B' has size 3 in %t but 2 in %i",
    ),
    case(
        "gather declared axes",
        """
        %t = input() : f32[V=10, D=4]
        %i = input() : i32[S=3]
        %y = gather(%t, %i) {axis = V} : f32[D=4, S=3]
        """,
        "result axes are [D S] but the op gives [S D]",
        declared=True,
    ),
    case(
        "gather without axis",
        "%t = input() : f32[V=10, D=4]\n%i = input() : i32[S=3]\n%y = gather(%t, %i) : f32[S=3, D=4]",
        "missing attribute 'axis'",
    ),
    case(
        "scatter updates of wrong shape",
        """
        %c = input() : f32[B=2, H=3, P=6, K=4]
        %p = input() : i32[B=2, T=1]
        %u = input() : f32[B=2, H=3, T=2, K=4]
        %y = scatter(%c, %p, %u) {axis = P} : f32[B=2, H=3, P=6, K=4]
        """,
        "updates %u : f32[B=2, H=3, T=2, K=4] must have type f32[B=2, H=3, T=1, K=4]",
    ),
    case(
        "scatter updates of wrong dtype",
        """
        %c = input() : f32[P=6, K=4]
        %p = input() : i32[T=1]
        %u = input() : bf16[T=1, K=4]
        %y = scatter(%c, %p, %u) {axis = P} : f32[P=6, K=4]
        """,
        "updates %u : bf16[T=1, K=4] must have type f32[T=1, K=4]",
    ),
    # -- topk --------------------------------------------------------------------------------------
    case(
        "topk k larger than the axis",
        "%a = input() : f32[T=2, E=4]\n%y = topk(%a) {axis = E, k = 5, new_axis = Kk} : i32[T=2, Kk=5]",
        "k = 5 must be in [1, 4] (the size of 'E')",
    ),
    case(
        "topk new axis collides",
        "%a = input() : f32[T=2, E=4]\n%y = topk(%a) {axis = E, k = 2, new_axis = T} : i32[T=2, Kk=2]",
        "new_axis 'T' is already an axis of f32[T=2, E=4]",
    ),
    case(
        "topk declared as float",
        "%a = input() : f32[T=2, E=4]\n%y = topk(%a) {axis = E, k = 2, new_axis = Kk} : f32[T=2, Kk=2]",
        "result dtype is f32 but the op gives i32",
        declared=True,
    ),
    # -- mixture of experts ------------------------------------------------------------------------
    case(
        "dispatch by a float index",
        "%x = input() : f32[T=2, D=4]\n%i = input() : f32[T=2, Kk=2]\n"
        "%y = dispatch(%x, %i) {axis = R} : f32[R=4, D=4]",
        "%i must be an integer index, got f32",
    ),
    case(
        "bincount declared as float",
        "%i = input() : i32[T=2, Kk=2]\n%y = bincount(%i) : f32[E=4]",
        "bincount gives a 1-axis integer count, not f32[E=4]",
    ),
    case(
        "grouped_einsum counts over the wrong axis",
        "%x = input() : f32[R=4, D=3]\n%w = input() : f32[E=2, F=5, D=3]\n%c = input() : i32[F=5]\n"
        '%y = grouped_einsum(%x, %w, %c) {eq = "R D, E F D -> R F", group = E, top_k = 1} : f32[R=4, F=5]',
        "counts %c : i32[F=5] must be an integer [E=2]",
    ),
    case(
        "grouped_einsum top_k not dividing the rows",
        "%x = input() : f32[R=5, D=3]\n%w = input() : f32[E=4, F=5, D=3]\n%c = input() : i32[E=4]\n"
        '%y = grouped_einsum(%x, %w, %c) {eq = "R D, E F D -> R F", group = E, top_k = 2} : f32[R=5, F=5]',
        "top_k = 2 must be in [1, 4] and divide the 5 rows",
    ),
    case(
        "grouped_einsum summing the group axis",
        "%x = input() : f32[R=4, D=3]\n%w = input() : f32[E=2, F=5, D=3]\n%c = input() : i32[E=2]\n"
        '%y = grouped_einsum(%x, %w, %c) {eq = "R D, E F D -> R E F", group = E, top_k = 1} '
        ": f32[R=4, E=2, F=5]",
        "group axis 'E' must be an axis of the weight only, not of the rows or the result",
    ),
    # -- recurrences along a sequence --------------------------------------------------------------
    case(
        "scan with a state holding the sequence axis",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, S=4, D=3, N=2]\n"
        "%y = scan(%x, %dt, %A, %b, %c, %h) {axis = S} : f32[B=1, S=4, D=3]",
        "the state %h : f32[B=1, S=4, D=3, N=2] must not have the sequence axis 'S'",
    ),
    case(
        "scan with A stepped along the sequence over an axis the state lacks",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[S=4, E=3]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, D=3, N=2]\n"
        "%y = scan(%x, %dt, %A, %b, %c, %h) {axis = S} : f32[B=1, S=4, D=3]",
        "%A : f32[S=4, E=3] has axes [E] the state %h : f32[B=1, D=3, N=2] lacks",
    ),
    case(
        "scan_state with B of another state size",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=5]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, D=3, N=2]\n"
        "%y = scan_state(%x, %dt, %A, %b, %c, %h) {axis = S} : f32[B=1, D=3, N=2]",
        "axis 'N' has size 2 in %A but 5 in %b",
    ),
    case(
        "scan_state with an axis the state lacks",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, D=3]\n"
        "%y = scan_state(%x, %dt, %A, %b, %c, %h) {axis = S} : f32[B=1, D=3]",
        "%A : f32[D=3, N=2] has axes [N] the state %h : f32[B=1, D=3] lacks",
    ),
    case(
        "delta_scan with a state missing the value axis",
        "%q = input() : f32[B=1, S=4, H=2, K=3]\n%k = input() : f32[B=1, S=4, H=2, K=3]\n"
        "%v = input() : f32[B=1, S=4, H=2, V=5]\n%g = input() : f32[B=1, S=4, H=2]\n"
        "%be = input() : f32[B=1, S=4, H=2]\n%h = input() : f32[B=1, H=2, K=3]\n"
        "%y = delta_scan(%q, %k, %v, %g, %be, %h) {axis = S} : f32[B=1, S=4, H=2, V=5]",
        "%v : f32[B=1, S=4, H=2, V=5] has axes [V] the state %h : f32[B=1, H=2, K=3] lacks",
    ),
    case(
        "delta_scan_state with beta per key",
        "%q = input() : f32[B=1, S=4, H=2, K=3]\n%k = input() : f32[B=1, S=4, H=2, K=3]\n"
        "%v = input() : f32[B=1, S=4, H=2, V=5]\n%g = input() : f32[B=1, S=4, H=2]\n"
        "%be = input() : f32[B=1, S=4, H=2, K=3]\n%h = input() : f32[B=1, H=2, K=3, V=5]\n"
        "%y = delta_scan_state(%q, %k, %v, %g, %be, %h) {axis = S} : f32[B=1, H=2, K=3, V=5]",
        "%be : f32[B=1, S=4, H=2, K=3] is per head and step, not per key axis [K]",
    ),
    case(
        "scan with a list for its axis",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, D=3, N=2]\n"
        "%y = scan(%x, %dt, %A, %b, %c, %h) {axis = [S]} : f32[B=1, S=4, D=3]",
        "attribute 'axis' must be a name or string, got ('S',)",
    ),
    case(
        "scan_state without its axis",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%c = input() : f32[B=1, S=4, N=2]\n"
        "%h = input() : f32[B=1, D=3, N=2]\n"
        "%y = scan_state(%x, %dt, %A, %b, %c, %h) : f32[B=1, D=3, N=2]",
        "missing attribute 'axis' (the sequence axis the recurrence runs along)",
    ),
    case(
        "scan with five operands",
        "%x = input() : f32[B=1, S=4, D=3]\n%dt = input() : f32[B=1, S=4, D=3]\n"
        "%A = input() : f32[D=3, N=2]\n"
        "%b = input() : f32[B=1, S=4, N=2]\n%h = input() : f32[B=1, D=3, N=2]\n"
        "%y = scan(%x, %dt, %A, %b, %h) {axis = S} : f32[B=1, S=4, D=3]",
        "takes 6 operands, got 5",
    ),
    case(
        "conv1d with an unknown attribute",
        "%x = input() : f32[B=1, S=4, D=3]\n%w = input() : f32[D=3, K=2]\n"
        "%win = input() : f32[B=1, S=1, D=3]\n"
        "%y = conv1d(%x, %w, %win) {axis = S, taps = 2} : f32[B=1, S=4, D=3]",
        "unknown attribute 'taps' (allowed: axis)",
    ),
    case(
        "conv1d along an axis x lacks",
        "%x = input() : f32[B=1, S=4, D=3]\n%w = input() : f32[D=3, K=2]\n"
        "%win = input() : f32[B=1, S=1, D=3]\n"
        "%y = conv1d(%x, %w, %win) {axis = T} : f32[B=1, S=4, D=3]",
        "conv1d axis 'T' is not an axis of %x : f32[B=1, S=4, D=3]",
    ),
    case(
        "recurrence with a state in another order",
        "%a = input() : f32[C=4, H=2]\n%u = input() : f32[C=4, H=2, N=3]\n%h = input() : f32[N=3, H=2]\n"
        "%y = recurrence(%a, %u, %h) {axis = C} : f32[C=4, H=2, N=3]",
        "h0 %h : f32[N=3, H=2] must have u's axes without 'C', in order",
    ),
    case(
        "recurrence along an axis u lacks",
        "%a = input() : f32[H=2]\n%u = input() : f32[C=4, H=2]\n%h = input() : f32[C=4, H=2]\n"
        "%y = recurrence(%a, %u, %h) {axis = T} : f32[C=4, H=2]",
        "u %u : f32[C=4, H=2] needs the axis 'T'",
    ),
    case(
        "conv1d with a window of the wrong length",
        "%x = input() : f32[B=1, S=4, D=3]\n%w = input() : f32[D=3, K=4]\n"
        "%win = input() : f32[B=1, S=2, D=3]\n"
        "%y = conv1d(%x, %w, %win) {axis = S} : f32[B=1, S=4, D=3]",
        "window %win : f32[B=1, S=2, D=3] must have x's axes [B S D] with 'S' of size 3 (taps - 1)",
    ),
    case(
        "conv1d declared as an integer",
        "%x = input() : f32[B=1, S=4, D=3]\n%w = input() : f32[D=3, K=2]\n"
        "%win = input() : f32[B=1, S=1, D=3]\n"
        "%y = conv1d(%x, %w, %win) {axis = S} : i32[B=1, S=4, D=3]",
        "conv1d gives a float result, not i32",
        declared=True,
    ),
    case(
        "combine with one row too few",
        "%h = input() : f32[R=3, D=4]\n%i = input() : i32[T=2, Kk=2]\n%g = input() : f32[T=2, Kk=2]\n"
        "%y = combine(%h, %i, %g) {axis = R, slots = [Kk]} : f32[T=2, D=4]",
        "%h : f32[R=3, D=4] needs rows axis 'R' of size 4 (one row per slot)",
    ),
    case(
        "combine weights not shaped like the index",
        "%h = input() : f32[R=4, D=4]\n%i = input() : i32[T=2, Kk=2]\n%g = input() : f32[Kk=2, T=2]\n"
        "%y = combine(%h, %i, %g) {axis = R, slots = [Kk]} : f32[T=2, D=4]",
        "weights %g : f32[Kk=2, T=2] must be float with the index's axes i32[T=2, Kk=2]",
    ),
    # -- reduce ------------------------------------------------------------------------------------
    case(
        "reduce over a missing axis",
        "%a = input() : f32[A=2, B=3]\n%y = reduce(%a) {op = sum, axes = [C]} : f32[A=2, B=3]",
        "reduce axis 'C' is not an axis of %a : f32[A=2, B=3]",
    ),
    case(
        "reduce axes of wrong type",
        "%a = input() : f32[A=2, B=3]\n%y = reduce(%a) {op = sum, axes = 3} : f32[A=2]",
        "attribute 'axes' must be a list of names, got 3",
    ),
    case(
        "reduce unknown op",
        "%a = input() : f32[A=2, B=3]\n%y = reduce(%a) {op = mean, axes = [B]} : f32[A=2]",
        "attribute 'op' must be one of sum, max, min, got 'mean'",
    ),
    case(
        "reduce with no axes",
        "%a = input() : f32[A=2, B=3]\n%y = reduce(%a) {op = sum, axes = []} : f32[A=2, B=3]",
        "reduce needs at least one axis",
    ),
    case(
        "reduce declared keepdims",
        "%a = input() : f32[A=2, B=3]\n%y = reduce(%a) {op = max, axes = [B]} : f32[A=2, B=1]",
        "result axes are [A B] but the op gives [A]",
        declared=True,
    ),
    case(
        "reduce of bool",
        "%a = input() : bool[A=2]\n%y = reduce(%a) {op = sum, axes = [A]} : bool[]",
        "reduce needs a numeric operand, got bool",
    ),
    # -- layout ------------------------------------------------------------------------------------
    case(
        "reshape changing element count",
        "%a = input() : f32[A=2, B=3]\n%y = reshape(%a) : f32[C=7]",
        "reshape keeps the element count: %a : f32[A=2, B=3] has 6, the result f32[C=7] has 7",
    ),
    case(
        "reshape changing dtype",
        "%a = input() : f32[A=2, B=3]\n%y = reshape(%a) : bf16[C=6]",
        "reshape keeps the dtype: %a is f32 but the result is bf16",
    ),
    case(
        "transpose changing axes",
        "%a = input() : f32[A=2, B=3]\n%y = transpose(%a) : f32[C=3, A=2]",
        "transpose result f32[C=3, A=2] must hold the same axes and dtype as %a : f32[A=2, B=3]",
    ),
    case(
        "transpose changing sizes",
        "%a = input() : f32[A=2, B=3]\n%y = transpose(%a) : f32[B=2, A=3]",
        "transpose result f32[B=2, A=3] must hold the same axes and dtype as %a : f32[A=2, B=3]",
    ),
    case(
        "slice out of range",
        "%a = input() : f32[A=2, S=8]\n%y = slice(%a) {axis = S, start = 2, stop = 9} : f32[A=2, S=7]",
        "slice [2, 9) is not a non-empty range inside axis 'S' of size 8",
    ),
    case(
        "slice empty",
        "%a = input() : f32[A=2, S=8]\n%y = slice(%a) {axis = S, start = 3, stop = 3} : f32[A=2, S=1]",
        "slice [3, 3) is not a non-empty range inside axis 'S' of size 8",
    ),
    case(
        "slice axis missing",
        "%a = input() : f32[A=2, S=8]\n%y = slice(%a) {axis = T, start = 0, stop = 1} : f32[A=2, S=1]",
        "slice axis 'T' is not an axis of %a : f32[A=2, S=8]",
    ),
    case(
        "slice float start",
        "%a = input() : f32[S=8]\n%y = slice(%a) {axis = S, start = 1.0, stop = 2} : f32[S=1]",
        "attribute 'start' must be an integer, got 1.0",
    ),
    case(
        "concat other axis mismatched",
        """
        %a = input() : f32[A=2, S=3]
        %b = input() : f32[A=4, S=1]
        %c = input() : f32[A=2, S=1]
        %y = concat(%a, %b, %c) {axis = S} : f32[A=2, S=5]
        """,
        "axis 'A' has size 2 in %a but 4 in %b",
    ),
    case(
        "concat mixed dtypes",
        "%a = input() : f32[S=3]\n%b = input() : bf16[S=1]\n%y = concat(%a, %b) {axis = S} : f32[S=4]",
        "concat operands must have the same axes and dtype: %a : f32[S=3], %b : bf16[S=1]",
    ),
    case(
        "concat axis missing",
        "%a = input() : f32[S=3]\n%b = input() : f32[S=1]\n%y = concat(%a, %b) {axis = T} : f32[S=4]",
        "concat axis 'T' is not an axis of %a : f32[S=3]",
    ),
    case("concat of nothing", "%y = concat() {axis = S} : f32[S=4]", "takes at least 1 operands, got 0"),
    # -- collectives -------------------------------------------------------------------------------
    case(
        "reduce_scatter not divisible",
        """
        %a = input() : f32[S=2, D=6]
        %y = reduce_scatter(%a) {op = sum, axis = D, chips = 4} : f32[S=2, D=1]
        """,
        "axis 'D' of size 6 does not split over 4 chips",
    ),
    case(
        "reduce_scatter axis missing",
        """
        %a = input() : f32[S=2, D=6]
        %y = reduce_scatter(%a) {op = sum, axis = X, chips = 2} : f32[S=2, D=3]
        """,
        "axis 'X' is not an axis of %a : f32[S=2, D=6]",
    ),
    case(
        "all_gather declared size",
        "%a = input() : f32[S=2, D=6]\n%y = all_gather(%a) {axis = D, chips = 2} : f32[S=2, D=6]",
        "result axis 'D' has size 6 but the op gives 12",
        declared=True,
    ),
    case(
        "all_gather chips of wrong type",
        "%a = input() : f32[D=6]\n%y = all_gather(%a) {axis = D, chips = 2.0} : f32[D=12]",
        "attribute 'chips' must be an integer, got 2.0",
    ),
    case(
        "send to stage 0",
        "%a = input() : f32[D=6]\n%y = send(%a) {stage = 0} : f32[D=6]",
        "stage must be at least 1, got 0",
    ),
    case(
        "all_reduce zero chips",
        "%a = input() : f32[D=6]\n%y = all_reduce(%a) {op = sum, chips = 0} : f32[D=6]",
        "chips must be positive, got 0",
    ),
    case(
        "all_reduce without chips",
        "%a = input() : f32[D=6]\n%y = all_reduce(%a) {op = sum} : f32[D=6]",
        "missing attribute 'chips' (number of chips in the group)",
    ),
    case(
        "all_reduce with axis",
        "%a = input() : f32[D=6]\n%y = all_reduce(%a) {op = sum, chips = 2, axis = D} : f32[D=6]",
        "unknown attribute 'axis' (allowed: op, chips)",
    ),
]


def _wrong_kind(kinds: tuple[str, ...]) -> str | None:
    """A dtype outside `kinds`, to feed an op that does not accept it."""
    for dtype, kind in (("i32", "int"), ("bool", "bool"), ("f32", "float")):
        if kind not in kinds:
            return dtype
    return None


for _name, (_, _kinds, _) in UNARY.items():
    _bad = _wrong_kind(_kinds)
    CASES.append(
        case(
            f"{_name} of {_bad}",
            f"%a = input() : {_bad}[A=2]\n%y = {_name}(%a) : {_bad}[A=2]",
            f"{_name} needs a {' or '.join(_kinds)} operand, got {_bad}",
        )
    )
for _name, (_, _kinds, _to_bool, _) in BINARY.items():
    _out = "bool" if _to_bool else "f32"
    CASES.append(
        case(
            f"{_name} of f32 and bf16",
            f"%a = input() : f32[A=2]\n%b = input() : bf16[A=2]\n%y = {_name}(%a, %b) : {_out}[A=2]",
            "operands must share one dtype (insert a cast), got %a: f32, %b: bf16",
        )
    )
    _bad = _wrong_kind(_kinds)
    if _bad is not None:
        _out = "bool" if _to_bool else _bad
        CASES.append(
            case(
                f"{_name} of {_bad}",
                f"%a = input() : {_bad}[A=2]\n%y = {_name}(%a, %a) : {_out}[A=2]",
                f"{_name} needs {' or '.join(_kinds)} operands, got {_bad}",
            )
        )


def test_every_op_kind_has_an_ill_typed_case() -> None:
    covered = {kind_of(p.values[0]) for p in CASES}
    assert covered == set(REGISTRY), f"no verifier case for {sorted(set(REGISTRY) - covered)}"


def text_error(stmts: str) -> str:
    """The VerifyError message for the statements as text in t.tir."""
    g = ir.parse(source(stmts), "t.tir")
    with pytest.raises(ir.VerifyError) as e:
        ir.verify(g, "t.tir")
    return str(e.value)


@pytest.mark.parametrize(("stmts", "fragments", "declared"), CASES)
def test_text_path(stmts: str, fragments: tuple[str, ...], declared: bool) -> None:
    kind = kind_of(stmts)
    line = len(stmts.strip().splitlines()) + 1  # line 1 is `graph t {`
    message = text_error(stmts)
    assert message.startswith(f"t.tir:{line}: %y = {kind}: "), message
    for fragment in fragments:
        assert fragment in message
    assert "\n" not in message


@pytest.mark.parametrize(("stmts", "fragments", "declared"), CASES)
def test_graph_add_path(stmts: str, fragments: tuple[str, ...], declared: bool) -> None:
    parsed = ir.parse(source(stmts), "t.tir")
    *good, bad = parsed.nodes
    g = ir.Graph("t")
    for n in good:
        g.add(n.kind, *n.operands, name=n.name, type=n.type, **n.attrs)
    with pytest.raises(ir.VerifyError) as e:
        g.add(bad.kind, *bad.operands, name="y", type=bad.type, **bad.attrs)
    message = str(e.value)
    assert message.startswith(f"%y = {bad.kind}: "), message
    for fragment in fragments:
        assert fragment in message
    line = len(parsed.nodes) + 1
    assert text_error(stmts) == f"t.tir:{line}: {message}"

    # Ops that infer their type fail the same way without one, unless the declared type is the fault.
    if REGISTRY[bad.kind].needs_result_type:
        return
    if declared:
        assert g.add(bad.kind, *bad.operands, name="y", **bad.attrs).type != bad.type
    else:
        with pytest.raises(ir.VerifyError) as again:
            g.add(bad.kind, *bad.operands, name="y", **bad.attrs)
        assert str(again.value) == message


def test_same_message_from_text_and_graph_add() -> None:
    text = source(
        """
        %a = input() : f32[M=4, K=16]
        %b = input() : f32[K=32, N=8]
        %y = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[M=4, N=8]
        """
    )
    with pytest.raises(ir.VerifyError) as from_text:
        ir.verify(ir.parse(text, "t.tir"), "t.tir")
    g = ir.Graph("t")
    a = g.input("a", ir.TensorType.of(ir.F32, M=4, K=16))
    b = g.input("b", ir.TensorType.of(ir.F32, K=32, N=8))
    with pytest.raises(ir.VerifyError) as from_add:
        g.add("einsum", a, b, name="y", eq="M K, K N -> M N")
    assert str(from_text.value) == "t.tir:4: " + str(from_add.value)
    assert str(from_add.value) == "%y = einsum: axis 'K' has size 16 in %a but 32 in %b"


def test_line_numbers_count_comments_and_blank_lines() -> None:
    text = """# a header comment

graph t {
  %a = input() : f32[A=2]   # line 4

  # a comment on line 6
  %y = exp(%a) {x = 1} : f32[A=2]
  return %y
}
"""
    expected = r"^t\.tir:7: %y = exp: unknown attribute 'x' \(allowed: none\)$"
    with pytest.raises(ir.VerifyError, match=expected):
        ir.verify(ir.parse(text, "t.tir"), "t.tir")


def test_first_error_wins() -> None:
    text = source("%a = input() : f32[A=2]\n%b = exp(%a) : f32[A=3]\n%y = add(%a, %a) {z = 1} : f32[A=2]")
    with pytest.raises(ir.VerifyError, match=r"^t\.tir:3: %b = exp: result axis 'A' has size 3"):
        ir.verify(ir.parse(text, "t.tir"), "t.tir")


def test_verify_without_source_has_no_location() -> None:
    g = ir.parse(source("%a = input() : f32[A=2]\n%y = exp(%a) : f32[A=3]"))
    with pytest.raises(ir.VerifyError) as e:
        ir.verify(g)
    assert str(e.value) == "%y = exp: result axis 'A' has size 3 but the op gives 2"


# -- parse errors and graph-level errors -----------------------------------------------------------

PARSE_CASES = [
    pytest.param(
        "%a = input() : f32[A=2]\n%y = add(%a, %b) : f32[A=2]",
        r"^t\.tir:3:16: value %b is not defined \(define values before use\)$",
        id="operand used before definition",
    ),
    pytest.param(
        "%y = exp(%y) : f32[A=2]",
        r"^t\.tir:2:12: value %y is not defined",
        id="operand is the value being defined",
    ),
    pytest.param(
        "%a = input() : f32[A=2]\n%a = input() : f32[A=2]\n%y = exp(%a) : f32[A=2]",
        r"^t\.tir:3:3: value %a is defined twice$",
        id="value defined twice",
    ),
    pytest.param(
        "%a = input() : f32[A=2]\n%y = exq(%a) : f32[A=2]",
        r"^t\.tir:3:8: unknown op 'exq'; did you mean [^\n]*'exp'",
        id="unknown op",
    ),
    pytest.param(
        "%a = input() : f33[A=2]\n%y = exp(%a) : f32[A=2]",
        r"^t\.tir:2:18: unknown dtype 'f33'; expected one of f32, ",
        id="unknown dtype",
    ),
    pytest.param(
        "%a = input() : f32[A=2, A=3]\n%y = exp(%a) : f32[A=2]",
        r"^t\.tir:2:27: axis 'A' appears twice in one type$",
        id="axis twice in one type",
    ),
    pytest.param(
        "%a = input() : f32[A=0]\n%y = exp(%a) : f32[A=2]",
        r"^t\.tir:2:24: axis 'A' must have a positive size, got 0$",
        id="zero-size axis",
    ),
    pytest.param(
        "%a = input() : f32[A=2]\n%y = reduce(%a) {op = sum, op = max, axes = [A]} : f32[]",
        r"^t\.tir:3:30: attribute 'op' is given twice$",
        id="attribute given twice",
    ),
    pytest.param(
        "%a = input() : f32[A=2]\n%y = exp(%a) f32[A=2]",
        r"^t\.tir:3:16: expected ",
        id="missing colon",
    ),
]


@pytest.mark.parametrize(("stmts", "pattern"), PARSE_CASES)
def test_parse_errors(stmts: str, pattern: str) -> None:
    with pytest.raises(ir.ParseError) as e:
        ir.parse(source(stmts), "t.tir")
    assert re.search(pattern, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)


def test_undefined_output_in_text_is_a_parse_error() -> None:
    text = "graph t {\n  %a = input() : f32[A=2]\n  return %a, %nope\n}\n"
    with pytest.raises(ir.ParseError, match=r"^t\.tir:3:14: value %nope is not defined"):
        ir.parse(text, "t.tir")


def test_undefined_output_through_graph_api() -> None:
    g = ir.Graph("t")
    g.input("a", ir.TensorType.of(ir.F32, A=2))
    g.set_outputs("a", "nope")
    with pytest.raises(ir.VerifyError, match=r"^t\.tir: graph t returns %nope, which is not defined$"):
        ir.verify(g, "t.tir")


def test_graph_without_outputs() -> None:
    g = ir.Graph("t")
    g.input("a", ir.TensorType.of(ir.F32, A=2))
    with pytest.raises(ir.VerifyError, match=r"^graph t returns nothing$"):
        ir.verify(g)


def test_graph_add_with_undefined_operand() -> None:
    g = ir.Graph("t")
    with pytest.raises(ir.VerifyError, match=r"^%y = exp: operand %nope is not defined$"):
        g.add("exp", "nope", name="y")


def test_graph_add_unknown_op() -> None:
    g = ir.Graph("t")
    with pytest.raises(ir.VerifyError, match=r"^unknown op 'exq'$"):
        g.add("exq", name="y")


@pytest.mark.parametrize("kind", sorted(k for k, op in REGISTRY.items() if op.needs_result_type))
def test_graph_add_needs_a_result_type(kind) -> None:
    g = ir.Graph("t")
    a = g.input("a", ir.TensorType.of(ir.F32, A=2))
    operands = [a] if REGISTRY[kind].min_operands else []
    with pytest.raises(ir.VerifyError, match=rf"^%y = {kind} needs an explicit result type$"):
        g.add(kind, *operands, name="y")


def test_verify_rejects_names_graph_add_let_through() -> None:
    g = ir.Graph("t")
    g.input("a", ir.TensorType(ir.F32, (ir.Axis("not ok", 2),)))
    g.set_outputs("a")
    with pytest.raises(ir.VerifyError, match=r"^%a = input: axis name 'not ok' is not an identifier$"):
        ir.verify(g)


@pytest.mark.parametrize(
    "stmts",
    [
        "%t = input() : f32[V=4, D=2]\n%i = input() : i32[S=3]\n"
        '%y = gather(%t, %i) {axis = "X\\nY"} : f32[S=3, D=2]',
        '%a = input() : f32[A=2]\n%y = reduce(%a) {op = sum, axes = ["B\\nC"]} : f32[]',
        '%a = input() : f32[A=2]\n%y = slice(%a) {axis = "B\\nC", start = 0, stop = 1} : f32[A=1]',
        '%y = iota() {axis = "B\\nC"} : i32[A=2]',
    ],
    ids=["gather", "reduce", "slice", "iota"],
)
def test_messages_stay_one_line_with_newlines_in_attribute_strings(stmts: str) -> None:
    # IR BUG: axis names from attributes are quoted as '{axis}' rather than with !r, so a string
    # attribute holding an escaped newline ("X\nY") puts a raw newline in the VerifyError message,
    # breaking the one-line contract of ir/errors.py (e.g. ir/ops/indexing.py gathered_type,
    # ir/ops/reduce.py, ir/ops/layout.py Slice, ir/ops/sources.py Iota).
    g = ir.parse(source(stmts), "t.tir")
    with pytest.raises(ir.VerifyError) as e:
        ir.verify(g, "t.tir")
    assert "\n" not in str(e.value), f"multi-line VerifyError: {str(e.value)!r}"
