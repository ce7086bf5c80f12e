"""Sweep plots: throughput against batch, and TTFT / TPOT against prompt length."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.files import atomic_output


def _series(
    rows: Sequence[dict], x: str, y: str, keys: tuple[str, ...]
) -> dict[str, list[tuple[float, float]]]:
    """Lines of (x, y) per combination of the other options; failed points are left out."""
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r[y] != "":
            label = ", ".join(f"{k}={r[k]}" for k in keys)
            lines[label].append((float(r[x]), float(r[y])))
    return {label: sorted(points) for label, points in lines.items()}


def _ticks(ax, rows: Sequence[dict], x: str) -> None:
    """Label the swept values themselves, not log decades (which overlap on short ranges)."""
    values = sorted({int(r[x]) for r in rows if r["status"] == "ok"})
    ax.set_xticks(values, [str(v) for v in values])
    ax.minorticks_off()


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def sweep_plots(rows: Sequence[dict], directory: str | Path, title: str) -> list[Path]:
    out = Path(directory)
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for label, points in _series(
        rows, "batch", "throughput_tokens_per_s", ("prompt_len", "chips", "dtype")
    ).items():
        ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set(
        xscale="log", xlabel="batch", ylabel="tokens / s (end to end)", title=f"{title}: throughput vs batch"
    )
    _ticks(ax, rows, "batch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    paths = [out / "throughput_vs_batch.png"]
    _save(fig, paths[0])
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    for i, (metric, name) in enumerate((("ttft_seconds", "TTFT"), ("tpot_seconds_mean", "TPOT (mean)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for label, points in _series(rows, "prompt_len", metric, ("batch", "chips", "dtype")).items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, [y * 1e3 for y in ys], marker="o", label=label)
        ax.set(xscale="log", xlabel="prompt length", ylabel=f"{name} (ms)", title=f"{name} vs prompt length")
        _ticks(ax, rows, "prompt_len")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title)
    paths.append(out / "latency_vs_prompt.png")
    _save(fig, paths[1])
    return paths
