"""The RNGD spec: its tables, each value declared once (type, unit, range), and the peaks derived
from them that the cost formulas, the mapper and the reports use.

Values come from a spec file (simulator/specs/*.toml), never from code, each with its source
(published / derived / assumed). The ranges are wide enough for any chip worth modelling, narrow
enough that no value overflows 64-bit arithmetic, divides by (nearly) zero or turns a derived
figure into infinity. Relations between values (a chip that cannot exist) are in `consistency`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.errors import HardwareError
from simulator.spec import DTypeName, EngineRates, Spec, Table, suggest, value
from simulator.targets.rngd.area import area_parts

# Operand dtypes the contraction engine tables are keyed by, and IR dtype names that map onto them.
DTYPES = ("bf16", "f16", "fp8", "i8", "i4", "f32")
_DTYPE_ALIASES = {"fp8e4m3": "fp8", "fp8e5m2": "fp8", "f8e4m3": "fp8", "f8e5m2": "fp8"}

_COUNT, _BYTES, _CYCLES, _RATE = (1, 1 << 16), (1, 1 << 40), (1, 10**9), (1e-3, 1e9)


@dataclass(frozen=True)
class System(Table):
    chips: int = value("", 1, 1024)
    link_bytes_per_s: float = value("B/s", 1e3, 1e15)
    link_latency_s: float = value("s", 1e-12, 1.0)
    kernel_launch_s: float = value("s", 1e-12, 1.0)
    host_pcie_bytes_per_cycle: float = value("B/cycle", *_RATE)
    # The card split into tensor-parallel ranks of fused PEs, as the serving runtime runs it
    # (Hardware.partitioned); a rank's spec has pe_partitions 1 and ranks_per_card the split.
    pe_partitions: int = value("", 1, 1024)
    ranks_per_card: int = value("", 1, 1024)
    pe_link_bytes_per_cycle: float = value("B/cycle/PE", *_RATE)
    pe_link_latency_cycles: int = value("cycles", *_CYCLES)


@dataclass(frozen=True)
class Host(Table):
    """The serving runtime's host work per iteration (tcp_compiler.serve.host): a fixed part and a
    part per sequence or token, for scheduling, input preparation and sampling."""

    schedule_s: float = value("s", 0.0, 1.0)
    schedule_per_sequence_s: float = value("s/sequence", 0.0, 1.0)
    prepare_s: float = value("s", 0.0, 1.0)
    prepare_per_token_s: float = value("s/token", 0.0, 1.0)
    sample_s: float = value("s", 0.0, 1.0)
    sample_per_sequence_s: float = value("s/sequence", 0.0, 1.0)


@dataclass(frozen=True)
class Chip(Table):
    clock_hz: float = value("Hz", 1e6, 1e11)
    clusters: int = value("", 1, 1024)
    pes_per_cluster: int = value("", 1, 1024)
    slices_per_pe: int = value("", 1, 4096)
    lanes_per_slice: int = value("", 1, 4096)
    flit_bytes: int = value("B", *_COUNT)
    packet_bytes: int = value("B", *_COUNT)
    tdp_w: float = value("W", 1e-3, 1e6)


@dataclass(frozen=True)
class Contraction(Table):
    macs_per_lane_cycle: dict[str, int] = value("MAC/lane/cycle", *_COUNT, per=DTYPES)
    packet_reducer_latency: dict[str, int] = value("cycles", *_CYCLES, per=DTYPES)
    accumulators_per_slice: int = value("", 1, 1 << 24)
    stream_supply_bytes: int = value("B/cycle", *_COUNT)


@dataclass(frozen=True)
class Vector(Table):
    int_ways: int = value("elem/cycle/slice", *_COUNT)
    float_ways: int = value("elem/cycle/slice", *_COUNT)
    alu_latency: int = value("cycles", *_CYCLES)
    inter_slice_reduce_hop_cycles: int = value("cycles/slice", *_CYCLES)


@dataclass(frozen=True)
class Memory(Table):
    dm_bytes_per_slice: int = value("B", *_BYTES)
    dm_bytes_per_cycle_per_slice: float = value("B/cycle", *_RATE)
    trf_bytes_per_slice: int = value("B", *_BYTES)
    vrf_bytes_per_slice: int = value("B", *_BYTES)
    fetch_main_bytes_per_cycle: int = value("B/cycle", *_COUNT)
    fetch_sub_bytes_per_cycle: int = value("B/cycle", *_COUNT)
    commit_main_bytes_per_cycle: int = value("B/cycle", *_COUNT)
    commit_sub_bytes_per_cycle: int = value("B/cycle", *_COUNT)


@dataclass(frozen=True)
class FetchAdapter(Table):
    lookup_bytes_per_cycle: int = value("B/cycle/slice", *_COUNT)
    convert_bytes_per_cycle: int = value("B/cycle/slice", *_COUNT)
    stage_latency_cycles: int = value("cycles", *_CYCLES)


@dataclass(frozen=True)
class Switch(Table):
    ring_slices: int = value("slices", 1, 1 << 24)
    hop_cycles: int = value("cycles", *_CYCLES)


@dataclass(frozen=True)
class Hbm(Table):
    capacity_bytes: int = value("B", 1, 1 << 60)
    peak_bytes_per_cycle: float = value("B/cycle", *_RATE)
    sustained_bytes_per_cycle: float = value("B/cycle", *_RATE)
    row_miss_cycles: int = value("cycles", *_CYCLES)
    access_bytes: int = value("B", 1, 1 << 30)


@dataclass(frozen=True)
class Dma(Table):
    engines: int = value("", 1, 1024)
    bytes_per_cycle_each: float = value("B/cycle", *_RATE)
    startup_cycles: int = value("cycles", *_CYCLES)
    issue_cycles: int = value("cycles", *_CYCLES)
    dm_side_bytes_per_cycle: float = value("B/cycle", *_RATE)
    max_packet_bytes: int = value("B", 1, 1 << 30)


_PJ = (0.0, 1e6)  # picojoules per action: 0 (free) to a microjoule


@dataclass(frozen=True)
class Energy(Table):
    """Dynamic energy per action at the nominal operating point (simulator.targets.rngd.energy counts
    the actions; docs/energy.md derives each value). On-chip actions scale with V^2 under DVFS."""

    mac_pj: dict[str, float] = value("pJ/MAC", *_PJ, per=DTYPES)
    vector_op_pj: float = value("pJ/element op", *_PJ)
    vector_operand_bytes: int = value("B", 1, 64)
    dm_pj_per_byte: float = value("pJ/B", *_PJ)
    trf_read_pj_per_byte: float = value("pJ/B", *_PJ)
    trf_write_pj_per_byte: float = value("pJ/B", *_PJ)
    vrf_read_pj_per_byte: float = value("pJ/B", *_PJ)
    vrf_write_pj_per_byte: float = value("pJ/B", *_PJ)
    fetch_pj_per_flit: float = value("pJ/flit", *_PJ)
    switch_pj_per_flit: float = value("pJ/flit", *_PJ)
    commit_pj_per_flit: float = value("pJ/flit", *_PJ)
    hbm_pj_per_byte: float = value("pJ/B", *_PJ)
    dma_pj_per_byte: float = value("pJ/B", *_PJ)
    link_pj_per_byte: float = value("pJ/B", *_PJ)
    host_pcie_pj_per_byte: float = value("pJ/B", *_PJ)


@dataclass(frozen=True)
class Power(Table):
    """Power states per chip at the nominal operating point: idle with the model resident (leakage
    included), the baseline the running device adds (clocks, sequencers), and the leakage share."""

    idle_w: float = value("W", 0.0, 1e5)
    active_baseline_w: float = value("W", 0.0, 1e5)
    leakage_w: float = value("W", 0.0, 1e5)


@dataclass(frozen=True)
class OperatingPoint(Table):
    """The voltage the chip runs at (at chip.clock_hz), the point the energy table is quoted at, and
    the lowest voltage DVFS may set (simulator.energy.dvfs_voltage)."""

    voltage_v: float = value("V", 0.1, 5.0)
    nominal_voltage_v: float = value("V", 0.1, 5.0)
    nominal_clock_hz: float = value("Hz", 1e6, 1e11)
    min_voltage_v: float = value("V", 0.1, 5.0)


@dataclass(frozen=True)
class Area(Table):
    """Silicon area per chip at the spec's process, by part (simulator.targets.rngd.area adds them):
    what each part costs per unit of what sizes it, so area moves with the values that size it."""

    sram_mm2_per_mib: float = value("mm2/MiB", 1e-4, 100.0)  # DM, TRF, VRF and other SRAM
    other_sram_mib: float = value("MiB", 0.0, 1e6)  # SRAM outside the slices (caches of the controllers)
    mac_mm2_per_kmac: dict[str, float] = value("mm2 per 1024 MAC/cycle", 0.0, 1e3, per=DTYPES)
    slice_logic_mm2: float = value("mm2/slice", 0.0, 100.0)  # a slice's engines besides its MACs and SRAM
    spare_slices_per_pe: int = value("slices", 0, 4096)  # built for yield, inactive
    hbm_phy_mm2: float = value("mm2/stack", 0.0, 1e3)  # PHY and controller per HBM stack
    hbm_stack_bytes_per_s: float = value("B/s", 1e6, 1e15)
    hbm_stack_capacity_bytes: int = value("B", 1, 1 << 50)
    link_port_mm2: float = value("mm2/port", 0.0, 1e3)  # PHY and controller per chip-link port
    link_port_bytes_per_s: float = value("B/s", 1e3, 1e15)
    fixed_mm2: float = value("mm2", 0.0, 1e4)  # what no value here sizes: CPUs, NoC, I/O ring
    published_die_mm2: float = value("mm2", 1.0, 1e5)  # the real die the sum is checked on (not a part)


@dataclass(frozen=True)
class Hardware(Spec):
    """A validated RNGD-class machine: its tables (`hw.hbm.sustained_bytes_per_cycle`), plus the
    derived peaks the cost formulas use. Counts and peaks are per chip unless named otherwise;
    `system.chips` says how many the system has."""

    system: System
    host: Host
    chip: Chip
    contraction: Contraction
    vector: Vector
    memory: Memory
    fetch_adapter: FetchAdapter
    switch: Switch
    hbm: Hbm
    dma: Dma
    energy: Energy
    power: Power
    operating_point: OperatingPoint
    area: Area

    __hash__ = Spec.__hash__  # by the cached hash of the values (a frozen dataclass would make its own)

    def dtype_key(self, dtype: DTypeName) -> str:
        """Maps an IR dtype (fp8e4m3, bf16, ... or its DType) onto the contraction tables' key, or raises."""
        dtype = dtype if isinstance(dtype, str) else dtype.name
        key = _DTYPE_ALIASES.get(dtype, dtype)
        if key not in self.contraction.macs_per_lane_cycle:
            raise HardwareError(
                f"{self.path}: contraction.macs_per_lane_cycle.{dtype}: no contraction rate for dtype "
                f"'{dtype}'{suggest(dtype, DTYPES)}; known: {', '.join(DTYPES)}"
            )
        return key

    # --- derived ------------------------------------------------------------------------------

    @property
    def slices_per_cluster(self) -> int:
        """Slices in one cluster (PEs x slices per PE); the switch ring and slice reducer span these."""
        return self.chip.pes_per_cluster * self.chip.slices_per_pe

    @property
    def slices(self) -> int:
        """Slices per chip; DM, TRF, VRF and contraction throughput all scale with this."""
        return self.chip.clusters * self.slices_per_cluster

    @property
    def pes(self) -> int:
        """PEs per chip (the unit SR-IOV and the vendor compiler count in)."""
        return self.chip.clusters * self.chip.pes_per_cluster

    def packet_elements(self, dtype: DTypeName) -> int:
        """Operand elements one lane reduces per cycle (one 64 B packet of bf16 = 32)."""
        return self.contraction.macs_per_lane_cycle[self.dtype_key(dtype)]

    def reducer_latency(self, dtype: DTypeName) -> int:
        """Packet reducer latency in cycles for operands of `dtype`."""
        return self.contraction.packet_reducer_latency[self.dtype_key(dtype)]

    def macs_per_cycle(self, dtype: DTypeName) -> int:
        """Peak MACs per cycle per chip: every lane of every slice consuming one full packet."""
        return self.slices * self.chip.lanes_per_slice * self.packet_elements(dtype)

    def flops_per_second(self, dtype: DTypeName) -> float:
        """Peak FLOP/s per chip (a MAC is two FLOPs), the compute roof of the roofline."""
        return 2.0 * self.macs_per_cycle(dtype) * self.chip.clock_hz

    @property
    def hbm_bytes_per_second(self) -> float:
        """Sustained HBM bandwidth per chip, the memory roof the simulator uses."""
        return self.hbm.sustained_bytes_per_cycle * self.chip.clock_hz

    @property
    def hbm_peak_bytes_per_second(self) -> float:
        """Peak HBM bandwidth per chip as published; an upper bound no phase may beat."""
        return self.hbm.peak_bytes_per_cycle * self.chip.clock_hz

    def ridge_flops_per_byte(self, dtype: DTypeName) -> float:
        """Arithmetic intensity where compute and sustained HBM bandwidth balance; below it, memory-bound."""
        return self.flops_per_second(dtype) / self.hbm_bytes_per_second

    @property
    def dm_bytes(self) -> int:
        """Data memory (SRAM) per chip: what tiles and resident weights must fit in."""
        return self.slices * self.memory.dm_bytes_per_slice

    @property
    def trf_bytes(self) -> int:
        """Tensor register file per chip (the stationary contraction operand)."""
        return self.slices * self.memory.trf_bytes_per_slice

    @property
    def vrf_bytes(self) -> int:
        """Vector register file per chip (vector engine operands)."""
        return self.slices * self.memory.vrf_bytes_per_slice

    @property
    def dma_bytes_per_cycle(self) -> float:
        """Aggregate TensorDMA bandwidth per chip: every engine at its full rate."""
        return self.dma.engines * self.dma.bytes_per_cycle_each

    @property
    def link_latency_cycles(self) -> int:
        """One chip-to-chip transfer's fixed latency in whole cycles."""
        return int(round(self.system.link_latency_s * self.chip.clock_hz))

    @property
    def link_bytes_per_second(self) -> float:
        """Chip-to-chip bandwidth per direction, the communication roof of the roofline."""
        return self.system.link_bytes_per_s

    @property
    def link_bytes_per_cycle(self) -> float:
        """Chip-to-chip bandwidth per direction in bytes per chip clock cycle."""
        return self.system.link_bytes_per_s / self.chip.clock_hz

    @property
    def pe_link_bytes_per_cycle(self) -> float:
        """What one rank of a card sends to the next PE to PE: its PEs' TensorDMA engines (one each)."""
        return self.pes * self.system.pe_link_bytes_per_cycle

    @property
    def rates(self) -> EngineRates:
        """The engine shares the sustained HBM rate and the TensorDMA engines' aggregate rate."""
        return EngineRates(self.chip.clock_hz, self.hbm.sustained_bytes_per_cycle, self.dma_bytes_per_cycle,
                           self.dma.engines, self.dma.bytes_per_cycle_each)  # fmt: skip

    @property
    def area_mm2(self) -> float:
        """Die area per chip (mm^2) as the area model adds it up from the spec's values."""
        return sum(area_parts(self).values())

    def seconds(self, cycles: float) -> float:
        """Wall time of a cycle count at the chip clock."""
        return cycles / self.chip.clock_hz

    def cycles(self, seconds: float) -> float:
        """Chip clock cycles in a wall time (for the spec's latencies given in seconds)."""
        return seconds * self.chip.clock_hz

    def consistency(self) -> tuple[str, str] | None:
        """A chip these values describe could not exist, or the mapping could not place anything
        on it: (key to change, message)."""
        if self.hbm.sustained_bytes_per_cycle > self.hbm.peak_bytes_per_cycle:
            return "hbm.sustained_bytes_per_cycle", (
                f"{self.hbm.sustained_bytes_per_cycle:g} exceeds hbm.peak_bytes_per_cycle "
                f"{self.hbm.peak_bytes_per_cycle:g}"
            )
        minimums = (  # a slice's memories hold at least this many packets (TRF: two halves of one each)
            ("memory.dm_bytes_per_slice", self.memory.dm_bytes_per_slice, 4),
            ("memory.trf_bytes_per_slice", self.memory.trf_bytes_per_slice, 2),
            ("memory.vrf_bytes_per_slice", self.memory.vrf_bytes_per_slice, 1),
        )
        for key, size, packets in minimums:
            if size < packets * self.chip.packet_bytes:
                return key, (
                    f"{size} bytes cannot hold {packets} packets of chip.packet_bytes; "
                    f"expected at least {packets * self.chip.packet_bytes}"
                )
        if self.power.leakage_w > self.power.idle_w:
            p = self.power
            return "power.leakage_w", f"{p.leakage_w:g} W exceeds power.idle_w {p.idle_w:g} W"
        if self.operating_point.min_voltage_v > self.operating_point.nominal_voltage_v:
            return "operating_point.min_voltage_v", (
                f"{self.operating_point.min_voltage_v:g} V exceeds operating_point.nominal_voltage_v "
                f"{self.operating_point.nominal_voltage_v:g} V"
            )
        if self.switch.ring_slices > self.slices_per_cluster:
            return "switch.ring_slices", (
                f"{self.switch.ring_slices} exceeds the {self.slices_per_cluster} slices of a cluster "
                "(chip.pes_per_cluster x chip.slices_per_pe)"
            )
        p = self.system.pe_partitions
        for key, count in (("PEs of the chip", self.pes), ("dma.engines", self.dma.engines)):
            if count % p:
                return "system.pe_partitions", f"{p} does not split the {count} {key} into equal ranks"
        return None

    def partitioned(self) -> Hardware:
        """One rank of each card split into `system.pe_partitions` tensor-parallel ranks of fused
        PEs, as the serving runtime runs a card: the rank's share of the PEs (whole clusters first),
        so of the slices and DM, and of HBM (bandwidth and capacity), the TensorDMA engines, the chip
        link and the power; `system.chips` then counts ranks and `system.ranks_per_card` says how
        many share a card. A spec of one rank per card is returned as it is."""
        p = self.system.pe_partitions
        if p == 1:
            return self
        chip = self.chip
        whole_clusters = chip.clusters % p == 0
        per_cluster = chip.pes_per_cluster if whole_clusters else self.pes // p
        values = {
            "system.chips": self.system.chips * p,
            "system.pe_partitions": 1,
            "system.ranks_per_card": p,
            "system.link_bytes_per_s": self.system.link_bytes_per_s / p,
            "chip.clusters": chip.clusters // p if whole_clusters else 1,
            "chip.pes_per_cluster": per_cluster,
            "chip.tdp_w": chip.tdp_w / p,
            "switch.ring_slices": min(self.switch.ring_slices, per_cluster * chip.slices_per_pe),
            "hbm.capacity_bytes": self.hbm.capacity_bytes // p,
            "hbm.peak_bytes_per_cycle": self.hbm.peak_bytes_per_cycle / p,
            "hbm.sustained_bytes_per_cycle": self.hbm.sustained_bytes_per_cycle / p,
            "dma.engines": self.dma.engines // p,
            "dma.dm_side_bytes_per_cycle": self.dma.dm_side_bytes_per_cycle / p,
            "power.idle_w": self.power.idle_w / p,
            "power.active_baseline_w": self.power.active_baseline_w / p,
            "power.leakage_w": self.power.leakage_w / p,
        }
        return self.with_values(values, f"derived: one of the {p} ranks of a card (system.pe_partitions)")

    def ranks(self, chips: int) -> tuple[Hardware, int]:
        """One rank's spec (`partitioned`) and the tensor-parallel ranks `chips` cards make."""
        return self.partitioned(), chips * self.system.pe_partitions

    # --- output -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: every parameter with unit and source, then the derived peaks."""
        per_dtype = {
            d: {
                "macs_per_cycle": self.macs_per_cycle(d),
                "flops_per_second": self.flops_per_second(d),
                "ridge_flops_per_byte": self.ridge_flops_per_byte(d),
            }
            for d in self.contraction.macs_per_lane_cycle
        }
        chips = self.system.chips
        return {
            "name": self.name,
            "path": str(self.path),
            "description": self.description,
            "extends": self.extends,
            "parameters": self.parameters_dict(),
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
                    "area_mm2": self.area_mm2,
                    "area_parts_mm2": area_parts(self),
                    "dtypes": per_dtype,
                },
                "system": {
                    "chips": chips,
                    "hbm_capacity_bytes": chips * self.hbm.capacity_bytes,
                    "hbm_bytes_per_second": chips * self.hbm_bytes_per_second,
                    "flops_per_second": {d: chips * v["flops_per_second"] for d, v in per_dtype.items()},
                },
            },
        }
