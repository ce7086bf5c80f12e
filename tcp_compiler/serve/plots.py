"""Plots of a serving run: latency CDFs, throughput over time, KV occupancy over time, power over time.

Drawn on matplotlib's Agg canvas (no pyplot, no window) and written atomically, as
simulator.plots does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.errors import OutputError
from simulator.files import atomic_output
from simulator.targets.rngd.energy import ENERGY
from tcp_compiler.report.serve_build import iteration_energy
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.server import ServeResult

BINS = 100  # time bins of the throughput plot


def write_plots(result: ServeResult, directory: str | Path) -> list[str]:
    """Writes latency_cdf.png, throughput.png, kv_occupancy.png and power.png into `directory`."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out}: cannot create: {e.strerror}") from None
    title = f"{result.config.name} on {result.hardware.name}, {result.options.scheduler}"
    _latency_cdf(result, out / "latency_cdf.png", title)
    _throughput(result, out / "throughput.png", title)
    _kv(result, out / "kv_occupancy.png", title)
    _power(result, out / "power.png", title)
    return ["latency_cdf.png", "throughput.png", "kv_occupancy.png", "power.png"]


def _figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (8, 4.5)):
    fig = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png")


def _latency_cdf(result: ServeResult, path: Path, title: str) -> None:
    lat = latencies(result)
    fig, axes = _figure(1, 3, (12, 4))
    for ax, (key, label, scale) in zip(
        axes[0],
        (("ttft", "TTFT (ms)", 1e3), ("tpot", "TPOT (ms)", 1e3), ("e2e", "end to end (s)", 1.0)),
        strict=True,
    ):
        values = np.sort(lat[key]) * scale
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    fig.suptitle(f"latency CDFs: {title}")
    _save(fig, path)


def _throughput(result: ServeResult, path: Path, title: str) -> None:
    it = result.iterations
    end = it.array("start_s") + it.array("duration_s")
    span = float(end.max()) if len(end) else 1.0
    edges = np.linspace(0.0, span, BINS + 1)
    width = edges[1] - edges[0]
    decoded = it.array("decodes")  # one token per decode
    prefilled = it.array("prefill_tokens")
    fig, axes = _figure()
    ax = axes[0][0]
    for values, label in ((decoded, "decode tokens/s"), (prefilled, "prefill tokens/s")):
        sums, _ = np.histogram(end, bins=edges, weights=values)
        ax.plot(edges[:-1] + width / 2, sums / width, label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("tokens / s")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"throughput: {title}")
    _save(fig, path)


def _kv(result: ServeResult, path: Path, title: str) -> None:
    it = result.iterations
    fig, axes = _figure()
    ax = axes[0][0]
    ax.step(
        it.array("start_s"),
        it.array("kv_blocks_used") / max(result.budget.blocks, 1),
        where="post",
        label="KV blocks used",
    )
    ax.step(
        it.array("start_s"),
        it.array("decodes") / max(it.array("decodes").max(initial=1), 1),
        where="post",
        alpha=0.5,
        label="decode batch (of its peak)",
    )
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("fraction")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"KV occupancy ({result.budget.blocks:,} blocks): {title}")
    _save(fig, path)


def _power(result: ServeResult, path: Path, title: str) -> None:
    """Power per chip over time: each iteration's while it runs, idle power between iterations."""
    it = result.iterations
    _, power = iteration_energy(result)
    start, end = it.array("start_s"), it.array("start_s") + it.array("duration_s")
    idle = ENERGY.point(result.hardware).idle_power_w
    times = np.ravel(np.column_stack([start, end]))
    watts = np.ravel(np.column_stack([power, np.full(len(power), idle)]))
    fig, axes = _figure()
    ax = axes[0][0]
    ax.step(times, watts, where="post", label="power per chip")
    ax.axhline(result.hardware.chip.tdp_w, color="tab:red", linestyle="--", label="TDP (chip.tdp_w)")
    ax.axhline(idle, color="tab:gray", linestyle=":", label="idle")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("W")
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"power ({result.chips} chip{'s' if result.chips > 1 else ''}, each): {title}")
    _save(fig, path)
