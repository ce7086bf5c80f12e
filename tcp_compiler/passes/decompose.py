"""Rewrites ops no single TCP unit executes into unit-level ops, one rule per op kind.

The contraction engine multiplies two operands at a time, so einsums of three or more operands
become chains of binary einsums. The Vector Engine has exp, tanh, sigmoid, erf, sqrt, log, sin,
cos and div natively (plus tag and logic ops for comparisons), so composite activations become
those plus mul / add / max with scalar constants. Adding a rule is one entry in RULES.

Rules keep the interpreter's numerics: a multi-step rule on a float narrower than f32 casts up,
computes in f32 (as the Vector Engine does) and casts back, so it rounds once like the fused op.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from ir import F32, I32, DType, Graph, Node, TensorType
from ir.ops import REGISTRY, AttrValue, OpCall
from ir.ops.einsum import format_equation, parse_equation
from ir.typecheck import check_call
from tcp_compiler.passes.simplify import clone, finish, new_graph, splat_value


class Emitter:
    """Builds one node's replacement; new values are named after the node they replace.

    Ops wait in `pending` until `commit`, which gives the result the replaced node's name so its
    users (and the graph's outputs) read the replacement unchanged.
    """

    def __init__(self, out: Graph, taken: set[str], node: Node) -> None:
        self.out, self.taken, self.node = out, taken, node
        self.pending: dict[str, Node] = {}
        self.suffixes: dict[str, str] = {}  # a pending op's name -> what it adds to the node's

    def arg(self, i: int) -> Node:
        return self.out[self.node.operands[i]]

    def op(self, kind: str, *operands: Node, suffix: str, type: TensorType | None = None, **attrs) -> Node:
        tail = self._fresh(f".{suffix}")
        name = self.node.name + tail
        self.suffixes[name] = tail
        names = tuple(o.name for o in operands)
        call = OpCall(kind, name, tuple(o.type for o in operands), attrs, type, names)
        result = check_call(REGISTRY[kind], call, where=f"%{name} = {kind}")
        node = Node(name, kind, names, dict(attrs), result)
        self.pending[name] = node
        return node

    def scalar(self, value: AttrValue, dtype: DType, suffix: str) -> Node:
        return self.op("const", suffix=suffix, type=TensorType(dtype, ()), value=value)

    def cast(self, x: Node, dtype: DType, suffix: str) -> Node:
        if x.type.dtype == dtype:
            return x
        return self.op("cast", x, suffix=suffix, type=x.type.with_dtype(dtype))

    def commit(self, result: Node) -> None:
        """Appends the pending ops, the last of which (`result`) under the replaced node's name."""
        nodes = list(self.pending.values())
        if not nodes or nodes[-1] is not result:
            raise ValueError(f"rule for {self.node.kind} must end with the op that gives its result")
        nodes[-1] = replace(result, name=self.node.name)
        for node in nodes:
            self.out.append(node)
        self.out.meta.derive({n.name: self.suffixes.get(n.name, "") for n in nodes}, self.node.name)

    def _fresh(self, base: str) -> str:
        """`base`, or `base.k`: a suffix that makes a name no value of the graph has."""
        tail, k = base, 1
        while self.node.name + tail in self.taken:
            tail, k = f"{base}.{k}", k + 1
        self.taken.add(self.node.name + tail)
        return tail


Rule = Callable[[Emitter, Node], Node | None]


# -- elementwise rules ----------------------------------------------------------------------------
def _in_f32(build: Callable[[Emitter, Node], Node]) -> Rule:
    """A rule that computes `build` in f32 for narrower floats and casts back (one rounding)."""

    def rule(e: Emitter, node: Node) -> Node:
        x = e.arg(0)
        dtype = x.type.dtype
        if dtype == F32 or not dtype.is_float:
            return build(e, x)
        return e.cast(build(e, e.cast(x, F32, "f32")), dtype, "round")

    return rule


def _silu(e: Emitter, x: Node) -> Node:
    return e.op("mul", x, e.op("sigmoid", x, suffix="sig"), suffix="mul")


def _gelu_tanh(e: Emitter, x: Node) -> Node:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in the interpreter's evaluation order."""
    d = x.type.dtype
    cube = e.op("mul", x, e.scalar(0.044715, d, "k"), suffix="kx")
    cube = e.op("mul", cube, x, suffix="kx2")
    cube = e.op("mul", cube, x, suffix="kx3")
    inner = e.op("add", x, cube, suffix="inner")
    arg = e.op("mul", inner, e.scalar(math.sqrt(2.0 / math.pi), d, "c"), suffix="arg")
    return _half_x_one_plus(e, x, e.op("tanh", arg, suffix="tanh"))


def _gelu(e: Emitter, x: Node) -> Node:
    """0.5 x (1 + erf(x / sqrt(2)))."""
    scaled = e.op("div", x, e.scalar(math.sqrt(2.0), x.type.dtype, "rt2"), suffix="scaled")
    return _half_x_one_plus(e, x, e.op("erf", scaled, suffix="erf"))


def _half_x_one_plus(e: Emitter, x: Node, t: Node) -> Node:
    """(0.5 x) (1 + t): both GELUs end this way."""
    d = x.type.dtype
    one_plus = e.op("add", t, e.scalar(1.0, d, "one"), suffix="onep")
    half_x = e.op("mul", x, e.scalar(0.5, d, "half"), suffix="halfx")
    return e.op("mul", half_x, one_plus, suffix="mul")


def _xielu(e: Emitter, node: Node) -> Node:
    """xIELU from exp, log, min, where and arithmetic: softplus(a) as log(1 + e^a), expm1 as
    e^m - 1; computed in f32 for narrower floats and rounded once, as `_in_f32` does."""
    x, ap, an = (e.arg(i) for i in range(3))
    dtype = x.type.dtype
    x, ap, an = (e.cast(v, F32, f"f32.{k}") for k, v in enumerate((x, ap, an)))
    beta = e.scalar(float(node.attrs["beta"]), F32, "beta")
    one = e.scalar(1.0, F32, "one")

    def softplus(a: Node, tag: str) -> Node:
        exp = e.op("exp", a, suffix=f"{tag}.exp")
        return e.op("log", e.op("add", exp, one, suffix=f"{tag}.onep"), suffix=tag)

    beta_x = e.op("mul", x, beta, suffix="betax")
    square = e.op("mul", e.op("mul", softplus(ap, "ap"), x, suffix="apx"), x, suffix="apxx")
    positive = e.op("add", square, beta_x, suffix="pos")
    clipped = e.op("min", x, e.scalar(float(node.attrs["eps"]), F32, "eps"), suffix="clip")
    expm1 = e.op("sub", e.op("exp", clipped, suffix="exp"), one, suffix="expm1")
    slope = e.op("add", beta, softplus(an, "an"), suffix="alpha_n")
    negative = e.op("mul", e.op("sub", expm1, x, suffix="diff"), slope, suffix="negx")
    negative = e.op("add", negative, beta_x, suffix="neg")
    above = e.op("gt", x, e.scalar(0.0, F32, "zero"), suffix="above")
    if dtype == F32:
        return e.op("where", above, positive, negative, suffix="where")
    return e.cast(e.op("where", above, positive, negative, suffix="where"), dtype, "round")


def _rsqrt(e: Emitter, x: Node) -> Node:
    return e.op("div", e.scalar(1.0, x.type.dtype, "one"), e.op("sqrt", x, suffix="sqrt"), suffix="div")


def _relu(e: Emitter, node: Node) -> Node:
    x = e.arg(0)
    return e.op("max", x, e.scalar(_zero(x.type.dtype), x.type.dtype, "zero"), suffix="max")


def _neg(e: Emitter, node: Node) -> Node:
    """x * -1 for floats (exact, signed zeros included); 0 - x for integers."""
    x = e.arg(0)
    d = x.type.dtype
    if d.is_float:
        return e.op("mul", x, e.scalar(-1.0, d, "m1"), suffix="mul")
    return e.op("sub", e.scalar(0, d, "zero"), x, suffix="sub")


def _recip(e: Emitter, node: Node) -> Node:
    x = e.arg(0)
    return e.op("div", e.scalar(1.0, x.type.dtype, "one"), x, suffix="div")


def _pow(e: Emitter, node: Node) -> Node | None:
    """x ^ 2 -> x * x and x ^ 0.5 -> sqrt(x) for a splat constant exponent; other powers stay."""
    x, exponent = e.arg(0), e.arg(1)
    value = splat_value(exponent)
    if value is None or x.type != node.type:
        return None
    if value == 2:
        return e.op("mul", x, x, suffix="mul")
    if value == 0.5:
        return e.op("sqrt", x, suffix="sqrt")
    return None


def _zero(dtype: DType) -> float | int:
    return 0.0 if dtype.is_float else 0


# -- einsum chains --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """Merge items `left` and `right` (indices into the working list) into `axes`, appended last."""

    left: int
    right: int
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    largest: int  # elements of the largest intermediate (the final result excluded)
    flops: int  # 2 x product of the axis sizes of each binary einsum, summed


_EXHAUSTIVE_UP_TO = 6  # 6 operands: 2700 orders; beyond that, greedy


def contraction_plan(inputs: Sequence[Sequence[str]], output: Sequence[str], sizes: dict[str, int]) -> Plan:
    """The binary-einsum order for an n-ary einsum.

    Each axis is summed as soon as neither a later operand nor the output needs it. Among orders
    no costlier in FLOPs than the naive left-to-right chain, the one whose largest intermediate is
    smallest wins (then fewer FLOPs, then the first found): a bare largest-intermediate choice
    can cost more FLOPs than the naive order.
    """
    items = [tuple(a) for a in inputs]
    naive = _naive(items, tuple(output), sizes)
    plans = _all_plans(items, tuple(output), sizes) if len(items) <= _EXHAUSTIVE_UP_TO else []
    plans = [*plans, _greedy(items, tuple(output), sizes), naive]
    return min((p for p in plans if p.flops <= naive.flops), key=lambda p: (p.largest, p.flops))


def _merge(items: list[tuple[str, ...]], i: int, j: int, output: tuple[str, ...], sizes) -> tuple[Step, int]:
    """The step merging items i and j, and its FLOPs."""
    rest = {a for k, axes in enumerate(items) if k not in (i, j) for a in axes}
    union = tuple(dict.fromkeys(items[i] + items[j]))
    axes = output if len(items) == 2 else tuple(a for a in union if a in rest or a in output)
    return Step(i, j, axes), 2 * math.prod(sizes[a] for a in union)


def _apply(items: list[tuple[str, ...]], step: Step) -> list[tuple[str, ...]]:
    return [a for k, a in enumerate(items) if k not in (step.left, step.right)] + [step.axes]


def _plan(steps: list[Step], flops: int, sizes) -> Plan:
    largest = max((math.prod(sizes[a] for a in s.axes) for s in steps[:-1]), default=0)
    return Plan(tuple(steps), largest, flops)


def _all_plans(items, output, sizes) -> list[Plan]:
    return [_plan(steps, flops, sizes) for steps, flops in _orders(items, output, sizes)]


def _orders(items, output, sizes) -> Iterator[tuple[list[Step], int]]:
    if len(items) == 1:
        yield [], 0
        return
    for i, j in itertools.combinations(range(len(items)), 2):
        step, flops = _merge(items, i, j, output, sizes)
        for rest, rest_flops in _orders(_apply(items, step), output, sizes):
            yield [step, *rest], flops + rest_flops


def _greedy(items, output, sizes) -> Plan:
    """Merge the pair with the smallest result (then fewest FLOPs) until one item is left."""
    steps, total = [], 0
    while len(items) > 1:
        pairs = itertools.combinations(range(len(items)), 2)
        options = [_merge(items, i, j, output, sizes) for i, j in pairs]
        step, flops = min(options, key=lambda o: (math.prod(sizes[a] for a in o[0].axes), o[1]))
        steps.append(step)
        total += flops
        items = _apply(items, step)
    return _plan(steps, total, sizes)


def _naive(items, output, sizes) -> Plan:
    """Left to right: ((a b) c) d ..."""
    steps, total = [], 0
    while len(items) > 1:
        # After the first step the running result sits last: pair it with the next operand.
        step, flops = _merge(items, 0, len(items) - 1 if steps else 1, output, sizes)
        steps.append(step)
        total += flops
        items = _apply(items, step)
    return _plan(steps, total, sizes)


def _einsum(e: Emitter, node: Node) -> Node | None:
    """An einsum of three or more operands as binary einsums accumulating in f32 (i32 for ints)."""
    if len(node.operands) < 3:
        return None
    inputs, output = parse_equation(node.attrs["eq"])
    operands = [e.arg(i) for i in range(len(node.operands))]
    sizes = {a.name: a.size for x in operands for a in x.type.axes}
    plan = contraction_plan(inputs, output, sizes)
    wide = F32 if operands[0].type.dtype.is_float else I32
    items, casts = list(operands), {}  # casts: operand name -> its widened copy
    for k, step in enumerate(plan.steps):
        last = k == len(plan.steps) - 1
        left, right = items[step.left], items[step.right]
        if left.type.dtype != right.type.dtype:  # an operand meets an intermediate: widen it (exact)
            left, right = (_widen(e, x, wide, casts) for x in (left, right))
        eq = format_equation([list(left.type.names), list(right.type.names)], list(step.axes))
        dtype = node.type.dtype if last else wide
        axes = [(a, sizes[a]) for a in step.axes]
        merged = e.op("einsum", left, right, suffix=f"c{k}", type=TensorType.from_pairs(dtype, axes), eq=eq)
        items = [x for i, x in enumerate(items) if i not in (step.left, step.right)] + [merged]
    return items[0]


def _widen(e: Emitter, x: Node, dtype: DType, casts: dict[str, Node]) -> Node:
    """x in `dtype`, cast once per operand however many steps read it."""
    if x.type.dtype == dtype:
        return x
    if x.name not in casts:
        casts[x.name] = e.cast(x, dtype, f"in{e.node.operands.index(x.name)}.{dtype}")
    return casts[x.name]


RULES: dict[str, Rule] = {
    "einsum": _einsum,
    "silu": _in_f32(_silu),
    "gelu_tanh": _in_f32(_gelu_tanh),
    "gelu": _in_f32(_gelu),
    "rsqrt": _in_f32(_rsqrt),
    "relu": _relu,
    "xielu": _xielu,
    "neg": _neg,
    "recip": _recip,
    "pow": _pow,
}


def decompose(g: Graph, rules: dict[str, Rule] | None = None) -> Graph:
    """Applies the rule for each node's kind; nodes without a rule (or whose rule declines) stay."""
    rules = RULES if rules is None else rules
    out = new_graph(g)
    taken = {n.name for n in g.nodes}
    for node in g.nodes:
        rule = rules.get(node.kind)
        emitter = Emitter(out, taken, node)
        result = rule(emitter, node) if rule is not None else None
        if result is None:
            out.append(clone(node))
        else:
            emitter.commit(result)
    return finish(g, out, "decompose")
