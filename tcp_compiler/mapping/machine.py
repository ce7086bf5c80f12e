"""The hardware constants the mapping's cost formulas use, read from the hardware spec.

One place turns a simulator Hardware into plain numbers per chip, so every formula in the
mapping takes its constants from the spec (TOML) and none from literals.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir import DType

# IR dtype -> the spec's name for the contraction engine's operand type.
CE_DTYPES = {
    "bf16": "bf16",
    "f16": "f16",
    "fp8e4m3": "fp8",
    "fp8e5m2": "fp8",
    "i8": "i8",
    "i4": "i4",
    "f32": "f32",
}


@dataclass(frozen=True)
class Machine:
    name: str
    chips: int
    clock_hz: float
    clusters: int
    slices: int  # per chip
    slices_per_cluster: int
    lanes: int
    packet_bytes: int
    flit_bytes: int
    macs_per_lane: tuple[tuple[str, int], ...]  # spec dtype name -> MACs per lane per cycle
    reducer_latency: tuple[tuple[str, int], ...]  # spec dtype name -> packet reducer latency
    accumulators: int
    stream_supply_bytes: int
    float_ways: int
    int_ways: int
    alu_latency: int
    reduce_hop_cycles: int
    dm_bytes_per_slice: int
    dm_bytes_per_cycle_per_slice: int
    trf_bytes_per_slice: int
    vrf_bytes_per_slice: int
    fetch_main: int
    fetch_sub: int
    commit_main: int
    ring_slices: int
    hop_cycles: int
    hbm_capacity: int
    hbm_bytes_per_cycle: float  # sustained
    dma_engines: int
    dma_bytes_per_cycle: int  # aggregate of the engines
    dma_startup: int
    dma_dm_side: int
    link_bytes_per_cycle: float
    link_latency_cycles: int
    launch_cycles: int

    def macs(self, dtype: DType) -> int:
        """Contraction-engine MACs per cycle per chip for operands of `dtype`."""
        return self.slices * self.lanes * dict(self.macs_per_lane)[CE_DTYPES[dtype.name]]

    def packet_elements(self, dtype: DType) -> int:
        """Operand elements one lane reduces per cycle (one 64 B packet of bf16 = 32)."""
        return dict(self.macs_per_lane)[CE_DTYPES[dtype.name]]

    def latency(self, dtype: DType) -> int:
        """Packet reducer latency for operands of `dtype`."""
        return dict(self.reducer_latency)[CE_DTYPES[dtype.name]]

    @property
    def dm_bytes(self) -> int:
        return self.slices * self.dm_bytes_per_slice

    @property
    def dm_bytes_per_cycle(self) -> int:
        return self.slices * self.dm_bytes_per_cycle_per_slice

    def cycles(self, seconds: float) -> int:
        return int(round(seconds * self.clock_hz))


def machine_from(hw) -> Machine:
    """Reads a simulator.hardware.Hardware into the mapping's constants."""
    return Machine(
        name=hw.name,
        chips=hw.chips,
        clock_hz=hw.clock_hz,
        clusters=hw.clusters,
        slices=hw.slices,
        slices_per_cluster=hw.slices_per_cluster,
        lanes=hw.lanes_per_slice,
        packet_bytes=hw.packet_bytes,
        flit_bytes=hw.flit_bytes,
        macs_per_lane=tuple(sorted(hw.macs_per_lane_cycle.items())),
        reducer_latency=tuple(sorted(hw.packet_reducer_latency.items())),
        accumulators=hw.accumulators_per_slice,
        stream_supply_bytes=hw.stream_supply_bytes,
        float_ways=hw.vector_float_ways,
        int_ways=hw.vector_int_ways,
        alu_latency=hw.vector_alu_latency,
        reduce_hop_cycles=hw.vector_inter_slice_reduce_hop_cycles,
        dm_bytes_per_slice=hw.dm_bytes_per_slice,
        dm_bytes_per_cycle_per_slice=int(hw.dm_bytes_per_cycle_per_slice),
        trf_bytes_per_slice=hw.trf_bytes_per_slice,
        vrf_bytes_per_slice=hw.vrf_bytes_per_slice,
        fetch_main=hw.fetch_main_bytes_per_cycle,
        fetch_sub=hw.fetch_sub_bytes_per_cycle,
        commit_main=hw.commit_main_bytes_per_cycle,
        ring_slices=hw.switch_ring_slices,
        hop_cycles=hw.switch_hop_cycles,
        hbm_capacity=int(hw.hbm_capacity_bytes),
        hbm_bytes_per_cycle=hw.hbm_sustained_bytes_per_cycle,
        dma_engines=hw.dma_engines,
        dma_bytes_per_cycle=int(hw.dma_engines * hw.dma_bytes_per_cycle_each),
        dma_startup=hw.dma_startup_cycles,
        dma_dm_side=int(hw.dma_dm_side_bytes_per_cycle),
        link_bytes_per_cycle=hw.link_bytes_per_s / hw.clock_hz,
        link_latency_cycles=int(round(hw.link_latency_s * hw.clock_hz)),
        launch_cycles=int(round(hw.kernel_launch_s * hw.clock_hz)),
    )
