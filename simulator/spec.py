"""Spec values declared once: each is a field of a table dataclass that says its type, unit and
range, and a spec file gives its value and source. Everything else (the loader's checks, the dotted
keys, `tcpc hw show`, reading and setting a value by address) is derived from those declarations.

A value's address is `table.key` (`hbm.sustained_bytes_per_cycle`), or `table.key.dtype` for a
value given per operand dtype (`contraction.macs_per_lane_cycle.bf16`): the address in the TOML
file, in reports and in sweeps. `Spec.value` reads one; `Spec.with_value` returns a new spec with one
changed, checked like a file's entry, with a one-line error naming the key.
"""

from __future__ import annotations

import difflib
import re
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Protocol

from simulator.errors import HardwareError, HardwareOptionError

SOURCE_KINDS = ("published", "derived", "assumed")
SOURCE_PATTERN = re.compile(r"^(published|derived|assumed):\s*\S")


def value(unit: str, lo: float, hi: float, per: tuple[str, ...] | None = None) -> Any:
    """Declares one spec value of a table: its unit and inclusive range; `per`: given once per
    entry of this tuple (a sub-table, e.g. one per operand dtype). Its type is the field's
    annotation: int (integers only), float (any number, stored as float), or dict[str, int]."""
    return field(metadata={"unit": unit, "range": (lo, hi), "per": per})


class Table:
    """Base of a spec's tables: frozen dataclasses whose fields are all declared with `value`."""


@dataclass(frozen=True)
class Param:
    """One declared value as the loader and reports see it."""

    table: str
    key: str
    kind: type  # int or float
    unit: str
    lo: float
    hi: float
    per: tuple[str, ...] | None = None

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.key}"

    @property
    def leaf_keys(self) -> list[str]:
        """The addresses this value occupies: one, or one per entry of `per`."""
        return [f"{self.dotted}.{d}" for d in self.per] if self.per else [self.dotted]

    def check(self, dotted: str, item: Any) -> int | float:
        """The value as stored, or a HardwareError "`dotted`: expected ..., got ..."."""
        lo, hi = self.lo, self.hi
        if self.kind is int:
            if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
                raise HardwareError(
                    f"{dotted}: expected an integer from {lo:,} to {hi:,}, got {describe(item)}"
                )
            return item
        if isinstance(item, bool) or not isinstance(item, int | float) or not lo <= item <= hi:
            raise HardwareError(f"{dotted}: expected a number from {lo:g} to {hi:g}, got {describe(item)}")
        return float(item)


def _table_params(name: str, table: type[Table]) -> tuple[Param, ...]:
    hints = typing.get_type_hints(table)
    out = []
    for f in fields(table):
        kind = hints[f.name]
        kind = typing.get_args(kind)[1] if typing.get_origin(kind) is dict else kind
        assert kind in (int, float) and "unit" in f.metadata, f"{name}.{f.name}: declare it with value()"
        out.append(Param(name, f.name, kind, f.metadata["unit"], *f.metadata["range"], f.metadata["per"]))
    return tuple(out)


class NamedDType(Protocol):
    """An IR dtype (ir.DType) as a spec sees it: by name, so simulator/ does not import ir/."""

    name: str


DTypeName = str | NamedDType  # a dtype as spec methods take it (per-dtype values are keyed by name)


@dataclass(frozen=True)
class EngineRates:
    """What the engine, traces and plots read of any target's spec: the clock, and the rates the
    pooled (DMA) context shares (simulator.engine rule 5)."""

    clock_hz: float
    hbm_bytes_per_cycle: float  # HBM bandwidth the moves in flight share
    dma_bytes_per_cycle: float  # the DMA pool: every engine at its full rate
    dma_engines: int  # engines in the pool (a trace lays the moves out on them)
    dma_bytes_per_cycle_each: float


@dataclass(frozen=True)
class Spec(ABC):
    """A validated machine of some target: its tables (fields that are Table dataclasses, declared
    by the subclass), the source of every value, and where it came from. Every target's spec has a
    `system` table with `chips`. Instances hash by their values, so cost caches can be keyed by them
    (a subclass says `__hash__ = Spec.__hash__`, or its dataclass decorator makes its own)."""

    name: str
    path: Path
    description: str
    extends: str | None
    # address (e.g. "hbm.peak_bytes_per_cycle", "contraction.macs_per_lane_cycle.bf16") -> source
    sources: dict[str, str]
    # Cost caches are keyed by the spec: hashing every value on each lookup would dominate them.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, *(self.value(k) for k in self.leaf_keys()))))

    def __hash__(self) -> int:
        return self._hash

    # --- the schema, from the declarations ------------------------------------------------------

    @classmethod
    def tables(cls) -> dict[str, type[Table]]:
        """Table name -> its dataclass, in declaration (and file) order."""
        return _tables(cls)

    @classmethod
    def params(cls) -> dict[str, Param]:
        """Every declared value by its `table.key`, in declaration order."""
        return _params(cls)

    @classmethod
    def leaf_keys(cls) -> tuple[str, ...]:
        """Every address a file must give (per-dtype values expanded), in declaration order."""
        return _leaf_keys(cls)

    @classmethod
    def param(cls, dotted: str) -> tuple[Param, str | None]:
        """The declaration of an address and its `per` entry, or a HardwareError naming the key."""
        parts = dotted.split(".")
        param = cls.params().get(".".join(parts[:2]))
        if (
            param is None
            or len(parts) != (3 if param.per else 2)
            or (param.per and parts[2] not in param.per)
        ):
            raise HardwareError(f"{dotted}: no such key{suggest(dotted, cls.leaf_keys())}")
        return param, (parts[2] if param.per else None)

    @property
    def rates(self) -> EngineRates:
        """The clock and shared rates the engine and traces use; every target says its own."""
        raise NotImplementedError(type(self).__name__)

    # --- the roofs: what every roofline and floor divides by (tcp_compiler.analysis) -----------------
    # Generic analysis (the roofline, the config-only floor) bounds work on any target by these, so
    # each target's spec must say them; nothing else of a spec may it read.

    @abstractmethod
    def flops_per_second(self, dtype: DTypeName) -> float:
        """Peak FLOP/s per chip for operands of `dtype`: the compute roof."""

    @property
    @abstractmethod
    def hbm_bytes_per_second(self) -> float:
        """Sustained memory bandwidth per chip, the rate the simulator moves memory bytes at: the
        memory roof a report's roofline uses."""

    @property
    @abstractmethod
    def hbm_peak_bytes_per_second(self) -> float:
        """Published peak memory bandwidth per chip, at or above the sustained rate: the memory roof
        of a floor no simulated phase may beat."""

    @property
    @abstractmethod
    def link_bytes_per_second(self) -> float:
        """Chip-to-chip bandwidth per direction: the communication roof."""

    @property
    def ranks_per_card(self) -> int:
        """How many tensor-parallel ranks share one card: `system.ranks_per_card` where a target
        splits its cards into ranks (a rank's spec says so), else 1."""
        return int(getattr(self.system, "ranks_per_card", 1))  # type: ignore[attr-defined]

    def consistency(self) -> tuple[str, str] | None:
        """A relation between values that no single value can check, broken: (key to change,
        message). Targets override it; None: consistent."""
        return None

    # --- reading and setting by address ----------------------------------------------------------

    def value(self, dotted: str) -> int | float:
        """The value at an address, so reports and sweeps can quote any value by its file name."""
        try:
            param, entry = self.param(dotted)
        except HardwareError as e:
            raise HardwareError(f"{self.path}: {e}") from None
        got = getattr(getattr(self, param.table), param.key)
        return got[entry] if entry else got

    def values_except(self, prefixes: tuple[str, ...]) -> tuple:
        """Every value whose address does not start with one of `prefixes`, in declaration order:
        the cache key of work that reads none of those, so a sweep over them reuses it."""
        return _values_except(self, prefixes)

    def with_value(self, dotted: str, new: Any, source: str = "assumed: set by its address") -> Spec:
        """A copy with the value at `dotted` replaced, checked against its declared type and range
        and the target's relations between values; errors are one line naming the key."""
        return self.with_values({dotted: new}, source)

    def with_values(self, values: dict[str, Any], source: str = "assumed: set by its address") -> Spec:
        """A copy with several values replaced, each checked as `with_value` does; the relations
        between values are checked once all are set, so raising a peak and the sustained rate
        under it together does not depend on their order."""
        spec = self
        for dotted, new in values.items():
            spec = spec._replaced(dotted, new, source)
        broken = spec.consistency()
        if broken:
            raise HardwareError(f"{broken[0]}: {broken[1]}")
        return spec

    def _replaced(self, dotted: str, new: Any, source: str) -> Spec:
        param, entry = self.param(dotted)
        checked = param.check(dotted, new)
        if not SOURCE_PATTERN.match(source):
            raise HardwareError(
                f"{dotted}: source {describe(source)} must start with 'published:', 'derived:' or 'assumed:' "
                "followed by a reference"
            )
        table = getattr(self, param.table)
        if entry:
            checked = {**getattr(table, param.key), entry: checked}
        return replace(self, **{param.table: replace(table, **{param.key: checked})},
                       sources={**self.sources, dotted: source})  # fmt: skip

    def with_chips(self, chips: int | None) -> Spec:
        """The same chip in a system of `chips` (None: as specified), linked as the spec says: what
        `--chips N` means, so `--chips 4` on rngd is rngd-4."""
        system = self.system  # type: ignore[attr-defined]
        if chips is None or chips == system.chips:
            return self
        if chips < 1:
            raise HardwareOptionError("{chips} must be at least 1, got {value}", value=chips)
        source = f"derived: --chips {chips} ({self.name}'s chip, {chips} of them)"
        return replace(
            self, system=replace(system, chips=chips), sources={**self.sources, "system.chips": source}
        )

    def is_assumed(self, dotted: str) -> bool:
        """Whether a value is a modelling assumption (a knob) rather than published or derived."""
        return self.sources[dotted].startswith("assumed:")

    @property
    def assumed_keys(self) -> list[str]:
        """The addresses whose values are assumptions, for the 'assumptions' line of a report."""
        return [k for k in self.leaf_keys() if self.is_assumed(k)]

    # --- output ---------------------------------------------------------------------------------

    def parameters(self) -> list[tuple[str, int | float, str, str]]:
        """(address, value, unit, source) for every value in file order, for tables and JSON."""
        return [(k, self.value(k), self.param(k)[0].unit, self.sources[k]) for k in self.leaf_keys()]

    def parameters_dict(self) -> dict[str, Any]:
        """Every value with its unit and source, nested by table (and dtype)."""
        params: dict[str, Any] = {}
        for dotted, got, unit, source in self.parameters():
            *tables, key = dotted.split(".")
            node = params
            for t in tables:
                node = node.setdefault(t, {})
            node[key] = {"value": got, "unit": unit, "source": source}
        return params


@cache
def _tables(cls: type[Spec]) -> dict[str, type[Table]]:
    hints = typing.get_type_hints(cls)
    tables = {f.name: hints[f.name] for f in fields(cls)}
    return {
        name: t
        for name, t in tables.items()
        if isinstance(t, type) and issubclass(t, Table) and is_dataclass(t)
    }


@cache
def _params(cls: type[Spec]) -> dict[str, Param]:
    return {p.dotted: p for name, table in _tables(cls).items() for p in _table_params(name, table)}


@cache
def _leaf_keys(cls: type[Spec]) -> tuple[str, ...]:
    return tuple(k for p in _params(cls).values() for k in p.leaf_keys)


def build(cls: type[Spec], values: dict[str, Any], **meta: Any) -> Spec:
    """A spec of class `cls` from address -> value (every leaf key) and its name, path, sources..."""
    tables = {}
    for name, table in cls.tables().items():
        kwargs = {}
        for p in _table_params(name, table):
            kwargs[p.key] = {d: values[f"{p.dotted}.{d}"] for d in p.per} if p.per else values[p.dotted]
        tables[name] = table(**kwargs)
    return cls(**meta, **tables)


def describe(item: Any) -> str:
    """A TOML-flavoured name and value for error messages (bool is `true`, not `True`)."""
    if isinstance(item, bool):
        return f"boolean {str(item).lower()}"
    if isinstance(item, str):
        return f"string {item!r}"
    if isinstance(item, dict):
        return "a table"
    if isinstance(item, list):
        return "an array"
    if isinstance(item, float):
        return f"float {item:g}"
    return f"{type(item).__name__} {item}"


def suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


@lru_cache(maxsize=64)
def _values_except(spec: Spec, prefixes: tuple[str, ...]) -> tuple:
    return tuple(spec.value(k) for k in spec.leaf_keys() if not k.startswith(prefixes))
