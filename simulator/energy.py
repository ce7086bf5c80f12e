"""Energy and power from the activity time comes from: one account.

The engine's per-op counts, the FLOPs, bytes and unit busy cycles the reports already sum (`Work`),
are turned into actions by the target's energy recipe (on RNGD: simulator/targets/rngd/energy.py),
each action costing the spec's energy per action. Static power is the spec's power states: idle (the
model resident, leakage included) at every instant, plus the active baseline while the device runs.
Nothing here is counted per command in Python: every figure is a product of totals already summed
(a power track spreads each op's energy over its commands' times with array operations).

DVFS (the operating point): on-chip dynamic energy per action scales with (V / V_nominal)^2, the
active baseline power with (V / V_nominal)^2 x (f / f_nominal), leakage with V / V_nominal; off-chip
actions (HBM, links, host PCIe) keep their energy. Time scales with the clock through the cycle
counts themselves (seconds = cycles / clock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.program import Program
from simulator.report import OpTotals, command_integers, op_starts

PICO = 1e-12


@dataclass(frozen=True)
class Work:
    """The activity energy is charged on, per op (arrays over ops; a recipe may read an op's
    figures together, so they are never summed across ops first); `unit_busy` is [ops, units]."""

    flops: np.ndarray
    hbm_bytes: np.ndarray
    dm_bytes: np.ndarray
    link_bytes: np.ndarray
    dma_bytes: np.ndarray
    unit_busy: np.ndarray

    @classmethod
    def of_totals(cls, totals: OpTotals) -> Work:
        """Per op, from a phase's op totals (what the report's tables show)."""
        return cls(totals.flops, totals.hbm_bytes, totals.dm_bytes, totals.link_bytes, totals.dma_bytes,
                   totals.unit_busy)  # fmt: skip

    @classmethod
    def of_program(cls, program: Program) -> Work:
        """Per op, from a program's columns (the op totals' integer figures, without the timeline):
        a recipe reads an op's activity as a whole (a pass that contracts is MACs)."""
        starts = op_starts(program)
        per_op = {f: np.add.reduceat(v.astype(np.float64), starts, axis=0)
                  for f, v in command_integers(program).items()}  # fmt: skip
        return cls(per_op["flops"], per_op["hbm_bytes"], per_op["dm_bytes"], per_op["link_bytes"],
                   per_op["dma_bytes"], per_op["unit_busy"])  # fmt: skip


@dataclass(frozen=True)
class Action:
    """One kind of energy-costing action of a target: its spec address (pJ per count), the unit
    or memory it is spent in, and whether it is on-chip (scaled by V^2 under DVFS)."""

    name: str
    address: str  # the spec value, e.g. "energy.hbm_pj_per_byte"; "{dtype}" for per-dtype values
    home: str  # unit or memory it is spent in (energy by unit)
    on_chip: bool


@dataclass(frozen=True)
class OperatingPoint:
    """What the power model reads of any target's spec: clock, voltages and power states, per chip."""

    clock_hz: float
    voltage_v: float
    nominal_voltage_v: float
    nominal_clock_hz: float
    min_voltage_v: float
    idle_w: float
    active_baseline_w: float
    leakage_w: float
    tdp_w: float

    @property
    def dynamic_scale(self) -> float:
        """On-chip dynamic energy per action relative to the nominal point: (V / V0)^2."""
        return (self.voltage_v / self.nominal_voltage_v) ** 2

    @property
    def idle_power_w(self) -> float:
        """Power with nothing running (the model resident): idle, its leakage scaled with V."""
        leak = self.leakage_w * self.voltage_v / self.nominal_voltage_v
        return self.idle_w - self.leakage_w + leak

    @property
    def running_power_w(self) -> float:
        """Static power while the device runs: idle plus the active baseline (V^2 f)."""
        clock = self.clock_hz / self.nominal_clock_hz
        return self.idle_power_w + self.active_baseline_w * self.dynamic_scale * clock


@dataclass(frozen=True)
class EnergyModel:
    """A target's energy recipe: its actions, how many of each a Work holds (`counts`), and its
    operating point."""

    actions: tuple[Action, ...]
    # (spec, work, contraction operand dtype) -> count per action name, shaped like work's figures
    counts: Callable[[Any, Work, str], dict[str, Any]]
    point: Callable[[Any], OperatingPoint]

    def joules(self, spec: Any, work: Work, dtype: str) -> dict[str, Any]:
        """Dynamic energy per action at the spec's operating point, shaped like `work`'s figures."""
        counts, scale = self.counts(spec, work, dtype), self.point(spec).dynamic_scale
        return {
            a.name: counts[a.name] * spec.value(a.address.format(dtype=dtype)) * PICO
            * (scale if a.on_chip else 1.0)
            for a in self.actions
        }

    def dynamic_joules(self, spec: Any, work: Work, dtype: str) -> float:
        """The total dynamic energy of `work` (summed over actions and ops)."""
        return float(sum(np.sum(v) for v in self.joules(spec, work, dtype).values()))

    def on_chip_joules(self, spec: Any, work: Work, dtype: str) -> float:
        """The part of dynamic_joules spent on the chip: what DVFS scales with V^2."""
        joules = self.joules(spec, work, dtype)
        return float(sum(np.sum(joules[a.name]) for a in self.actions if a.on_chip))

    def by_home(self, joules: dict[str, Any]) -> dict[str, float]:
        """Energy per unit or memory, summed over actions and ops, in the actions' order."""
        out: dict[str, float] = {}
        for a in self.actions:
            out[a.home] = out.get(a.home, 0.0) + float(np.sum(joules[a.name]))
        return out


@dataclass(frozen=True)
class PhaseEnergy:
    """The energy of a span of time on `chips` chips: dynamic (the work of `mirrored` identical
    chips), running static (while the device runs) and idle static (the rest)."""

    seconds: float
    running_seconds: float
    chips: int
    dynamic_joules: float
    on_chip_joules: float  # the part of dynamic_joules that scales with V^2
    static_joules: float
    by_home: dict[str, float]  # dynamic energy per unit / memory, all chips

    @property
    def joules(self) -> float:
        return self.dynamic_joules + self.static_joules

    @property
    def average_power_w(self) -> float:
        """Per chip."""
        return self.joules / (self.seconds * self.chips) if self.seconds > 0 else 0.0


def phase_energy(
    model: EnergyModel, spec: Any, work: Work, dtype: str, seconds: float, running_seconds: float,
    mirrored: int, chips: int,
) -> PhaseEnergy:  # fmt: skip
    """Energy of `work` (one chip's, repeated on `mirrored` chips) over `seconds`, of which the device
    ran `running_seconds`, with static power on every one of `chips` chips."""
    point = model.point(spec)
    joules = model.joules(spec, work, dtype)
    homes = {home: j * mirrored for home, j in model.by_home(joules).items()}
    on_chip = mirrored * sum(float(np.sum(joules[a.name])) for a in model.actions if a.on_chip)
    idle = max(seconds - running_seconds, 0.0)
    static = chips * (point.running_power_w * running_seconds + point.idle_power_w * idle)
    return PhaseEnergy(seconds, running_seconds, chips, sum(homes.values()), on_chip, static, homes)


@dataclass(frozen=True)
class PowerTrack:
    """A run's power over time, per chip: `watts[chip][k]` is the average power of the chip in the
    window from `edges[k]` to `edges[k + 1]` (cycles from the run's start)."""

    edges: np.ndarray
    watts: dict[int, np.ndarray]


_CHUNK = 16_384  # commands spread at once (bounds the [commands, windows] scratch array)


def power_track(model: EnergyModel, spec: Any, program: Program, start: np.ndarray, end: np.ndarray,
                dtype: str, windows: int) -> PowerTrack:  # fmt: skip
    """Each chip's power in `windows` equal windows of a run (`start`, `end`: its commands' cycles):
    every op's dynamic energy spread over the time its commands run, in proportion to how long each
    runs, plus the running static power. The windows' energy adds up to the run's."""
    point = model.point(spec)
    per_op = np.sum(list(model.joules(spec, Work.of_program(program), dtype).values()), axis=0)
    starts = op_starts(program)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(program))))
    length = (end - start).astype(np.float64)
    op_time = np.bincount(group, weights=length, minlength=len(starts))[group]
    alone = 1.0 / np.bincount(group, minlength=len(starts))[group]  # an op whose commands take no time
    share = np.divide(length, op_time, out=alone, where=op_time > 0)
    length = np.maximum(length, 1.0)  # a command taking no time spends its share in its first cycle
    rate = per_op[group] * share / length  # J per cycle while the command runs
    total = float((start + length).max()) if len(start) else 0.0
    edges = np.linspace(0.0, total, windows + 1)
    seconds = np.diff(edges) / point.clock_hz
    watts = {}
    for chip in np.unique(program.chip).tolist():
        mine = np.flatnonzero(program.chip == chip)
        done = np.zeros(len(edges))  # energy spent before each edge
        for lo in range(0, len(mine), _CHUNK):
            part = mine[lo : lo + _CHUNK]
            runs = np.clip(edges[None, :] - start[part, None], 0.0, length[part, None])
            done += rate[part] @ runs
        watts[chip] = np.diff(done) / np.where(seconds > 0, seconds, 1.0) + point.running_power_w
    return PowerTrack(edges, watts)


def peak_watts(model: EnergyModel, spec: Any, dtype: str, rates: Work) -> dict[str, float]:
    """Each action's power when `rates` (one second of work at the units' maxima) runs: with the
    running static power, the most the per-action model lets a chip draw."""
    return {name: float(np.sum(j)) for name, j in model.joules(spec, rates, dtype).items()}


def dvfs_voltage(point: OperatingPoint, clock_hz: float) -> float:
    """The voltage a clock needs: proportional to the clock near the nominal point, never below the
    minimum voltage (the alpha-power law taken linear, the usual first-order DVFS model)."""
    return max(point.min_voltage_v, point.nominal_voltage_v * clock_hz / point.nominal_clock_hz)


def throttled_clock(point: OperatingPoint, on_chip_joules: float, off_chip_joules: float, cycles: float,
                    cap_w: float, chips: int = 1) -> float | None:  # fmt: skip
    """The highest clock (at its DVFS voltage) at which `cycles` of work whose dynamic energy at
    `point` is `on_chip_joules` + `off_chip_joules` (all chips) draws at most `cap_w` per chip while
    it runs, or None when even the lowest clock cannot. Cycles are taken as fixed: time scales with
    1 / clock, on-chip energy with V^2, off-chip energy not at all."""

    def power(clock: float) -> float:
        v = dvfs_voltage(point, clock)
        at = OperatingPoint(clock, v, point.nominal_voltage_v, point.nominal_clock_hz, point.min_voltage_v,
                            point.idle_w, point.active_baseline_w, point.leakage_w, point.tdp_w)  # fmt: skip
        scale = at.dynamic_scale / point.dynamic_scale
        return at.running_power_w + (on_chip_joules * scale + off_chip_joules) / (cycles / clock) / chips

    hi = point.clock_hz
    if power(hi) <= cap_w:
        return hi
    lo = hi / 1000
    if power(lo) > cap_w:
        return None
    for _ in range(60):  # power rises with the clock: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid) <= cap_w else (lo, mid)
    return lo
