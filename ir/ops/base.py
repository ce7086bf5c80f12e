"""What every op defines, in one class: attributes, type rule, interpreter rule, cost rule.

An op kind is one `OpDef` subclass instance registered under its text mnemonic; the parser,
printer, verifier, interpreter and analysis all look ops up here, so adding an op touches one place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeAlias

import numpy as np

from ir.errors import TypeRuleError
from ir.types import TensorType

AttrValue: TypeAlias = int | float | str | bool | tuple["AttrValue", ...]


@dataclass(frozen=True)
class AttrSpec:
    """One attribute an op accepts: allowed Python types, whether required, allowed values."""

    kind: str  # "int", "float", "str", "bool", "number", "scalar", "str_list", "list"
    required: bool = True
    choices: tuple[str, ...] | None = None
    doc: str = ""

    def check(self, name: str, value: AttrValue) -> None:
        ok = _ATTR_CHECKS[self.kind](value)
        if not ok:
            raise TypeRuleError(f"attribute '{name}' must be {_ATTR_NAMES[self.kind]}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise TypeRuleError(f"attribute '{name}' must be one of {', '.join(self.choices)}, got {value!r}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return _is_int(v) or isinstance(v, float)


def _is_scalar(v) -> bool:
    return _is_number(v) or isinstance(v, bool)


_ATTR_CHECKS = {
    "int": _is_int,
    "float": lambda v: isinstance(v, float),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "number": _is_number,
    "scalar": _is_scalar,
    "str_list": lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
    "scalar_list": lambda v: isinstance(v, tuple) and all(_is_scalar(x) for x in v),
}
_ATTR_NAMES = {
    "int": "an integer",
    "float": "a float",
    "str": "a name or string",
    "bool": "true or false",
    "number": "a number",
    "scalar": "a number or boolean",
    "str_list": "a list of names",
    "scalar_list": "a list of numbers",
}


@dataclass(frozen=True)
class OpCost:
    """Work of one op: FLOPs, bytes read and written in memory, bytes sent over chip links."""

    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    link_bytes: int = 0
    link_steps: int = 0  # sequential chip-link transfers the collective's algorithm takes (a ring's)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte of memory traffic (0 when the op moves no bytes)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def __add__(self, other: OpCost) -> OpCost:
        return OpCost(
            self.flops + other.flops,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
            self.link_bytes + other.link_bytes,
            self.link_steps + other.link_steps,
        )


@dataclass(frozen=True)
class OpCall:
    """One use of an op, as its rules see it: operand types, attributes and the result type.

    `result` is the declared type; it is None only while a builder asks the type rule to infer it.
    """

    kind: str
    name: str
    operands: tuple[TensorType, ...]
    attrs: Mapping[str, AttrValue]
    result: TensorType | None = None
    operand_names: tuple[str, ...] = ()

    def label(self, i: int) -> str:
        """How error messages name operand i: its SSA name when known."""
        return f"%{self.operand_names[i]}" if i < len(self.operand_names) else f"operand {i}"

    def labelled(self) -> list[tuple[str, TensorType]]:
        return [(self.label(i), t) for i, t in enumerate(self.operands)]

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue:
        return self.attrs.get(key, default)

    @property
    def out(self) -> TensorType:
        assert self.result is not None, "rule needs the result type"
        return self.result


@dataclass
class EvalContext:
    """What source ops read from when the interpreter runs one rank of a graph."""

    rank: int
    ranks: int
    inputs: Mapping[str, np.ndarray]
    params: Mapping[str, np.ndarray]
    extra: dict = field(default_factory=dict)


class OpDef(ABC):
    """Base of every op kind. Subclasses set the class attributes and give the rules; registering
    one that lacks its type or interpreter rule fails at import."""

    kind: ClassVar[str]
    min_operands: ClassVar[int] = 0
    max_operands: ClassVar[int | None] = 0
    attrs: ClassVar[dict[str, AttrSpec]] = {}
    # True when the declared result type carries meaning the operands cannot give (reshape, cast).
    needs_result_type: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    example: ClassVar[str] = ""

    @abstractmethod
    def infer(self, call: OpCall) -> TensorType:
        """The type rule: the result type, or TypeRuleError naming the mismatch."""

    @abstractmethod
    def evaluate(self, args: Sequence[np.ndarray], call: OpCall, ctx: EvalContext) -> np.ndarray:
        """The interpreter rule on one rank; arrays are laid out in their types' axis order."""

    def evaluate_ranks(
        self, args: Sequence[Sequence[np.ndarray]], call: OpCall, ctxs: Sequence[EvalContext]
    ) -> list[np.ndarray]:
        """All ranks at once; only collectives need more than one rank at a time."""
        return [self.evaluate(a, call, c) for a, c in zip(args, ctxs, strict=True)]

    def cost(self, call: OpCall) -> OpCost:
        """Default: no FLOPs, reads every operand once and writes the result once."""
        return OpCost(0, sum(t.nbytes for t in call.operands), call.out.nbytes)


REGISTRY: dict[str, OpDef] = {}


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator: registers one instance under its `kind`."""
    op = cls()
    if op.kind in REGISTRY:
        raise ValueError(f"op kind '{op.kind}' registered twice")
    REGISTRY[op.kind] = op
    return cls


def lookup(kind: str) -> OpDef:
    return REGISTRY[kind]


def require(condition: bool, message: str) -> None:
    """Type-rule helper: raise TypeRuleError(message) unless condition holds."""
    if not condition:
        raise TypeRuleError(message)


def same_sizes(types: Sequence[tuple[str, TensorType]]) -> dict[str, int]:
    """Checks that axes of the same name agree in size across operands; returns name -> size."""
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    for label, t in types:
        for axis in t.axes:
            if axis.name in sizes and sizes[axis.name] != axis.size:
                raise TypeRuleError(
                    f"axis '{axis.name}' has size {sizes[axis.name]} in {where[axis.name]} "
                    f"but {axis.size} in {label}"
                )
            sizes.setdefault(axis.name, axis.size)
            where.setdefault(axis.name, label)
    return sizes
