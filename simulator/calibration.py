"""Fitting spec values to measurements: the one fitting mechanism of tcpc (`tcpc calibrate` for
serving runs, energy values against measured power, any model of a spec's figures).

A measured run is its figures and a model that predicts them from a spec (`Observed`); the values
at the chosen addresses are fitted by bounded least squares on the relative errors of every run's
figures (scipy.optimize.least_squares). Each value is searched as a multiple of where it starts,
so values of any unit weigh alike, within its declared range narrowed to where the spec's
relations between values still hold. A fitted value's uncertainty comes from the Jacobian at the
fit (the residuals' spread taken as the measurement error); how well the values predict a run
they were not fitted to, from fitting once per run without it (`leave_one_out`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simulator.errors import HardwareError
from simulator.spec import Spec

DIFF_STEP = 1e-2  # relative finite-difference step: large beside integer cycle counts' rounding
SENSITIVITY_STEP = 0.1  # relative move of a value when ranking the values by their effect
DISTINCT = 0.2  # least singular value of the chosen values' unit elasticity columns


@dataclass(frozen=True)
class Observed:
    """One measured run: its figures (NaN where not measured) and the model's figures for a spec,
    in the same order."""

    name: str
    measured: np.ndarray
    predict: Callable[[Spec], np.ndarray]

    @property
    def known(self) -> np.ndarray:
        """Which figures were measured (a relative error needs a measurement above 0)."""
        return np.isfinite(self.measured) & (self.measured > 0)

    def errors(self, spec: Spec) -> np.ndarray:
        """Relative error of the model's figures, for the figures measured (modelled / measured - 1)."""
        return self.predict(spec)[self.known] / self.measured[self.known] - 1.0


@dataclass(frozen=True)
class Fit:
    """Fitted values (by address), their one-sigma uncertainty (NaN: no runs left over to tell),
    the spec that holds them, and each run's relative errors after the fit."""

    values: dict[str, float]
    sigmas: dict[str, float]
    spec: Spec
    errors: tuple[np.ndarray, ...]
    evaluations: int


def fittable(spec: Spec, address: str) -> None:
    """A HardwareError naming the address unless it is a declared, assumed, continuous value."""
    param, _ = spec.param(address)  # "no such key (did you mean ...)"
    if param.kind is not float:
        raise HardwareError(f"{address}: an integer count, not a continuous value a fit can move")
    if not spec.is_assumed(address):
        raise HardwareError(f"{address}: not an assumed value (its source: {spec.sources[address]})")


def bounds(spec: Spec, address: str) -> tuple[float, float]:
    """The value's declared range, narrowed to where the spec's relations between values hold with
    the others as they are (hbm sustained bandwidth not above peak)."""
    param, _ = spec.param(address)
    start = float(spec.value(address))
    return _edge(spec, address, start, param.lo), _edge(spec, address, start, param.hi)


def _edge(spec: Spec, address: str, start: float, limit: float) -> float:
    """The value nearest `limit` (bisected from `start`) the spec accepts at `address`."""
    if _accepts(spec, address, limit):
        return limit
    good, bad = start, limit
    for _ in range(60):
        middle = (good + bad) / 2
        good, bad = (middle, bad) if _accepts(spec, address, middle) else (good, middle)
    return good


def _accepts(spec: Spec, address: str, v: float) -> bool:
    try:
        spec.with_value(address, v)
    except HardwareError:
        return False
    return True


def _scale(v: float) -> float:
    return abs(v) or 1.0


def _spec_at(spec: Spec, addresses: Sequence[str], x: np.ndarray, source: str) -> Spec:
    starts = [float(spec.value(a)) for a in addresses]
    values = {a: float(m) * _scale(v) for a, m, v in zip(addresses, x, starts, strict=True)}
    return spec.with_values(values, source)


def fit(spec: Spec, addresses: Sequence[str], runs: Sequence[Observed], source: str,
        start: dict[str, float] | None = None) -> Fit:  # fmt: skip
    """The values at `addresses` that best explain the runs (least squares on relative errors),
    set in the spec with `source`, searched from `start` (by address; default: the spec's). A
    HardwareError when the runs measure fewer figures than there are values, or cannot tell the
    values apart (no run's figures move with one, or two move them alike)."""
    for a in addresses:
        fittable(spec, a)
    figures = sum(int(r.known.sum()) for r in runs)
    if figures < len(addresses):
        raise HardwareError(f"fitting {len(addresses)} values needs at least as many measured figures, "
                            f"got {figures}")  # fmt: skip
    scales = [_scale(float(spec.value(a))) for a in addresses]
    lo, hi = zip(*(bounds(spec, a) for a in addresses), strict=True)
    lower, upper = np.array(lo) / scales, np.array(hi) / scales
    first = np.array([(start or {}).get(a, float(spec.value(a))) for a in addresses]) / scales
    first = np.clip(first, lower, upper)

    def residuals(x: np.ndarray) -> np.ndarray:
        at = _spec_at(spec, addresses, np.clip(x, lower, upper), source)
        return np.concatenate([r.errors(at) for r in runs])

    result = least_squares(residuals, first, bounds=(lower, upper), diff_step=DIFF_STEP, method="trf",
                           xtol=1e-8, ftol=1e-10, max_nfev=50 * (len(addresses) + 1))  # fmt: skip
    jac = np.atleast_2d(result.jac)
    singular = np.linalg.svd(jac, compute_uv=False)
    if singular.size < len(addresses) or singular[-1] <= 1e-6 * max(singular[0], 1e-300):
        weak = [a for a, col in zip(addresses, jac.T, strict=True) if not np.any(col)]
        raise HardwareError(f"the runs cannot tell {', '.join(weak or addresses)} apart: no measured figure "
                            f"moves with {'it' if len(weak) == 1 else 'them'} independently")  # fmt: skip
    dof = len(result.fun) - len(addresses)
    variance = 2 * result.cost / dof if dof > 0 else math.nan
    covariance = np.linalg.pinv(jac.T @ jac) * variance
    fitted = _spec_at(spec, addresses, result.x, source)
    values = {a: float(fitted.value(a)) for a in addresses}
    sigmas = {a: float(math.sqrt(max(c, 0.0)) * s) if dof > 0 else math.nan
              for a, c, s in zip(addresses, np.diag(covariance), scales, strict=True)}  # fmt: skip
    return Fit(values, sigmas, fitted, tuple(r.errors(fitted) for r in runs), result.nfev)


def leave_one_out(spec: Spec, addresses: Sequence[str], runs: Sequence[Observed], source: str,
                  start: Fit) -> list[np.ndarray | None]:  # fmt: skip
    """Per run: its relative errors under values fitted to the other runs (from `start`, the fit
    to all, so each converges in a few steps), or None when the others measure too few figures to
    fit the values."""
    out: list[np.ndarray | None] = []
    for k, run in enumerate(runs):
        others = [r for i, r in enumerate(runs) if i != k]
        try:
            without = fit(spec, addresses, others, source, start.values)
        except HardwareError:
            out.append(None)
            continue
        out.append(run.errors(without.spec))
    return out


def sensitivities(spec: Spec, addresses: Sequence[str], runs: Sequence[Observed]) -> dict[str, np.ndarray]:
    """Per address: each measured figure's relative change per relative change of the value
    (elasticity), all runs' figures in one array, from moving the value by SENSITIVITY_STEP (down
    when up leaves its range)."""
    base = np.concatenate([r.errors(spec) + 1.0 for r in runs])
    out = {}
    for a in addresses:
        v = float(spec.value(a))
        lo, hi = bounds(spec, a)
        moved = v * (1 + SENSITIVITY_STEP) if v * (1 + SENSITIVITY_STEP) <= hi else v * (1 - SENSITIVITY_STEP)
        if v == 0.0 or not lo <= moved <= hi:
            out[a] = np.zeros_like(base)
            continue
        at = spec.with_value(a, moved)
        changed = np.concatenate([r.errors(at) + 1.0 for r in runs])
        out[a] = (changed / base - 1.0) / (moved / v - 1.0)
    return out


def choose(elasticities: dict[str, np.ndarray], most: int, least: float = 0.01) -> list[str]:
    """The values to fit: by how much they move the figures (root mean square elasticity, at least
    `least`), skipping any whose effect the ones chosen already describe (its column of the
    elasticities within about 15 degrees of the span of those before it: the runs could fit it
    only by amplifying their noise), at most `most`."""
    ranked = sorted(elasticities, key=lambda a: -_rms(elasticities[a]))
    chosen: list[str] = []
    for a in ranked:
        if len(chosen) >= most or _rms(elasticities[a]) < least:
            break
        columns = np.column_stack([elasticities[c] for c in [*chosen, a]])
        columns = columns / np.linalg.norm(columns, axis=0)
        if np.linalg.svd(columns, compute_uv=False)[-1] > DISTINCT:
            chosen.append(a)
    return chosen


def _rms(v: np.ndarray) -> float:
    return float(np.sqrt(np.mean(v**2))) if v.size else 0.0
