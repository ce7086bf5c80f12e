"""Sweep plots: throughput against batch and TTFT / TPOT against prompt length for a simulation
sweep; throughput and latency against load for a serving sweep. A point that failed is marked
with a red x at the foot of its axes, at its x, so a gap in a line is never silent."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.files import atomic_output
from tcp_compiler.planner import pareto


def _label(row: dict, keys: Sequence[str]) -> str:
    """The options that tell one line from another (those that vary among the rows)."""
    return ", ".join(f"{k}={row[k]}" for k in keys)


def _varying(rows: Sequence[dict], keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(k for k in keys if len({str(r.get(k)) for r in rows}) > 1)


def _plot(ax: Axes, rows: Sequence[dict], x: str, y: str, keys: Sequence[str], scale: float = 1.0) -> int:
    """A line of (x, y) per combination of `keys`; failed points as red x marks at the foot. Returns
    how many points failed."""
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    failed: list[float] = []
    for r in rows:
        if r["status"] != "ok" and r[x] != "":
            failed.append(float(r[x]))
        elif r["status"] == "ok" and r[y] != "":  # a figure the run has not (TPOT of one token)
            lines[_label(r, keys)].append((float(r[x]), float(r[y]) * scale))
    for label, points in lines.items():
        ax.plot(*zip(*sorted(points), strict=True), marker="o", label=label or None)
    if failed:  # x in data units, y in axes units: on the axis, whatever the data's range
        ax.plot(failed, [0.03] * len(failed), "x", color="tab:red", markersize=9, mew=2, clip_on=False,
                transform=ax.get_xaxis_transform(), label=f"failed ({len(failed)}): see its row")  # fmt: skip
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return len(failed)


def _ticks(ax: Axes, rows: Sequence[dict], x: str) -> None:
    """Label the swept values themselves, not log decades (which overlap on short ranges)."""
    values = sorted({float(r[x]) for r in rows if r[x] != ""})
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.minorticks_off()


def _note(fig: Figure, rows: Sequence[dict], failed: int) -> None:
    """Under the plots: how many points failed (their x marks) and where their errors are."""
    if failed:
        text = f"{failed} of {len(rows)} points failed (red x at the foot of the axes): errors in their rows"
        fig.supxlabel(text, fontsize="small", color="tab:red")


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return path


def save_all(figures: dict[str, Figure], directory: str | Path) -> list[Path]:
    """Writes each figure as DIRECTORY/NAME (PNG), atomically; the paths written."""
    return [_save(fig, Path(directory) / name) for name, fig in figures.items()]


def sweep_figures(rows: Sequence[dict], title: str) -> dict[str, Figure]:
    """A simulation sweep's plots by file name: throughput against batch, TTFT and TPOT against
    prompt length."""
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    keys = _varying(rows, ("prompt_len", "chips", "pp", "dtype"))
    failed = _plot(ax, rows, "batch", "throughput_tokens_per_s", keys)
    ax.set(xscale="log", xlabel="batch", ylabel="tokens / s (end to end)")
    ax.set_title(f"{title}: throughput vs batch")
    _ticks(ax, rows, "batch")
    _note(fig, rows, failed)
    figures = {"throughput_vs_batch.png": fig}
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    for i, (metric, name) in enumerate((("ttft_seconds", "TTFT"), ("tpot_seconds_mean", "TPOT (mean)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        failed = _plot(ax, rows, "prompt_len", metric, _varying(rows, ("batch", "chips", "pp", "dtype")), 1e3)
        ax.set(xscale="log", xlabel="prompt length", ylabel=f"{name} (ms)", title=f"{name} vs prompt length")
        _ticks(ax, rows, "prompt_len")
    fig.suptitle(title)
    _note(fig, rows, failed)
    figures["latency_vs_prompt.png"] = fig
    return figures


SERVE_LINES = ("chips", "pp", "dtype", "prompt_len", "gen_len")  # what tells a serving sweep's lines apart


def serve_sweep_figures(rows: Sequence[dict], title: str) -> dict[str, Figure]:
    """A serving sweep's plots by file name, per load kind swept (Poisson rate, closed-loop
    clients): output throughput, and TTFT and TPOT p50, against the load. Runs at rate inf (all at
    once) have no place on a rate axis: the note under the plots counts them."""
    figures = {}
    for load, name in (("rate", "arrival rate (requests / s)"), ("concurrency", "clients (closed loop)")):
        chosen = [r for r in rows if r[load] != "" and math.isfinite(float(r[load]))]
        at_once = sum(r[load] != "" and not math.isfinite(float(r[load])) for r in rows)
        if not chosen:
            continue
        keys = _varying(chosen, SERVE_LINES)
        fig = Figure(figsize=(13, 4.5), layout="constrained")
        panels = (("throughput_output_tokens_per_s", "output tokens / s", 1.0),
                  ("ttft_p50_s", "TTFT p50 (ms)", 1e3), ("tpot_p50_s", "TPOT p50 (ms)", 1e3))  # fmt: skip
        for i, (metric, ylabel, scale) in enumerate(panels):
            ax = fig.add_subplot(1, 3, i + 1)
            failed = _plot(ax, chosen, load, metric, keys, scale)
            ax.set(xlabel=name, ylabel=ylabel, title=f"{ylabel.split(' (')[0]} vs load")
            _ticks(ax, chosen, load)
        shown = f"{title}: serving, {len(chosen)} runs"
        fig.suptitle(shown + (f" ({at_once} at rate inf, all at once, not on this axis)" if at_once else ""))
        _note(fig, chosen, failed)
        figures[f"serve_vs_{load}.png"] = fig
    return figures


def plan_figures(rows: Sequence[dict], title: str, percentile: float,
                 slo_tpot_s: float | None) -> dict[str, Figure]:  # fmt: skip
    """A plan's plot by file name: each candidate that met the SLOs at its found rate, output
    throughput per card against its TPOT at the SLO percentile, coloured by chips; the Pareto
    frontier (`front`: indices into `rows`) joined and labelled, the first row (the best by goodput
    per card) starred, the TPOT SLO dashed. The note under it counts the candidates not shown."""
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.add_subplot()
    ok = [r for r in rows if r["status"] == "ok"]
    for chips in sorted({r["chips"] for r in ok}):
        mine = [r for r in ok if r["chips"] == chips]
        ax.scatter([r["tpot_s"] * 1e3 for r in mine], [r["output_tokens_per_s_per_card"] for r in mine],
                   s=22, alpha=0.7, label=f"{chips} chip{'s' * (chips > 1)}")  # fmt: skip
    edge = [ok[i] for i in pareto([(r["tpot_s"], r["output_tokens_per_s_per_card"]) for r in ok])]
    ax.plot([r["tpot_s"] * 1e3 for r in edge], [r["output_tokens_per_s_per_card"] for r in edge], "-",
            color="black", lw=1, label="Pareto frontier")  # fmt: skip
    for r in edge:
        ax.annotate(f"tp{r['tp']} pp{r['pp']} dp{r['dp']} {r['dtype']}/{r['kv_dtype']} {r['max_seqs']} seqs "
                    f"{r['max_batch_tokens']} tok", (r["tpot_s"] * 1e3, r["output_tokens_per_s_per_card"]),
                    fontsize="x-small", xytext=(4, 4), textcoords="offset points")  # fmt: skip
    if ok:
        ax.plot(ok[0]["tpot_s"] * 1e3, ok[0]["output_tokens_per_s_per_card"], "*", color="tab:red",
                markersize=14, label="best goodput per card")  # fmt: skip
    if slo_tpot_s is not None:
        ax.axvline(slo_tpot_s * 1e3, ls="--", color="gray", label=f"TPOT SLO {slo_tpot_s * 1e3:g} ms")
    ax.set(xlabel=f"TPOT p{percentile:g} at the found rate (ms)", ylabel="output tokens / s per card",
           title=f"{title}: {len(ok)} candidates meeting the SLOs")  # fmt: skip
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    if len(ok) < len(rows):
        fig.supxlabel(f"{len(rows) - len(ok)} of {len(rows)} candidates not shown: they do not fit or meet "
                      "no rate (their rows say why)", fontsize="small")  # fmt: skip
    return {"plan.png": fig}
