"""RNGD's units: each one's name, the execution context its commands occupy, the spec keys its
cost formula reads, and the formula itself. The mapper names a unit through these constants (its
busy columns, its cost recipes), so adding a unit is one definition below plus its spec fields.

The formulas are integer arithmetic that works on Python ints and numpy arrays alike, so the
mapping can cost every candidate placement at once with the same code it uses for one.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.target import Context, Unit
from simulator.targets.rngd.spec import Hardware

# The execution contexts of a chip: the Tensor Unit's main and sub pipelines and the chip links
# run their commands in order; TensorDMA descriptors are independent and share the DMA pool.
MAIN = Context("main", ordered=True, doc="the Tensor Unit's main pipeline")
SUB = Context("sub", ordered=True, doc="the Tensor Unit's sub pipeline")
DMA = Context("dma", ordered=False, doc="TensorDMA descriptors, sharing the engines and HBM")
LINK = Context("link", ordered=True, collective=True, doc="chip-to-chip links")
PE_LINK = Context("pe_link", ordered=True, collective=True, doc="PE to PE within a card, between its ranks")
CONTEXTS = (MAIN, SUB, DMA, LINK, PE_LINK)

TENSOR_DMA = Unit(
    "tensor_dma",
    DMA.name,
    ("dma.engines", "dma.bytes_per_cycle_each", "dma.startup_cycles", "hbm.sustained_bytes_per_cycle"),
    moves="dma_bytes",
    doc="TensorDMA engines: HBM <-> DM moves, gathers, scatters, slices",
    bandwidth=lambda hw: hw.dma_bytes_per_cycle,
)
CONTRACTION = Unit(
    "contraction",
    MAIN.name,
    ("chip.lanes_per_slice", "contraction.macs_per_lane_cycle"),
    moves=None,
    doc="Contraction Engine: one streamed packet against the lanes' stationary rows per cycle",
)
REDUCER = Unit(
    "reducer",
    MAIN.name,
    ("contraction.packet_reducer_latency",),
    moves=None,
    doc="packet reducers: sum each packet's products; busy while the contraction runs",
)
VECTOR = Unit(
    "vector",
    MAIN.name,
    ("vector.float_ways", "vector.int_ways", "vector.alu_latency", "vector.inter_slice_reduce_hop_cycles"),
    moves=None,
    doc="Vector Engine: element-wise work and reductions after the contraction",
)
FETCH = Unit(
    "fetch",
    MAIN.name,
    (
        "memory.fetch_main_bytes_per_cycle",
        "fetch_adapter.lookup_bytes_per_cycle",
        "fetch_adapter.convert_bytes_per_cycle",
        "fetch_adapter.stage_latency_cycles",
    ),
    moves=None,
    doc="Fetch Engine and its Fetch Adapter: DM -> pipeline operand stream, packed weights decoded",
)
SWITCH = Unit(
    "switch",
    MAIN.name,
    ("contraction.stream_supply_bytes", "chip.packet_bytes"),
    moves=None,
    doc="switch network: delivers streamed packets to the slices",
)
COMMIT = Unit(
    "commit",
    MAIN.name,
    ("memory.commit_main_bytes_per_cycle",),
    moves=None,
    doc="Commit Engine: pipeline -> DM results",
)
TRF_LOAD = Unit(
    "trf_load",
    MAIN.name,
    ("memory.trf_bytes_per_slice", "memory.fetch_sub_bytes_per_cycle"),
    moves=None,
    doc="TRF loads of the stationary operand (sub fetch path)",
)
CHIP_LINK = Unit(
    "chip_link",
    LINK.name,
    ("system.link_bytes_per_s", "system.link_latency_s"),
    moves="link_bytes",
    doc="chip-to-chip links: collectives",
    bandwidth=lambda hw: hw.link_bytes_per_cycle,
)
PE_PATH = Unit(
    "pe_path",
    PE_LINK.name,
    ("system.pe_link_bytes_per_cycle", "system.pe_link_latency_cycles"),
    moves=None,
    doc="PE to PE transfers within a card (TensorDMA, DM to DM): collectives between its ranks",
)
UNITS = (TENSOR_DMA, CONTRACTION, REDUCER, VECTOR, FETCH, SWITCH, COMMIT, TRF_LOAD, CHIP_LINK, PE_PATH)


def ceil_div(a, b):
    """Integer ceiling division, exact for numpy arrays and Python ints alike."""
    return -(-a // b)


# --- tensor_dma ---------------------------------------------------------------------------------


def dma_cycles(hw: Hardware, nbytes: int, hbm_sides: int) -> int:
    """One TensorDMA move of `nbytes` uncontended: start-up, then the engines' aggregate rate, no
    faster than HBM serves each of its `hbm_sides` ends (source, destination) in HBM."""
    rate = hw.dma_bytes_per_cycle
    if hbm_sides:
        rate = min(rate, hw.hbm.sustained_bytes_per_cycle / hbm_sides)
    return hw.dma.startup_cycles + math.ceil(nbytes / rate)


# --- chip_link ----------------------------------------------------------------------------------


def link_cycles(hw: Hardware, nbytes: int, steps: int = 1) -> int:
    """A collective of `steps` sequential chip-link transfers (a ring: each chip sends to its
    neighbour while receiving from the other): each step pays the link latency, and the `nbytes`
    each chip sends in all go at the per-direction bandwidth."""
    return max(steps, 1) * hw.link_latency_cycles + link_transfer_cycles(hw, nbytes)


def link_transfer_cycles(hw: Hardware, nbytes: int) -> int:
    """`nbytes` at the per-direction link bandwidth, no latency."""
    return math.ceil(nbytes / hw.link_bytes_per_cycle)


# --- pe_path ------------------------------------------------------------------------------------


def pe_link_cycles(hw: Hardware, nbytes: int, steps: int) -> int:
    """A collective's `steps` sequential PE-to-PE transfers within a card (a ring over its ranks):
    each step pays one DMA command's start-up, and the `nbytes` a rank sends in all go at its PEs'
    TensorDMA rate."""
    return max(steps, 1) * hw.system.pe_link_latency_cycles + math.ceil(nbytes / hw.pe_link_bytes_per_cycle)


# --- vector -------------------------------------------------------------------------------------


def vector_cycles(hw: Hardware, elements: int, is_float: bool, ops: int, reduces: bool, slices: int):
    """(throughput cycles, latency) of `ops` element-wise ops over at most `elements` per op on
    `slices` slices; a reduction adds the inter-slice hops of one ring."""
    ways = hw.vector.float_ways if is_float else hw.vector.int_ways
    throughput = math.ceil(elements / (slices * ways))
    latency = hw.vector.alu_latency * ops
    if reduces:
        latency += hw.vector.inter_slice_reduce_hop_cycles * min(slices, hw.switch.ring_slices)
    return throughput, latency


def recurrence_cycles(hw: Hardware, steps: int, state: int, chain: int, slices: int) -> int:
    """Throughput cycles of a recurrence along a sequence on the VE: `steps` sequential steps over
    `state` elements, each step waiting for the previous one's `chain` dependent element ops on an
    element unless there are enough elements per lane to fill the pipeline meanwhile."""
    per_step = max(math.ceil(state / (slices * hw.vector.float_ways)), chain * hw.vector.alu_latency)
    return steps * per_step


# --- fetch --------------------------------------------------------------------------------------


def fetch_cycles(hw: Hardware, nbytes: int, slices: int) -> int:
    """Cycles the Fetch Engines of `slices` slices take to stream `nbytes` from DM."""
    return math.ceil(nbytes / (slices * hw.memory.fetch_main_bytes_per_cycle))


def adapter_cycles(hw: Hardware, lookup_bytes: int, convert_bytes: int, stages: int, slices: int):
    """(throughput cycles, latency) of the Fetch Adapter decoding packed weight codes as `slices`
    slices fetch them: `lookup_bytes` through the fp4 -> fp8 table, `convert_bytes` through
    zero-point subtraction, each stage adding its latency."""
    lookup = math.ceil(lookup_bytes / (slices * hw.fetch_adapter.lookup_bytes_per_cycle))
    convert = math.ceil(convert_bytes / (slices * hw.fetch_adapter.convert_bytes_per_cycle))
    return max(lookup, convert), stages * hw.fetch_adapter.stage_latency_cycles


# --- contraction, switch, trf_load, commit (vectorised over candidate placements) ----------------


def contraction_cycles(passes, b_s, m_s, lane_groups, k_packets):
    """One streamed packet (K elements of one M row) against a lane group's stationary rows per
    cycle (the lanes and packet size the counts are in come from the spec, via the placement)."""
    return passes * b_s * m_s * lane_groups * k_packets


def switch_cycles(hw: Hardware, passes, b_s, m_s, k_packets):
    """Streamed packets, each fetched once per N pass, at the switch's supply rate."""
    return ceil_div(passes * b_s * m_s * k_packets * hw.chip.packet_bytes, hw.contraction.stream_supply_bytes)


def trf_load_cycles(hw: Hardware, loads, tile_bytes, resident):
    """Loading the stationary tile `loads` times over the sub fetch path; a tile that stays
    resident and is loaded once overlaps (its first load is latency, see first_trf_load_cycles)."""
    return np.where(
        (loads > 1) | ~resident, ceil_div(loads * tile_bytes, hw.memory.fetch_sub_bytes_per_cycle), 0
    )


def first_trf_load_cycles(hw: Hardware, tile_bytes, trf_budget: int):
    """The first stationary tile's load (at most the TRF share it may use), before any contraction."""
    return ceil_div(np.minimum(tile_bytes, trf_budget), hw.memory.fetch_sub_bytes_per_cycle)


def commit_cycles(hw: Hardware, outputs, out_bits):
    """Results written back through the Commit Engine."""
    return ceil_div(outputs * out_bits, 8 * hw.memory.commit_main_bytes_per_cycle)
