"""The hardware spec: one TOML file per machine, validated into a frozen `Hardware`.

Every number the cost formulas use lives in a spec file (simulator/specs/*.toml), never in code, and
every value records where it comes from (published / derived / assumed), so a report can say which of
its inputs are assumptions. A file may `extends` a preset or another file and override any values,
which makes a what-if study a three-line file.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from simulator.errors import HardwareError
from simulator.files import read_input

SPECS_DIR = Path(__file__).parent / "specs"

SOURCE_KINDS = ("published", "derived", "assumed")
_SOURCE_RE = re.compile(r"^(published|derived|assumed):\s*\S")

# Operand dtypes the contraction engine tables are keyed by, and IR dtype names that map onto them.
DTYPES = ("bf16", "f16", "fp8", "i8", "i4", "f32")
_DTYPE_ALIASES = {"fp8e4m3": "fp8", "fp8e5m2": "fp8", "f8e4m3": "fp8", "f8e5m2": "fp8"}



class NamedDType(Protocol):
    """An IR dtype (ir.DType) as the spec sees it: by name, so simulator/ does not import ir/."""

    name: str


DTypeName = str | NamedDType

# Top-level keys that are not parameter tables.
_META_KEYS = ("extends", "description")


@dataclass(frozen=True)
class Param:
    """One spec key: where it sits in the TOML file, its type, unit and `Hardware` attribute."""

    table: str
    key: str
    kind: type  # int (integers only) or float (any number, stored as float)
    unit: str
    attr: str
    per_dtype: bool = False  # a sub-table with one entry per dtype of DTYPES

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.key}"


def _p(
    table: str, key: str, kind: type, unit: str, attr: str | None = None, per_dtype: bool = False
) -> Param:
    return Param(table, key, kind, unit, attr or key, per_dtype)


# Attribute names are the key names; keys of [vector], [switch], [hbm] and [dma] are prefixed by their
# table because their bare names (ways, engines, capacity_bytes) would be ambiguous on `Hardware`.
PARAMS: tuple[Param, ...] = (
    _p("system", "chips", int, ""),
    _p("system", "link_bytes_per_s", float, "B/s"),
    _p("system", "link_latency_s", float, "s"),
    _p("system", "kernel_launch_s", float, "s"),
    _p("system", "host_pcie_bytes_per_cycle", float, "B/cycle"),
    _p("chip", "clock_hz", float, "Hz"),
    _p("chip", "clusters", int, ""),
    _p("chip", "pes_per_cluster", int, ""),
    _p("chip", "slices_per_pe", int, ""),
    _p("chip", "lanes_per_slice", int, ""),
    _p("chip", "flit_bytes", int, "B"),
    _p("chip", "packet_bytes", int, "B"),
    _p("chip", "tdp_w", float, "W"),
    _p("contraction", "macs_per_lane_cycle", int, "MAC/lane/cycle", per_dtype=True),
    _p("contraction", "packet_reducer_latency", int, "cycles", per_dtype=True),
    _p("contraction", "accumulators_per_slice", int, ""),
    _p("contraction", "stream_supply_bytes", int, "B/cycle"),
    _p("vector", "int_ways", int, "elem/cycle/slice", "vector_int_ways"),
    _p("vector", "float_ways", int, "elem/cycle/slice", "vector_float_ways"),
    _p("vector", "alu_latency", int, "cycles", "vector_alu_latency"),
    _p(
        "vector", "inter_slice_reduce_hop_cycles", int, "cycles/slice", "vector_inter_slice_reduce_hop_cycles"
    ),
    _p("memory", "dm_bytes_per_slice", int, "B"),
    _p("memory", "dm_bytes_per_cycle_per_slice", float, "B/cycle"),
    _p("memory", "trf_bytes_per_slice", int, "B"),
    _p("memory", "vrf_bytes_per_slice", int, "B"),
    _p("memory", "fetch_main_bytes_per_cycle", int, "B/cycle"),
    _p("memory", "fetch_sub_bytes_per_cycle", int, "B/cycle"),
    _p("memory", "commit_main_bytes_per_cycle", int, "B/cycle"),
    _p("memory", "commit_sub_bytes_per_cycle", int, "B/cycle"),
    _p("fetch_adapter", "lookup_bytes_per_cycle", int, "B/cycle/slice", "adapter_lookup_bytes_per_cycle"),
    _p("fetch_adapter", "convert_bytes_per_cycle", int, "B/cycle/slice", "adapter_convert_bytes_per_cycle"),
    _p("fetch_adapter", "stage_latency_cycles", int, "cycles", "adapter_stage_latency_cycles"),
    _p("switch", "ring_slices", int, "slices", "switch_ring_slices"),
    _p("switch", "hop_cycles", int, "cycles", "switch_hop_cycles"),
    _p("hbm", "capacity_bytes", int, "B", "hbm_capacity_bytes"),
    _p("hbm", "peak_bytes_per_cycle", float, "B/cycle", "hbm_peak_bytes_per_cycle"),
    _p("hbm", "sustained_bytes_per_cycle", float, "B/cycle", "hbm_sustained_bytes_per_cycle"),
    _p("hbm", "row_miss_cycles", int, "cycles", "hbm_row_miss_cycles"),
    _p("hbm", "access_bytes", int, "B", "hbm_access_bytes"),
    _p("dma", "engines", int, "", "dma_engines"),
    _p("dma", "bytes_per_cycle_each", float, "B/cycle", "dma_bytes_per_cycle_each"),
    _p("dma", "startup_cycles", int, "cycles", "dma_startup_cycles"),
    _p("dma", "dm_side_bytes_per_cycle", float, "B/cycle", "dma_dm_side_bytes_per_cycle"),
    _p("dma", "max_packet_bytes", int, "B", "dma_max_packet_bytes"),
)

# The range each value must lie in, inclusive: wide enough for any chip worth modelling, narrow enough
# that no value overflows 64-bit arithmetic, divides by (nearly) zero or turns a derived figure into
# infinity. Relations between values (a chip that cannot exist) are in _check_consistency.
_COUNT, _BYTES, _CYCLES, _RATE = (1, 1 << 16), (1, 1 << 40), (1, 10**9), (1e-3, 1e9)
RANGES: dict[str, tuple[float, float]] = {
    "system.chips": (1, 1024),
    "system.link_bytes_per_s": (1e3, 1e15),
    "system.link_latency_s": (1e-12, 1.0),
    "system.kernel_launch_s": (1e-12, 1.0),
    "system.host_pcie_bytes_per_cycle": _RATE,
    "chip.clock_hz": (1e6, 1e11),
    "chip.clusters": (1, 1024),
    "chip.pes_per_cluster": (1, 1024),
    "chip.slices_per_pe": (1, 4096),
    "chip.lanes_per_slice": (1, 4096),
    "chip.flit_bytes": _COUNT,
    "chip.packet_bytes": _COUNT,
    "chip.tdp_w": (1e-3, 1e6),
    "contraction.macs_per_lane_cycle": _COUNT,
    "contraction.packet_reducer_latency": _CYCLES,
    "contraction.accumulators_per_slice": (1, 1 << 24),
    "contraction.stream_supply_bytes": _COUNT,
    "vector.int_ways": _COUNT,
    "vector.float_ways": _COUNT,
    "vector.alu_latency": _CYCLES,
    "vector.inter_slice_reduce_hop_cycles": _CYCLES,
    "memory.dm_bytes_per_slice": _BYTES,
    "memory.dm_bytes_per_cycle_per_slice": _RATE,
    "memory.trf_bytes_per_slice": _BYTES,
    "memory.vrf_bytes_per_slice": _BYTES,
    "memory.fetch_main_bytes_per_cycle": _COUNT,
    "memory.fetch_sub_bytes_per_cycle": _COUNT,
    "memory.commit_main_bytes_per_cycle": _COUNT,
    "memory.commit_sub_bytes_per_cycle": _COUNT,
    "fetch_adapter.lookup_bytes_per_cycle": _COUNT,
    "fetch_adapter.convert_bytes_per_cycle": _COUNT,
    "fetch_adapter.stage_latency_cycles": _CYCLES,
    "switch.ring_slices": (1, 1 << 24),
    "switch.hop_cycles": _CYCLES,
    "hbm.capacity_bytes": (1, 1 << 60),
    "hbm.peak_bytes_per_cycle": _RATE,
    "hbm.sustained_bytes_per_cycle": _RATE,
    "hbm.row_miss_cycles": _CYCLES,
    "hbm.access_bytes": (1, 1 << 30),
    "dma.engines": (1, 1024),
    "dma.bytes_per_cycle_each": _RATE,
    "dma.startup_cycles": _CYCLES,
    "dma.dm_side_bytes_per_cycle": _RATE,
    "dma.max_packet_bytes": (1, 1 << 30),
}
MAX_EXTENDS_DEPTH = 16  # files in one `extends` chain; presets use 2
MAX_SPEC_BYTES = 1 << 20  # a spec is a few KB of TOML

TABLES: tuple[str, ...] = tuple(dict.fromkeys(p.table for p in PARAMS))
_BY_TABLE: dict[str, dict[str, Param]] = {t: {p.key: p for p in PARAMS if p.table == t} for t in TABLES}


def _leaf_keys(p: Param) -> list[str]:
    """The dotted keys a parameter occupies: one, or one per dtype."""
    return [f"{p.dotted}.{d}" for d in DTYPES] if p.per_dtype else [p.dotted]


LEAF_KEYS: tuple[str, ...] = tuple(k for p in PARAMS for k in _leaf_keys(p))
_UNITS = {k: p.unit for p in PARAMS for k in _leaf_keys(p)}


@dataclass(frozen=True)
class Hardware:
    """A validated machine: one attribute per spec key, plus the derived peaks the cost formulas use.

    Counts and peaks are per chip unless named otherwise; `chips` says how many the system has.
    Instances are hashable so cost caches can be keyed by (shape, dtype, hardware).
    """

    name: str
    path: Path
    description: str
    extends: str | None
    # [system]
    chips: int
    link_bytes_per_s: float
    link_latency_s: float
    kernel_launch_s: float
    host_pcie_bytes_per_cycle: float
    # [chip]
    clock_hz: float
    clusters: int
    pes_per_cluster: int
    slices_per_pe: int
    lanes_per_slice: int
    flit_bytes: int
    packet_bytes: int
    tdp_w: float
    # [contraction]
    macs_per_lane_cycle: dict[str, int]
    packet_reducer_latency: dict[str, int]
    accumulators_per_slice: int
    stream_supply_bytes: int
    # [vector]
    vector_int_ways: int
    vector_float_ways: int
    vector_alu_latency: int
    vector_inter_slice_reduce_hop_cycles: int
    # [memory]
    dm_bytes_per_slice: int
    dm_bytes_per_cycle_per_slice: float
    trf_bytes_per_slice: int
    vrf_bytes_per_slice: int
    fetch_main_bytes_per_cycle: int
    fetch_sub_bytes_per_cycle: int
    commit_main_bytes_per_cycle: int
    commit_sub_bytes_per_cycle: int
    # [fetch_adapter]
    adapter_lookup_bytes_per_cycle: int
    adapter_convert_bytes_per_cycle: int
    adapter_stage_latency_cycles: int
    # [switch]
    switch_ring_slices: int
    switch_hop_cycles: int
    # [hbm]
    hbm_capacity_bytes: int
    hbm_peak_bytes_per_cycle: float
    hbm_sustained_bytes_per_cycle: float
    hbm_row_miss_cycles: int
    hbm_access_bytes: int
    # [dma]
    dma_engines: int
    dma_bytes_per_cycle_each: float
    dma_startup_cycles: int
    dma_dm_side_bytes_per_cycle: float
    dma_max_packet_bytes: int
    # dotted key (e.g. "hbm.peak_bytes_per_cycle", "contraction.macs_per_lane_cycle.bf16") -> source
    sources: dict[str, str]
    # Cost caches are keyed by the spec: hashing every value on each lookup would dominate them.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, *(self.value(k) for k in LEAF_KEYS))))

    def __hash__(self) -> int:
        return self._hash

    # --- lookup -------------------------------------------------------------------------------

    def value(self, dotted: str) -> int | float:
        """The value of a dotted spec key, so reports can quote any parameter by its file name."""
        parts = dotted.split(".")
        param = _BY_TABLE.get(parts[0], {}).get(parts[1]) if len(parts) >= 2 else None
        if param is None or len(parts) != (3 if param.per_dtype else 2):
            raise HardwareError(f"{self.path}: {dotted}: no such key")
        got = getattr(self, param.attr)
        return got[parts[2]] if param.per_dtype else got

    def is_assumed(self, dotted: str) -> bool:
        """Whether a value is a modelling assumption (a knob) rather than published or derived."""
        return self.sources[dotted].startswith("assumed:")

    @property
    def assumed_keys(self) -> list[str]:
        """The dotted keys whose values are assumptions, for the 'assumptions' line of a report."""
        return [k for k in LEAF_KEYS if self.is_assumed(k)]

    def dtype_key(self, dtype: DTypeName) -> str:
        """Maps an IR dtype (fp8e4m3, bf16, ... or its DType) onto the contraction tables' key, or raises."""
        dtype = dtype if isinstance(dtype, str) else dtype.name
        key = _DTYPE_ALIASES.get(dtype, dtype)
        if key not in self.macs_per_lane_cycle:
            raise HardwareError(
                f"{self.path}: contraction.macs_per_lane_cycle.{dtype}: no contraction rate for dtype "
                f"'{dtype}'{_suggest(dtype, DTYPES)}; known: {', '.join(DTYPES)}"
            )
        return key

    # --- derived ------------------------------------------------------------------------------

    @property
    def slices_per_cluster(self) -> int:
        """Slices in one cluster (PEs x slices per PE); the switch ring and slice reducer span these."""
        return self.pes_per_cluster * self.slices_per_pe

    @property
    def slices(self) -> int:
        """Slices per chip; DM, TRF, VRF and contraction throughput all scale with this."""
        return self.clusters * self.slices_per_cluster

    @property
    def pes(self) -> int:
        """PEs per chip (the unit SR-IOV and the vendor compiler count in)."""
        return self.clusters * self.pes_per_cluster

    def packet_elements(self, dtype: DTypeName) -> int:
        """Operand elements one lane reduces per cycle (one 64 B packet of bf16 = 32)."""
        return self.macs_per_lane_cycle[self.dtype_key(dtype)]

    def reducer_latency(self, dtype: DTypeName) -> int:
        """Packet reducer latency in cycles for operands of `dtype`."""
        return self.packet_reducer_latency[self.dtype_key(dtype)]

    def macs_per_cycle(self, dtype: DTypeName) -> int:
        """Peak MACs per cycle per chip: every lane of every slice consuming one full packet."""
        return self.slices * self.lanes_per_slice * self.packet_elements(dtype)

    def flops_per_second(self, dtype: DTypeName) -> float:
        """Peak FLOP/s per chip (a MAC is two FLOPs), the compute roof of the roofline."""
        return 2.0 * self.macs_per_cycle(dtype) * self.clock_hz

    @property
    def hbm_bytes_per_second(self) -> float:
        """Sustained HBM bandwidth per chip, the memory roof the simulator uses."""
        return self.hbm_sustained_bytes_per_cycle * self.clock_hz

    @property
    def hbm_peak_bytes_per_second(self) -> float:
        """Peak HBM bandwidth per chip as published; an upper bound no phase may beat."""
        return self.hbm_peak_bytes_per_cycle * self.clock_hz

    def ridge_flops_per_byte(self, dtype: DTypeName) -> float:
        """Arithmetic intensity where compute and sustained HBM bandwidth balance; below it, memory-bound."""
        return self.flops_per_second(dtype) / self.hbm_bytes_per_second

    @property
    def dm_bytes(self) -> int:
        """Data memory (SRAM) per chip: what tiles and resident weights must fit in."""
        return self.slices * self.dm_bytes_per_slice

    @property
    def trf_bytes(self) -> int:
        """Tensor register file per chip (the stationary contraction operand)."""
        return self.slices * self.trf_bytes_per_slice

    @property
    def vrf_bytes(self) -> int:
        """Vector register file per chip (vector engine operands)."""
        return self.slices * self.vrf_bytes_per_slice

    @property
    def dma_bytes_per_cycle(self) -> float:
        """Aggregate TensorDMA bandwidth per chip: every engine at its full rate."""
        return self.dma_engines * self.dma_bytes_per_cycle_each

    @property
    def link_latency_cycles(self) -> int:
        """One chip-to-chip transfer's fixed latency in whole cycles."""
        return int(round(self.link_latency_s * self.clock_hz))

    @property
    def link_bytes_per_cycle(self) -> float:
        """Chip-to-chip bandwidth per direction in bytes per chip clock cycle."""
        return self.link_bytes_per_s / self.clock_hz

    def seconds(self, cycles: float) -> float:
        """Wall time of a cycle count at the chip clock."""
        return cycles / self.clock_hz

    def cycles(self, seconds: float) -> float:
        """Chip clock cycles in a wall time (for the spec's latencies given in seconds)."""
        return seconds * self.clock_hz

    def with_chips(self, chips: int | None) -> Hardware:
        """The same chip in a system of `chips` (None: as specified), linked as the spec says: what
        `--chips N` means, so `--chips 4` on rngd is rngd-4."""
        if chips is None or chips == self.chips:
            return self
        if chips < 1:
            raise HardwareError(f"--chips must be at least 1, got {chips}")
        source = f"derived: --chips {chips} ({self.name}'s chip, {chips} of them)"
        return replace(self, chips=chips, sources={**self.sources, "system.chips": source})

    # --- output -------------------------------------------------------------------------------

    def parameters(self) -> list[tuple[str, int | float, str, str]]:
        """(dotted key, value, unit, source) for every leaf key in file order, for tables and JSON."""
        return [(k, self.value(k), _UNITS[k], self.sources[k]) for k in LEAF_KEYS]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: every parameter with unit and source, then the derived peaks."""
        params: dict[str, Any] = {}
        for dotted, value, unit, source in self.parameters():
            *tables, key = dotted.split(".")
            node = params
            for t in tables:
                node = node.setdefault(t, {})
            node[key] = {"value": value, "unit": unit, "source": source}
        per_dtype = {
            d: {
                "macs_per_cycle": self.macs_per_cycle(d),
                "flops_per_second": self.flops_per_second(d),
                "ridge_flops_per_byte": self.ridge_flops_per_byte(d),
            }
            for d in self.macs_per_lane_cycle
        }
        return {
            "name": self.name,
            "path": str(self.path),
            "description": self.description,
            "extends": self.extends,
            "parameters": params,
            "assumed": self.assumed_keys,
            "derived": {
                "per_chip": {
                    "pes": self.pes,
                    "slices_per_cluster": self.slices_per_cluster,
                    "slices": self.slices,
                    "dm_bytes": self.dm_bytes,
                    "trf_bytes": self.trf_bytes,
                    "vrf_bytes": self.vrf_bytes,
                    "hbm_bytes_per_second": self.hbm_bytes_per_second,
                    "hbm_peak_bytes_per_second": self.hbm_peak_bytes_per_second,
                    "link_bytes_per_cycle": self.link_bytes_per_cycle,
                    "dtypes": per_dtype,
                },
                "system": {
                    "chips": self.chips,
                    "hbm_capacity_bytes": self.chips * self.hbm_capacity_bytes,
                    "hbm_bytes_per_second": self.chips * self.hbm_bytes_per_second,
                    "flops_per_second": {d: self.chips * v["flops_per_second"] for d, v in per_dtype.items()},
                },
            },
        }


# --- loading ------------------------------------------------------------------------------------


def list_presets() -> list[str]:
    """Names of the bundled specs, as `load_hardware` and `tcpc hw show` accept them."""

    def natural(name: str) -> list[Any]:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]

    return sorted((p.stem for p in SPECS_DIR.glob("*.toml")), key=natural)


def load_hardware(name_or_path: str | Path, chips: int | None = None) -> Hardware:
    """Loads a preset by name (`rngd`, `rngd-4`) or a spec file by path, applying `extends`; with
    `chips`, as a system of that many of its chips (Hardware.with_chips)."""
    path = _resolve(name_or_path)
    entries, meta = _load_entries(path, ())
    for key in LEAF_KEYS:
        if key not in entries:
            raise HardwareError(f"{path}: {key}: missing key (not set here nor in what it extends)")
    values: dict[str, Any] = {}
    sources = {k: entries[k][1] for k in LEAF_KEYS}
    for p in PARAMS:
        if p.per_dtype:
            values[p.attr] = {d: entries[f"{p.dotted}.{d}"][0] for d in DTYPES}
        else:
            values[p.attr] = entries[p.dotted][0]
    hw = Hardware(
        name=path.stem,
        path=path,
        description=meta.get("description", ""),
        extends=meta.get("extends"),
        sources=sources,
        **values,
    )
    _check_consistency(hw, path, entries)
    return hw.with_chips(chips)


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or "\\" in text or text.endswith(".toml"):
        return Path(text)
    preset = SPECS_DIR / f"{text}.toml"
    if preset.is_file():
        return preset
    if Path(text).is_file():
        return Path(text)
    presets = list_presets()
    raise HardwareError(
        f"{text}: unknown hardware preset{_suggest(text, presets)}; presets: {', '.join(presets)} "
        "(or give the path of a .toml file)"
    )


# An entry is (value, source, file it was set in).
_Entry = tuple[Any, str, Path]


def _load_entries(path: Path, stack: tuple[Path, ...]) -> tuple[dict[str, _Entry], dict[str, str]]:
    """Flattens one file (and what it extends) into dotted key -> entry; the file's entries win."""
    doc = _read_toml(path)
    meta: dict[str, str] = {}
    for key in _META_KEYS:
        if key in doc and not isinstance(doc[key], str):
            raise HardwareError(f"{path}: {key}: expected a string, got {_describe(doc[key])}")
    entries: dict[str, _Entry] = {}
    if "extends" in doc:
        if len(stack) + 1 >= MAX_EXTENDS_DEPTH:
            raise HardwareError(
                f"{path}: extends: the chain is more than {MAX_EXTENDS_DEPTH} files deep "
                f"(it starts at {stack[0] if stack else path})"
            )
        base = _resolve_extends(path, doc["extends"], stack)
        entries, meta = _load_entries(base, (*stack, _identity(path)))
        meta = {**meta, "extends": doc["extends"]}
    if "description" in doc:
        meta["description"] = doc["description"]
    for table, body in doc.items():
        if table in _META_KEYS:
            continue
        if table not in _BY_TABLE:
            raise HardwareError(f"{path}: {table}: unknown table{_suggest(table, TABLES)}")
        if not isinstance(body, dict):
            raise HardwareError(f"{path}: {table}: expected a table [{table}], got {_describe(body)}")
        for key, item in body.items():
            dotted = f"{table}.{key}"
            param = _BY_TABLE[table].get(key)
            if param is None:
                known = [p.dotted for p in PARAMS]
                raise HardwareError(f"{path}: {dotted}: unknown key{_suggest(dotted, known)}")
            if not param.per_dtype:
                entries[dotted] = _entry(path, dotted, param, item)
                continue
            if not isinstance(item, dict) or "value" in item or "source" in item:
                raise HardwareError(
                    f"{path}: {dotted}: expected a table with one entry per dtype ({', '.join(DTYPES)})"
                )
            for dtype, sub in item.items():
                if dtype not in DTYPES:
                    raise HardwareError(
                        f"{path}: {dotted}.{dtype}: unknown dtype{_suggest(dtype, DTYPES)}; "
                        f"known: {', '.join(DTYPES)}"
                    )
                entries[f"{dotted}.{dtype}"] = _entry(path, f"{dotted}.{dtype}", param, sub)
    return entries, meta


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = read_input(path, MAX_SPEC_BYTES, "hardware specs")
    except OSError as e:
        raise HardwareError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HardwareError(f"{path}: cannot read: not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise HardwareError(f"{path}: TOML nested too deeply") from None
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if where is None:
            raise HardwareError(f"{path}: TOML syntax error: {message}") from None
        line, column = int(where.group(1)), int(where.group(2))
        reason = message[: where.start()] + message[where.end() :]
        key = _key_at_line(text, line)
        at = f" {key}:" if key else ""
        raise HardwareError(f"{path}:{line}:{column}:{at} TOML syntax error: {reason}") from None


def _key_at_line(text: str, line: int) -> str | None:
    """The dotted key a syntax error sits on, so the message says which setting to fix."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    table = ""
    for previous in lines[: line - 1]:
        header = re.match(r"\s*\[+\s*([A-Za-z0-9_.\- ]+?)\s*\]+\s*(#.*)?$", previous)
        if header:
            table = header.group(1).replace(" ", "")
    assignment = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*=", lines[line - 1])
    if assignment is None:
        return None
    key = assignment.group(1)
    return f"{table}.{key}" if table else key


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _resolve_extends(path: Path, target: str, stack: tuple[Path, ...]) -> Path:
    """`extends` names a preset, or a file relative to the extending file; cycles are errors."""
    if "/" in target or "\\" in target or target.endswith(".toml"):
        base = path.parent / target
        if not base.is_file():
            raise HardwareError(f"{path}: extends: cannot read '{target}' (looked for {base})")
    else:
        base = SPECS_DIR / f"{target}.toml"
        if not base.is_file():
            presets = list_presets()
            raise HardwareError(
                f"{path}: extends: unknown preset '{target}'{_suggest(target, presets)}; "
                f"presets: {', '.join(presets)}"
            )
    chain = (*stack, _identity(path))
    if _identity(base) in chain:
        names = [p.name for p in chain[chain.index(_identity(base)) :]] + [base.name]
        raise HardwareError(f"{path}: extends: cycle {' -> '.join(names)}")
    return base


def _entry(path: Path, dotted: str, param: Param, item: Any) -> _Entry:
    """Checks one `{ value = ..., source = "..." }` entry where it is written."""
    if not isinstance(item, dict):
        raise HardwareError(
            f'{path}: {dotted}: expected {{ value = ..., source = "..." }}, got {_describe(item)}'
        )
    for name in item:
        if name not in ("value", "source"):
            raise HardwareError(
                f"{path}: {dotted}.{name}: unknown field; an entry has only value and source"
            )
    if "value" not in item:
        raise HardwareError(f"{path}: {dotted}: missing value")
    if "source" not in item:
        raise HardwareError(
            f"{path}: {dotted}: missing source; every value says where it comes from "
            "('published: ...', 'derived: ...' or 'assumed: ...')"
        )
    source = item["source"]
    if not isinstance(source, str) or not _SOURCE_RE.match(source):
        raise HardwareError(
            f"{path}: {dotted}: source {_describe(source)} must start with 'published:', 'derived:' or "
            "'assumed:' followed by a reference"
        )
    value = item["value"]
    lo, hi = RANGES[param.dotted]
    if param.kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise HardwareError(
                f"{path}: {dotted}: expected an integer from {lo:,} to {hi:,}, got {_describe(value)}"
            )
    else:
        if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
            raise HardwareError(
                f"{path}: {dotted}: expected a number from {lo:g} to {hi:g}, got {_describe(value)}"
            )
        value = float(value)
    return value, source, path


def _check_consistency(hw: Hardware, path: Path, entries: dict[str, _Entry]) -> None:
    """Relations between values that no single entry can check: a chip they describe could not
    exist, or the mapping could not place anything on it. Each names the file the user gave (the
    value at fault may be one it inherits) and the key to change."""

    def fail(key: str, message: str) -> HardwareError:
        origin = entries[key][2]
        inherited = f" (a value {path.name} inherits from {origin})" if origin != path else ""
        return HardwareError(f"{path}: {key}: {message}{inherited}")

    if hw.hbm_sustained_bytes_per_cycle > hw.hbm_peak_bytes_per_cycle:
        raise fail(
            "hbm.sustained_bytes_per_cycle",
            f"{hw.hbm_sustained_bytes_per_cycle:g} exceeds hbm.peak_bytes_per_cycle "
            f"{hw.hbm_peak_bytes_per_cycle:g}",
        )
    minimums = (  # a slice's memories hold at least this many packets (TRF: two halves of one each)
        ("memory.dm_bytes_per_slice", hw.dm_bytes_per_slice, 4),
        ("memory.trf_bytes_per_slice", hw.trf_bytes_per_slice, 2),
        ("memory.vrf_bytes_per_slice", hw.vrf_bytes_per_slice, 1),
    )
    for key, size, packets in minimums:
        if size < packets * hw.packet_bytes:
            raise fail(
                key,
                f"{size} bytes cannot hold {packets} packets of chip.packet_bytes; "
                f"expected at least {packets * hw.packet_bytes}",
            )
    if hw.switch_ring_slices > hw.slices_per_cluster:
        raise fail(
            "switch.ring_slices",
            f"{hw.switch_ring_slices} exceeds the {hw.slices_per_cluster} slices of a cluster "
            "(chip.pes_per_cluster x chip.slices_per_pe)",
        )


def _describe(value: Any) -> str:
    """A TOML-flavoured name and value for error messages (bool is `true`, not `True`)."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, float):
        return f"float {value:g}"
    return f"{type(value).__name__} {value}"


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# The schema and the dataclass list the same attributes, and every key has a range; checked at import.
assert set(RANGES) == {p.dotted for p in PARAMS}, set(RANGES) ^ {p.dotted for p in PARAMS}
_FIELDS = set(Hardware.__dataclass_fields__) - {"name", "path", "description", "extends", "sources", "_hash"}
assert {p.attr for p in PARAMS} == _FIELDS, _FIELDS ^ {p.attr for p in PARAMS}
