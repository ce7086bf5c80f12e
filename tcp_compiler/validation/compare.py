"""Measured against simulated, figure by figure: the rows of `tcpc validate` (ratio = simulated /
measured, so 1 is agreement and below 1 a simulation faster than the server) and their summary
over runs (geometric mean, smallest and largest ratio)."""

from __future__ import annotations

import math

from tcp_compiler.validation.measured import MeasuredRun
from tcp_compiler.validation.metrics import FIGURES
from tcp_compiler.validation.replay import Replay
from tcp_compiler.validation.report import FigureRow, SummaryRow, ValidatedRun


def compare(run: MeasuredRun, replay: Replay) -> ValidatedRun:
    measured, simulated = run.metrics.flat(), replay.metrics.flat()
    rate = run.rate if run.rate is not None and math.isfinite(run.rate) else None
    return ValidatedRun(
        source=run.source,
        load=run.load,
        concurrency=run.concurrency,
        rate_per_s=rate,
        requests=len(run.input_tokens),
        notes=run.notes,
        figures=tuple(FigureRow(figure=f, measured=measured[f], simulated=simulated[f],
                                ratio=ratio(measured[f], simulated[f])) for f in FIGURES),  # fmt: skip
        measured_power_w=run.power_w,
        simulated_power_w=replay.report.energy.average_power_w,
        preemptions=replay.report.preemptions,
    )


def ratio(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated is None or measured == 0:
        return None
    return simulated / measured


def summarize(runs: list[ValidatedRun]) -> tuple[SummaryRow, ...]:
    rows = []
    for k, figure in enumerate(FIGURES):
        ratios = [r.figures[k].ratio for r in runs if r.figures[k].ratio is not None]
        positive = [x for x in ratios if x > 0]
        geomean = math.exp(sum(map(math.log, positive)) / len(positive)) if positive else None
        lo, hi = min(ratios, default=None), max(ratios, default=None)
        rows.append(
            SummaryRow(figure=figure, runs=len(ratios), geomean_ratio=geomean, min_ratio=lo, max_ratio=hi)
        )
    return tuple(rows)


def load_key(run: ValidatedRun) -> tuple[int, float]:
    """Runs in order: closed loops by concurrency, then open loops by rate, then traces."""
    if run.concurrency is not None:
        return (0, run.concurrency)
    if run.rate_per_s is not None:
        return (1, run.rate_per_s)
    return (1 if run.load == "all at once" else 2, math.inf)
