"""`tcpc calibrate`: the spec's assumed values fitted to a real server's measured runs.

Each measured run is replayed through the serving simulation (tcp_compiler.validation.replay) for
a spec, and its figures (mean TTFT and TPOT, output throughput, and average power when the file
has it) compared with the measured ones; simulator.calibration fits the chosen values by bounded
least squares on the relative errors. Without values named, the assumed values the figures move
most with are chosen (simulator.calibration.sensitivities and choose).

A fit replays every run many times, for specs that differ in a few values. The iteration costs
(compiled programs timed by the engine, the expensive part) are kept per spec values that can
change them (`CostCache`): the power states, the area model and the host's work cannot, so
fitting them replays the runs without compiling anything again. Any other value compiles again,
but the spec-free lowering steps (build, passes, layer period) of every shape the runs take are
kept for every spec tried (tcp_compiler.pipeline.keeping_fronts): a replay after a change of HBM
bandwidth takes a third of the time it takes without them.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.calibration import Fit, Observed, choose, fit, fittable, leave_one_out, sensitivities
from simulator.errors import HardwareError
from simulator.spec import Spec
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.pipeline import CompileOptions, keeping_fronts
from tcp_compiler.serve.costs import IterationCosts
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serving_costs
from tcp_compiler.validation.measured import MeasuredRun
from tcp_compiler.validation.metrics import RunMetrics

# The figures fitted, by name (TTFT and TPOT: their mean, else their median; `statistics`).
FIGURES = ("ttft_s", "tpot_s", "output_tokens_per_s", "power_w")
# Values no iteration cost reads: the power states (read by the report), the area model (never read
# by a serving run), and the host's work and launches (added by the server around the programs).
COST_FREE = ("power.", "area.", "host.", "system.kernel_launch_s")
POWER_ONLY_TABLES = ("energy", "power", "operating_point")  # move the power figure and nothing else
# Phases whose spec-free lowering is kept while calibrating: a few serving runs' decode batches and
# prefill lengths on the cost grids (tcp_compiler.pipeline.keeping_fronts).
FRONTS_KEPT = 48


@dataclass(frozen=True)
class Figures:
    """A run's figures as the fit compares them (NaN: not measured), in FIGURES' order."""

    ttft_s: float
    tpot_s: float
    output_tokens_per_s: float
    power_w: float

    def array(self) -> np.ndarray:
        return np.array([self.ttft_s, self.tpot_s, self.output_tokens_per_s, self.power_w], dtype=float)


def _number(v: float | None) -> float:
    return math.nan if v is None else float(v)


def figures(metrics: RunMetrics, power_w: float | None, stats: tuple[str, str]) -> Figures:
    """A run's figures: TTFT and TPOT at the statistics `stats` names (mean or p50)."""
    return Figures(_number(getattr(metrics.ttft, stats[0])), _number(getattr(metrics.tpot, stats[1])),
                   _number(metrics.output_tokens_per_s), _number(power_w))  # fmt: skip


def statistics(run: MeasuredRun) -> tuple[str, str]:
    """The statistic of TTFT and of TPOT the run gives: its mean (smooth in the values fitted),
    else its median."""
    return tuple("mean" if getattr(run.metrics, m).mean is not None else "p50" for m in ("ttft", "tpot"))  # type: ignore[return-value]


class CostCache:
    """IterationCosts kept by everything that can change them: the workload's model, precision and
    options, and the spec's values but COST_FREE (a few, the least recently used dropped:
    a model's costs hold its compiled programs' timings)."""

    KEPT = 4

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, IterationCosts] = OrderedDict()

    def costs(self, config: ModelConfig, hw: Spec, precision: Precision, compile_options: CompileOptions,
              options: ServeOptions, pp: int) -> IterationCosts:  # fmt: skip
        timing = tuple(hw.value(k) for k in hw.leaf_keys() if not k.startswith(COST_FREE))
        options = dataclasses.replace(options, concurrency=None)  # how requests arrive costs nothing
        key = (config, precision, compile_options, options, pp, timing)
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = serving_costs(config, hw, precision, compile_options, options, pp)
            while len(self._kept) > self.KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return found


@dataclass(frozen=True)
class Calibration:
    """What `tcpc calibrate` found: the values fitted (chosen by their effect when none were
    named: `elasticities`, every assumed value's), the fit, and each run's figures' relative
    errors under values fitted without it (None: too few runs left)."""

    addresses: tuple[str, ...]
    elasticities: dict[str, float]  # root mean square over the runs' figures; empty when named
    fit: Fit
    before: tuple[np.ndarray, ...]  # each run's relative errors under the base spec
    left_out: list[np.ndarray | None]
    figures: tuple[tuple[str, ...], ...]  # per run, the names of the figures its errors are of


def source(paths: Sequence[str]) -> str:
    """The source a fitted value is given: how many runs, and which files."""
    names = ", ".join(Path(p).name for p in paths)
    return f"derived: fitted to {len(paths)} measured runs: {names}"


def observe(run: MeasuredRun, simulate: Callable[[Spec], tuple[RunMetrics, float | None]]) -> Observed:
    """The run as the fit sees it: its measured figures and, for a spec, the replay's.
    `simulate(spec)` -> (RunMetrics, average power per chip)."""
    stats = statistics(run)
    measured = figures(run.metrics, run.power_w, stats).array()

    def predict(spec: Spec) -> np.ndarray:
        return figures(*simulate(spec), stats).array()

    return Observed(run.source, measured, predict)


def candidates(base: Spec, runs: Sequence[Observed]) -> list[str]:
    """The assumed continuous values that can move a measured figure: not the area model (a serving
    run never reads it), and the energy model only when a run measured power."""
    power = any(r.known[FIGURES.index("power_w")] for r in runs)
    skipped = ("area",) if power else ("area", *POWER_ONLY_TABLES)
    return [a for a in base.assumed_keys if base.param(a)[0].kind is float and a.split(".")[0] not in skipped]


def calibrate(base: Spec, runs: Sequence[Observed], named: Sequence[str] | None, most: int,
              origin: str) -> Calibration:  # fmt: skip
    """Fits the `named` values (checked first, each a one-line error naming it), or the assumed
    values the runs' figures move most with (at most `most`), to the runs. The spec-free lowering
    of every shape the runs take is kept meanwhile, for every spec tried."""
    with keeping_fronts(FRONTS_KEPT):
        return _calibrate(base, runs, named, most, origin)


def _calibrate(base: Spec, runs: Sequence[Observed], named: Sequence[str] | None, most: int,
               origin: str) -> Calibration:  # fmt: skip
    elasticities: dict[str, float] = {}
    if named:
        for a in named:
            fittable(base, a)
        addresses = list(named)
    else:
        moved = sensitivities(base, candidates(base, runs), runs)
        elasticities = {a: float(np.sqrt(np.mean(v**2))) for a, v in moved.items()}
        addresses = choose(moved, most)
        if not addresses:
            raise HardwareError("no assumed value moves the measured figures: name the values to fit")
    before = tuple(r.errors(base) for r in runs)
    while True:
        try:
            fitted = fit(base, addresses, runs, origin)
            break
        except HardwareError:
            if named or len(addresses) == 1:
                raise
            addresses = addresses[:-1]  # chosen, the weakest could not be told apart at the fit
    left_out = leave_one_out(base, addresses, runs, origin, fitted)
    names = tuple(tuple(n for n, known in zip(FIGURES, r.known, strict=True) if known) for r in runs)
    return Calibration(tuple(addresses), elasticities, fitted, before, left_out, names)
