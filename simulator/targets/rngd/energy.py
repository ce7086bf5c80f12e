"""RNGD's energy recipe: which actions each unit's activity is, counted from the totals the reports
already sum (simulator.energy.Work), each priced by the spec's `energy` table (docs/energy.md says
where every value comes from and what each count leaves out).

- contraction: a pass that keeps the Contraction Engine busy has its FLOPs / 2 as MACs at the run's
  contraction operand dtype (its fused epilogue's few element ops counted as MACs too), each
  reading its stationary operand from the TRF; TRF writes are the sub fetch path's loads.
- vector: element ops its busy cycles run on every slice at its float width (an upper bound when a
  pass uses fewer slices), each reading two operands from the VRF and writing one.
- fetch, switch, commit: flits their busy cycles move at their widths (fetch: every slice's main
  read, an upper bound when a placement uses fewer slices).
- DM: every byte the program reads from or writes to DM (passes and the DM ends of DMA moves).
- HBM, TensorDMA, chip links: the bytes each moves.
"""

from __future__ import annotations

import numpy as np

from simulator.energy import Action, EnergyModel, OperatingPoint, Work
from simulator.targets.rngd.sites import SITES
from simulator.targets.rngd.spec import Hardware
from simulator.targets.rngd.units import (
    CHIP_LINK,
    COMMIT,
    CONTRACTION,
    FETCH,
    SWITCH,
    TENSOR_DMA,
    TRF_LOAD,
    VECTOR,
)

ACTIONS = (
    Action("mac", "energy.mac_pj.{dtype}", CONTRACTION.name, on_chip=True),
    Action("trf_read", "energy.trf_read_pj_per_byte", CONTRACTION.name, on_chip=True),
    Action("trf_write", "energy.trf_write_pj_per_byte", TRF_LOAD.name, on_chip=True),
    Action("vector_op", "energy.vector_op_pj", VECTOR.name, on_chip=True),
    Action("vrf_read", "energy.vrf_read_pj_per_byte", VECTOR.name, on_chip=True),
    Action("vrf_write", "energy.vrf_write_pj_per_byte", VECTOR.name, on_chip=True),
    Action("fetch", "energy.fetch_pj_per_flit", FETCH.name, on_chip=True),
    Action("switch", "energy.switch_pj_per_flit", SWITCH.name, on_chip=True),
    Action("commit", "energy.commit_pj_per_flit", COMMIT.name, on_chip=True),
    Action("dm", "energy.dm_pj_per_byte", "dm", on_chip=True),
    Action("dma", "energy.dma_pj_per_byte", TENSOR_DMA.name, on_chip=True),
    Action("hbm", "energy.hbm_pj_per_byte", "hbm", on_chip=False),
    Action("link", "energy.link_pj_per_byte", CHIP_LINK.name, on_chip=False),
)


def counts(hw: Hardware, work: Work, dtype: str) -> dict[str, np.ndarray]:
    """How many of each action `work` holds, per op."""
    busy = np.asarray(work.unit_busy, np.float64)

    def of(unit: str) -> np.ndarray:
        return busy[..., SITES.unit(unit)]

    flops = np.asarray(work.flops, np.float64)
    contracting = of(CONTRACTION.name) > 0
    macs = np.where(contracting, flops / 2, 0.0)
    vector_ops = of(VECTOR.name) * hw.slices * hw.vector.float_ways
    operand = hw.chip.packet_bytes / hw.packet_elements(dtype)  # bytes of one stationary operand
    flit, m, vb = hw.chip.flit_bytes, hw.memory, hw.energy.vector_operand_bytes
    return {
        "mac": macs,
        "trf_read": macs * operand,
        "trf_write": of(TRF_LOAD.name) * m.fetch_sub_bytes_per_cycle,
        "vector_op": vector_ops,
        "vrf_read": vector_ops * 2 * vb,
        "vrf_write": vector_ops * vb,
        "fetch": of(FETCH.name) * m.fetch_main_bytes_per_cycle * hw.slices / flit,
        "switch": of(SWITCH.name) * hw.contraction.stream_supply_bytes / flit,
        "commit": of(COMMIT.name) * m.commit_main_bytes_per_cycle / flit,
        "dm": np.asarray(work.dm_bytes, np.float64),
        "dma": np.asarray(work.dma_bytes, np.float64),
        "hbm": np.asarray(work.hbm_bytes, np.float64),
        "link": np.asarray(work.link_bytes, np.float64),
    }


def point(hw: Hardware) -> OperatingPoint:
    """The operating point and power states the spec gives."""
    op, p = hw.operating_point, hw.power
    return OperatingPoint(
        hw.chip.clock_hz, op.voltage_v, op.nominal_voltage_v, op.nominal_clock_hz, op.min_voltage_v,
        p.idle_w, p.active_baseline_w, p.leakage_w, hw.chip.tdp_w,
    )  # fmt: skip


def peak_rates(hw: Hardware, dtype: str) -> Work:
    """One second with every unit busy every cycle, HBM at its peak, the DMA pool and DM ports at
    their rates: its energy is the most the per-action model lets a chip spend per second."""
    clock = hw.chip.clock_hz

    def one(value: float) -> np.ndarray:  # one op doing it all
        return np.array([value])

    return Work(flops=one(2.0 * hw.macs_per_cycle(dtype) * clock),
                hbm_bytes=one(hw.hbm_peak_bytes_per_second),
                dm_bytes=one(hw.slices * hw.memory.dm_bytes_per_cycle_per_slice * clock),
                link_bytes=one(hw.system.link_bytes_per_s), dma_bytes=one(hw.dma_bytes_per_cycle * clock),
                unit_busy=np.full((1, len(SITES.units)), clock))  # fmt: skip


ENERGY = EnergyModel(ACTIONS, counts, point)
