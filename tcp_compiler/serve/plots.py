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
from simulator.targets import energy_of
from tcp_compiler.serve.metrics import iteration_energy, latencies
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
    figures = {"latency_cdf.png": _latency_cdf, "throughput.png": throughput_figure,
               "kv_occupancy.png": kv_figure, "power.png": power_figure}  # fmt: skip
    for name, draw in figures.items():
        _save(draw(result, title), out / name)
    return list(figures)


def _figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (8, 4.5)):
    fig = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png")


def _latency_cdf(result: ServeResult, title: str) -> Figure:
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
    return fig


def throughput_figure(result: ServeResult, title: str) -> Figure:
    """Tokens per second over time, prefill above and decode below, each on its own scale (a
    prefill burst is tens of times the steady decode rate)."""
    it = result.iterations
    end = it.array("start_s") + it.array("duration_s")
    span = float(end.max()) if len(end) else 1.0
    edges = np.linspace(0.0, span, BINS + 1)
    width = edges[1] - edges[0]
    fig, axes = _figure(2, 1, (8, 6))
    panels = (("prefill_tokens", "prefill (prompt) tokens / s", "tab:orange"),
              ("decodes", "decode (output) tokens / s", "tab:blue"))  # a decode is one token  # fmt: skip
    for ax, (column, label, color) in zip(axes[:, 0], panels, strict=True):
        rate = np.histogram(end, bins=edges, weights=it.array(column))[0] / width
        ax.fill_between(edges[:-1] + width / 2, rate, step="mid", color=color, alpha=0.8)
        total = float(it.array(column).sum())
        ax.set_ylabel(label)
        ax.set_xlim(0, span)
        ax.set_ylim(0, None)
        ax.grid(alpha=0.3)
        ax.set_title(f"{label.split(' (')[0]}: {total:,.0f} tokens, {total / span:,.0f} / s on average",
                     fontsize="medium")  # fmt: skip
    axes[1][0].set_xlabel("time (s)")
    fig.suptitle(f"throughput: {title}")
    return fig


def kv_figure(result: ServeResult, title: str) -> Figure:
    """The KV blocks in use (their GB on the right) against the cache's size, and the decode batch
    beneath it on its own axis: absolute units, so a full cache and a small batch both show."""
    it, budget = result.iterations, result.budget
    start = it.array("start_s")
    fig, axes = _figure(2, 1, (8, 6))
    kv, batch = axes[0][0], axes[1][0]
    kv.step(start, it.array("kv_blocks_used"), where="post", label="KV blocks in use")
    peak = int(it.array("kv_blocks_used").max(initial=0))
    if peak >= budget.blocks / 4:  # the cache's size on the scale, unless it would flatten the use
        kv.axhline(budget.blocks, color="tab:red", linestyle="--", label=f"cache: {budget.blocks:,} blocks")
        kv.set_ylim(0, budget.blocks * 1.08 or 1)
    else:
        kv.set_ylim(0, max(peak * 1.4, 1))
        kv.plot([], [], " ", label=f"cache: {budget.blocks:,} blocks (off the scale)")
    kv.set_ylabel(f"blocks ({budget.block_size} tokens each)")
    block_gb = budget.kv_bytes_per_token * budget.block_size / 1e9
    gb = kv.secondary_yaxis("right", functions=(lambda b: b * block_gb, lambda g: g / block_gb))
    gb.set_ylabel("GB per chip")
    kv.legend(loc="upper center", ncols=2, fontsize="small")  # above the data: the limits leave room
    kv.grid(alpha=0.3)
    kv.set_title(f"KV cache and batch: {title}")
    batch.step(start, it.array("decodes"), where="post", color="tab:green", label="decoding sequences")
    batch.step(start, it.array("prefill_sequences"), where="post", color="tab:orange", alpha=0.7,
               label="sequences in prefill")  # fmt: skip
    most = max(int(it.array("decodes").max(initial=0)), int(it.array("prefill_sequences").max(initial=0)), 1)
    batch.set_ylim(0, most * 1.4)
    batch.set_xlabel("time (s)")
    batch.set_ylabel("sequences per iteration")
    batch.legend(loc="upper center", ncols=2, fontsize="small")
    batch.grid(alpha=0.3)
    batch.sharex(kv)
    return fig


def power_figure(result: ServeResult, title: str) -> Figure:
    """Power per chip over time: each iteration's while it runs, idle power between iterations."""
    it = result.iterations
    _, power = iteration_energy(result)
    start, end = it.array("start_s"), it.array("start_s") + it.array("duration_s")
    idle = energy_of(result.hardware).point(result.hardware).idle_power_w
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
    return fig
