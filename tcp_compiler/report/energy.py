"""The energy part of the simulate report: from the same op totals the time figures come from
(simulator.energy, with the recipe of the spec's target), every chip counted."""

from __future__ import annotations

import numpy as np

from simulator.energy import PhaseEnergy as Phase
from simulator.energy import PowerTrack, Work, dvfs_voltage, phase_energy, power_track, throttled_clock
from simulator.program import Program
from simulator.report import OpTotals
from simulator.spec import Spec
from simulator.targets import energy_of
from simulator.timeline import Timeline
from tcp_compiler.errors import OptionError
from tcp_compiler.report.types import Energy, PhaseEnergy, UnitEnergy
from tcp_compiler.simulate import Simulation


def mac_dtype(sim: Simulation) -> str:
    """The contraction operand dtype of the run (the roofline's): every MAC is charged at it."""
    return sim.hardware.dtype_key(sim.precision.operand)


def op_joules(sim: Simulation, totals: OpTotals) -> np.ndarray:
    """Dynamic energy per op of one chip, summed over the programs the totals add up."""
    joules = energy_of(sim.hardware).joules(sim.hardware, Work.of_totals(totals), mac_dtype(sim))
    return np.sum(list(joules.values()), axis=0)


def phases(sim: Simulation, prefill_seconds: float, decode_seconds: float) -> tuple[Phase, Phase | None]:
    """The prefill's energy and the decode steps' (all of them), every chip counted."""
    hw, clock = sim.hardware, sim.hardware.chip.clock_hz
    dtype, chips = mac_dtype(sim), sim.chips * sim.stages
    prefill = phase_energy(energy_of(hw), hw, Work.of_totals(sim.prefill_ops), dtype, prefill_seconds,
                           sim.prefill.cycles / clock, sim.chips, chips)  # fmt: skip
    if not len(sim.decode_cycles):
        return prefill, None
    decode = phase_energy(energy_of(hw), hw, Work.of_totals(sim.decode_ops), dtype, decode_seconds,
                          float(sim.decode_cycles.sum()) / clock, sim.chips, chips)  # fmt: skip
    return prefill, decode


POWER_WINDOWS = 32  # a run's power counter in the trace: a value per this many equal windows


def run_power(sim: Simulation, program: Program, timeline: Timeline) -> PowerTrack:
    """A program's power per chip over its run (the trace's power counter track)."""
    hw, start, end = sim.hardware, timeline.start, timeline.end
    return power_track(energy_of(hw), hw, program, start, end, mac_dtype(sim), POWER_WINDOWS)


def _row(phase: Phase, steps: int, tokens: int) -> PhaseEnergy:
    """A phase's figures, per step (`steps` programs); `tokens`: what one step produces or reads."""
    return PhaseEnergy(
        joules=phase.joules / steps, dynamic_joules=phase.dynamic_joules / steps,
        average_power_w=phase.average_power_w, joules_per_token=phase.joules / steps / tokens,
        by_unit=tuple(UnitEnergy(unit=u, joules=j / steps) for u, j in phase.by_home.items()),
    )  # fmt: skip


def energy(sim: Simulation, prefill_seconds: float, decode_seconds: float) -> Energy:
    """The report's energy object."""
    hw = sim.hardware
    prefill, decode = phases(sim, prefill_seconds, decode_seconds)
    steps = len(sim.decode_cycles)
    total = prefill.joules + (decode.joules if decode else 0.0)
    seconds = prefill.seconds + (decode.seconds if decode else 0.0)
    point = energy_of(hw).point(hw)
    over = tuple(name for name, p in (("prefill", prefill), ("decode", decode))
                 if p is not None and p.average_power_w > point.tdp_w)  # fmt: skip
    return Energy(
        chips=prefill.chips, prefill_joules=prefill.joules,
        decode_joules_per_step=decode.joules / steps if decode else 0.0,
        average_power_w=total / (seconds * prefill.chips) if seconds > 0 else 0.0,
        tokens_per_joule=sim.batch * sim.gen_len / total if total > 0 else 0.0, joules=total,
        idle_power_w=point.idle_power_w, tdp_w=point.tdp_w, over_tdp=over, clock_hz=point.clock_hz,
        voltage_v=point.voltage_v,
        prefill=_row(prefill, 1, sim.batch * sim.prompt_len),
        decode=_row(decode, steps, sim.batch) if decode else None,
    )  # fmt: skip



def capped_hardware(sim: Simulation, cap_w: float) -> Spec:
    """The simulation's spec, or, when a phase draws more than `cap_w` per chip while it runs, the
    same chip at the highest clock (with its DVFS voltage) at which no phase does: the time each
    phase runs stretches with 1 / clock and its on-chip energy falls with V^2 (simulator.energy)."""
    hw, clock = sim.hardware, sim.hardware.chip.clock_hz
    point, chips = energy_of(hw).point(hw), sim.chips * sim.stages
    clocks = []
    for phase in phases(sim, 0.0, 0.0):
        if phase is None or phase.running_seconds <= 0:
            continue
        off_chip = phase.dynamic_joules - phase.on_chip_joules
        found = throttled_clock(point, phase.on_chip_joules, off_chip, phase.running_seconds * clock, cap_w,
                                chips)  # fmt: skip
        if found is None:
            raise no_clock_within(cap_w, hw)
        clocks.append(found)
    lowest = min(clocks, default=clock)
    return hw if lowest >= clock else at_clock(hw, lowest, cap_w)


def at_clock(hw: Spec, clock_hz: float, cap_w: float) -> Spec:
    """The same chip at `clock_hz` and the voltage DVFS gives it (the clock --power-cap chose)."""
    source = f"derived: --power-cap {cap_w:g} W (DVFS, docs/energy.md)"
    return hw.with_value("chip.clock_hz", clock_hz, source).with_value(
        "operating_point.voltage_v", dvfs_voltage(energy_of(hw).point(hw), clock_hz), source
    )


def no_clock_within(cap_w: float, hw: Spec) -> OptionError:
    """The error when even the lowest clock draws more than the cap (static power alone may)."""
    idle = energy_of(hw).point(hw).idle_power_w
    return OptionError("{power_cap} {cap:g} W: no clock keeps this run within it (idle power "
                       "{idle:.0f} W per chip)", cap=cap_w, idle=idle)  # fmt: skip
