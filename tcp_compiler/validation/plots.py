"""`tcpc validate --plot`: each figure against the runs' concurrency (or rate), measured and
simulated, on matplotlib's Agg canvas, written atomically (as tcp_compiler.serve.plots does)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.errors import OutputError
from simulator.files import atomic_output
from tcp_compiler.validation.metrics import LATENCIES
from tcp_compiler.validation.report import ValidatedRun, ValidationReport

PANELS = [(m, m.upper() if m != "e2e" else "E2E", "ms", 1e3) for m in LATENCIES]
PANELS += [("output_tokens_per_s", "output throughput", "tokens/s", 1.0),
           ("total_tokens_per_s", "total throughput", "tokens/s", 1.0)]  # fmt: skip
NAME = "validation.png"


def write_plots(report: ValidationReport, directory: str | Path) -> list[str]:
    """Writes validation.png into `directory`: one panel per figure (latencies at p50 and p99)."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out}: cannot create: {e.strerror}") from None
    runs = report.runs
    x, xlabel, ticks = _axis(runs)
    fig = Figure(figsize=(13, 7.5), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3, squeeze=False).ravel()
    for ax, (key, title, unit, scale) in zip(axes, PANELS, strict=True):
        stats = ("p50", "p99") if key in LATENCIES else ("",)
        for stat, style in zip(stats, ("-", "--"), strict=False):
            name = f"{key}_{stat}_s" if stat else key
            measured = [_value(r, name, "measured", scale) for r in runs]
            simulated = [_value(r, name, "simulated", scale) for r in runs]
            label = f" {stat}" if stat else ""
            ax.plot(x, simulated, style, color="tab:blue", marker=".", label=f"simulated{label}")
            ax.plot(x, measured, style, color="tab:orange", marker="o", label=f"measured{label}")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.set_ylim(0, None)
        if ticks:
            ax.set_xticks(x, ticks, rotation=30, fontsize="small")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    r = report
    fig.suptitle(f"measured vs simulated: {r.model} on {r.hardware}, {r.dtype}, KV {r.kv_dtype}")
    fig.tight_layout()
    with atomic_output(out / NAME) as tmp:
        fig.savefig(tmp, format="png")
    return [NAME]


def _axis(runs: tuple[ValidatedRun, ...]) -> tuple[list[float], str, list[str] | None]:
    """Concurrency when every run is a closed loop, rate when every run has one, else the runs
    in order, labelled."""
    if all(r.concurrency is not None for r in runs):
        return [float(r.concurrency or 0) for r in runs], "concurrency (clients)", None
    if all(r.rate_per_s is not None for r in runs):
        return [float(r.rate_per_s or 0) for r in runs], "request rate (requests/s)", None
    return list(range(len(runs))), "run", [r.load for r in runs]


def _value(run: ValidatedRun, figure: str, side: str, scale: float) -> float:
    row = next(f for f in run.figures if f.figure == figure)
    value = getattr(row, side)
    return float("nan") if value is None else value * scale
