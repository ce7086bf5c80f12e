"""Fitting energy values to measured power: what `tcpc calibrate` calls when the measured files carry
an average power per run.

A run's average power is linear in the energy values (joules per action, power states) for fixed
activity, and its activity does not depend on them: so each run is kept as its activity (`Run`), its
power re-evaluated for any spec without simulating again, and the values at the chosen addresses
solved by least squares. Any value the power is linear in can be fitted; the rest stay as the spec
gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simulator.energy import EnergyModel, Work, phase_energy
from simulator.errors import HardwareError


@dataclass(frozen=True)
class Run:
    """A simulated run's activity (one chip's work on `mirrored` chips, `chips` in all) and the
    average power per chip measured for it."""

    work: Work
    dtype: str  # the contraction operand dtype its MACs are charged at
    seconds: float
    running_seconds: float
    mirrored: int
    chips: int
    measured_w: float

    def power(self, model: EnergyModel, spec: Any) -> float:
        """The average power per chip the spec's values give this run."""
        return phase_energy(model, spec, self.work, self.dtype, self.seconds, self.running_seconds,
                            self.mirrored, self.chips).average_power_w  # fmt: skip


@dataclass(frozen=True)
class Fit:
    """Fitted values, the spec that holds them, and how well they explain the measurements."""

    values: dict[str, float]
    spec: Any
    residual_w: tuple[float, ...]  # measured - modelled, per run, after the fit


def fit_energy(model: EnergyModel, spec: Any, addresses: Sequence[str], runs: Sequence[Run]) -> Fit:
    """The values at `addresses` that best explain the runs' measured power (least squares), set in
    the spec by `with_value` with their source. Needs at least as many runs as addresses, and runs
    that tell the values apart."""
    if len(runs) < len(addresses):
        raise HardwareError(f"fitting {len(addresses)} values needs at least as many runs, got {len(runs)}")
    start = np.array([float(spec.value(a)) for a in addresses])
    base = np.array([r.power(model, spec) for r in runs])
    columns = []  # the power one unit more of each value adds to each run (the power is linear in it)
    for address, v in zip(addresses, start.tolist(), strict=True):
        one = spec.with_value(address, v + 1.0)
        columns.append(np.array([r.power(model, one) for r in runs]) - base)
    design = np.column_stack(columns)
    if np.linalg.matrix_rank(design) < len(addresses):
        raise HardwareError(f"the runs cannot tell {', '.join(addresses)} apart: vary their activity")
    measured = np.array([r.measured_w for r in runs])
    step, *_ = np.linalg.lstsq(design, measured - base, rcond=None)
    solved = start + step
    source = f"derived: fitted by least squares to the measured average power of {len(runs)} runs"
    fitted = spec
    for address, v in zip(addresses, solved.tolist(), strict=True):
        fitted = fitted.with_value(address, v, source)
    residual = tuple((measured - np.array([r.power(model, fitted) for r in runs])).tolist())
    return Fit(dict(zip(addresses, solved.tolist(), strict=True)), fitted, residual)
