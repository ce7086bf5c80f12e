"""The validation report on the terminal (`tcpc validate`): per run, each figure measured and
simulated with their ratio; then the ratios of every run side by side and their geometric mean."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from simulator.numbers import duration
from tcp_compiler.validation.metrics import LATENCIES
from tcp_compiler.validation.report import FigureRow, ValidationReport

SUMMARY = ("ttft_p50_s", "tpot_p50_s", "itl_p50_s", "e2e_p50_s", "output_tokens_per_s", "total_tokens_per_s")


def print_validation_report(report: ValidationReport, out: Console) -> None:
    r = report
    chips = f"{r.chips} chip{'s' if r.chips > 1 else ''}"
    out.print(f"[bold]{r.model}[/] on {r.hardware} ({chips}), {r.dtype}, KV {r.kv_dtype}; "
              f"{r.scheduler} scheduler")  # fmt: skip
    for run in r.runs:
        out.print(f"\n[bold]{run.source}[/]: {run.load}, {run.requests:,} requests; "
                  f"{run.preemptions:,} preemptions simulated")  # fmt: skip
        for note in run.notes:
            out.print(f"  assumed: {note}")
        table = Table(show_edge=False, pad_edge=False)
        for name, justify in (("figure", "left"), ("measured", "right"), ("simulated", "right"),
                              ("sim / measured", "right")):  # fmt: skip
            table.add_column(name, justify=justify)
        for row in run.figures:
            if row.measured is None and row.figure.endswith("_mean_s"):
                continue  # a mean the file does not give: the percentiles carry the comparison
            cells = (shown(row, row.measured), shown(row, row.simulated), ratio(row.ratio))
            table.add_row(label(row.figure), *cells)
        measured_w, simulated_w = run.measured_power_w, run.simulated_power_w
        if measured_w is not None:
            power_ratio = ratio(simulated_w / measured_w if measured_w else None)
            table.add_row("power per chip", f"{measured_w:.0f} W", f"{simulated_w:.0f} W", power_ratio)
        out.print(table)
    summary = Table(title="sim / measured", show_edge=False, pad_edge=False)
    summary.add_column("run")
    for figure in SUMMARY:
        summary.add_column(label(figure), justify="right")
    for run in r.runs:
        ratios = {f.figure: f.ratio for f in run.figures}
        summary.add_row(run.load, *(ratio(ratios[f]) for f in SUMMARY))
    geomean = {s.figure: s.geomean_ratio for s in r.summary}
    summary.add_row("geometric mean", *(ratio(geomean[f]) for f in SUMMARY))
    out.print()
    out.print(summary)


def label(figure: str) -> str:
    """`tpot_p50_s` -> `TPOT p50`; `output_tokens_per_s` -> `output tok/s`."""
    parts = figure.split("_")
    if parts[0] in LATENCIES:
        return f"{parts[0].upper()} {parts[1]}"
    return f"{parts[0]} tok/s"


def shown(row: FigureRow, value: float | None) -> str:
    if value is None:
        return "-"
    if row.figure.endswith("_per_s"):
        return f"{value:,.0f}"
    return duration(value, 2)


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
