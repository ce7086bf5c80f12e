"""The Program: flat arrays of tile-level commands, what the compiler hands the simulator.

Each command runs on one execution context of one chip (its target's `Sites`: on RNGD the main
Tensor Unit pipeline, sub pipeline, TensorDMA, chip link), takes `cycles` there when it has its
resources to itself, depends on earlier commands, and carries the FLOPs and bytes it accounts for,
plus how long it keeps each hardware unit busy (for utilisation reports). A Program carries its
target's Sites, so what its context and busy columns index is never a global of one machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from simulator.target import Sites

# The per-command columns, in the order ProgramBuilder.command records them.
COLUMNS = (
    ("context", np.int8),
    ("chip", np.int16),
    ("cycles", np.int64),
    ("latency", np.int64),
    ("moved", np.int64),
    ("flops", np.int64),
    ("hbm_bytes", np.int64),
    ("dm_bytes", np.int64),
    ("link_bytes", np.int64),
    ("op", np.int32),
)


@dataclass
class OpInfo:
    """The IR op (fused pass) a group of commands came from."""

    name: str
    kind: str
    layer: int
    nodes: tuple[str, ...] = ()
    placement: str = ""
    inputs: tuple[str, ...] = ()  # the values it reads from memory
    role: str = ""  # what it does in its layer, the same in every layer (the report groups by it)
    operand: str = ""  # the dtype its contraction multiplies in ("" without one): its compute roof


@dataclass
class Program:
    context: np.ndarray  # int8 index into sites.contexts
    chip: np.ndarray  # int16
    cycles: np.ndarray  # int64, duration when uncontended
    latency: np.ndarray  # int64, the fixed part of `cycles` (DMA start-up); the rest moves `moved` bytes
    moved: np.ndarray  # int64, bytes a DMA command moves (shares the chip's DMA bandwidth)
    flops: np.ndarray  # int64
    hbm_bytes: np.ndarray  # int64
    dm_bytes: np.ndarray  # int64
    link_bytes: np.ndarray  # int64
    op: np.ndarray  # int32 index into ops
    busy: np.ndarray  # int64 [commands, len(sites.units)]
    dep_ptr: np.ndarray  # int64 [commands + 1]: deps of command i are dep_idx[dep_ptr[i]:dep_ptr[i+1]]
    dep_idx: np.ndarray  # int64, each < the command's own index
    sites: Sites  # the target's contexts and units the columns index
    ops: list[OpInfo] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.cycles)

    def refilled(self, rows: list[PreparedCommand]) -> Program:
        """The same commands, dependencies and ops with each command's values (cycles, bytes,
        busy cycles) from `rows`, in command order (their contexts must be this program's)."""
        values = np.array([r.values for r in rows], np.int64).reshape(len(rows), len(_PREPARED))
        assert np.array_equal(values[:, 0], self.context), "a refill changes what runs where"
        columns = {name: values[:, k].astype(dict(COLUMNS)[name]) for k, name in enumerate(_PREPARED) if k}
        busy = np.array([r.busy for r in rows], np.int64).reshape(self.busy.shape)
        return replace(self, **columns, busy=busy)

    def deps(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i] : self.dep_ptr[i + 1]]

    def validate(self) -> None:
        """Checks the invariants the engine relies on (dependencies point backwards, sizes agree)."""
        n = len(self)
        for name, _ in COLUMNS:
            assert len(getattr(self, name)) == n, name
        assert self.busy.shape == (n, len(self.sites.units))
        assert np.all(self.context < len(self.sites.contexts))
        assert len(self.dep_ptr) == n + 1 and self.dep_ptr[0] == 0 and self.dep_ptr[-1] == len(self.dep_idx)
        owners = np.repeat(np.arange(n), np.diff(self.dep_ptr))
        assert np.all(self.dep_idx < owners), "a command depends on a later one"
        assert np.all(self.cycles >= 1)
        assert np.all((self.latency >= 0) & (self.latency <= self.cycles))


# The per-command columns a block of programs may vary in (ProgramBlock.values), in this order.
VARYING = ("cycles", "latency", "moved", "flops", "hbm_bytes", "dm_bytes", "link_bytes")


@dataclass
class ProgramBlock:
    """Programs of one structure that differ only in some commands' figures: decode steps at
    consecutive KV lengths (a recipe book's DecodeSteps). Program k is `base` with commands `rows`
    given values[k] (the VARYING columns) and busy[k]; the engine and the op totals take a block
    whole, so its programs need not be built one by one."""

    base: Program
    rows: np.ndarray  # [R] the commands that vary
    values: np.ndarray  # int64 [programs, R, len(VARYING)]
    busy: np.ndarray  # int64 [programs, R, len(base.sites.units)]

    def __len__(self) -> int:
        return self.values.shape[0]

    def program(self, k: int) -> Program:
        """Program k, built (a copy of the base with its rows written, one assignment per column)."""
        if not len(self.rows):
            return self.base
        columns = {name: getattr(self.base, name).copy() for name in VARYING}
        self.write(k, columns)
        busy = self.base.busy.copy()
        busy[self.rows] = self.busy[k]
        return replace(self.base, **columns, busy=busy)

    def write(self, k: int, columns: dict[str, np.ndarray]) -> None:
        """Writes program k's values into `columns` (copies of some of the base's VARYING columns)."""
        for name, column in columns.items():
            column[self.rows] = self.values[k, :, VARYING.index(name)]

    def sums(self, name: str) -> np.ndarray:
        """Per program, the sum of a VARYING column over its commands (exact integers)."""
        base = getattr(self.base, name)
        varying = self.values[:, :, VARYING.index(name)]
        return int(base.sum()) - int(base[self.rows].sum()) + varying.sum(axis=1)


def command_timing(cycles: int, latency: int | None) -> tuple[int, int]:
    """A command's (cycles, latency) as stored: at least one cycle; no latency given = all of it."""
    cycles = max(1, cycles)
    return cycles, cycles if latency is None else latency


# The columns a PreparedCommand holds, in its order (the chip and op are the builder's).
_PREPARED = ("context", "cycles", "latency", "moved", "flops", "hbm_bytes", "dm_bytes", "link_bytes")


@dataclass(frozen=True)
class PreparedCommand:
    """A command's row without its chip and op (COLUMNS' order), and its busy cycles per unit."""

    values: tuple[int, ...]
    busy: tuple[int, ...]


class ProgramBuilder:
    """Appends commands on a target's sites; turns them into the Program's flat arrays at the end."""

    def __init__(self, sites: Sites) -> None:
        self.sites = sites
        self._context = {name: i for i, name in enumerate(sites.context_names)}
        self._unit = {name: i for i, name in enumerate(sites.unit_names)}
        self.rows: list[tuple] = []
        self.busy: list[tuple[int, ...]] = []
        self.deps: list[list[int]] = []
        self.ops: list[OpInfo] = []

    def op(self, info: OpInfo) -> int:
        self.ops.append(info)
        return len(self.ops) - 1

    def command(
        self,
        context: str,
        op: int,
        cycles: int,
        deps=(),
        *,
        latency: int | None = None,
        moved: int = 0,
        chip: int = 0,
        flops: int = 0,
        hbm_bytes: int = 0,
        dm_bytes: int = 0,
        link_bytes: int = 0,
        busy: dict[str, int] | None = None,
    ) -> int:
        row = self.prepare(context, cycles, latency=latency, moved=moved, flops=flops, hbm_bytes=hbm_bytes,
                           dm_bytes=dm_bytes, link_bytes=link_bytes, busy=busy)  # fmt: skip
        return self.add(row, op, deps, chip)

    def prepare(
        self,
        context: str,
        cycles: int,
        *,
        latency: int | None = None,
        moved: int = 0,
        flops: int = 0,
        hbm_bytes: int = 0,
        dm_bytes: int = 0,
        link_bytes: int = 0,
        busy: dict[str, int] | None = None,
    ) -> PreparedCommand:
        """A command's values as its row will hold them, so a command repeated (every layer's copy
        of an op) is converted once and added many times."""
        cycles, latency = command_timing(cycles, latency)
        units = [0] * len(self._unit)
        for unit, value in (busy or {}).items():
            units[self._unit[unit]] = value
        values = (self._context[context], cycles, latency, moved, flops, hbm_bytes, dm_bytes, link_bytes)
        return PreparedCommand(values, tuple(units))

    def add(self, row: PreparedCommand, op: int, deps=(), chip: int = 0) -> int:
        """Appends a prepared command of op `op` on `chip`, after `deps` (None entries skipped)."""
        context, *values = row.values
        self.rows.append((context, chip, *values, op))
        self.busy.append(row.busy)
        self.deps.append(sorted({d for d in deps if d is not None}))
        return len(self.rows) - 1

    def build(self) -> Program:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(COLUMNS)
        arrays = [np.array(c, dtype=t) for c, (_, t) in zip(cols, COLUMNS, strict=True)]
        ptr = np.zeros(len(self.deps) + 1, np.int64)
        ptr[1:] = np.cumsum([len(d) for d in self.deps])
        idx = np.array([d for ds in self.deps for d in ds], np.int64)
        busy = np.array(self.busy, np.int64).reshape(len(self.rows), len(self._unit))
        program = Program(*arrays, busy, ptr, idx, self.sites, self.ops)
        program.validate()
        return program
