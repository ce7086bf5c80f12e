"""Roofline and utilisation-over-time PNGs of simulated runs, for reports and quick visual checks.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so nothing ever opens a window
and the global backend is left alone; files are written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from simulator.files import atomic_output
from simulator.program import UNITS
from simulator.trace import TraceRun, run_end

PHASE_COLOURS = {"prefill": "tab:blue", "decode": "tab:orange"}
ROOF_COLOURS = ("tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")


@dataclass(frozen=True)
class RooflinePoint:
    """One measured thing (an op, a layer, a phase): its FLOPs, HBM bytes and simulated time."""

    name: str
    phase: str  # "prefill" | "decode"
    flops: float
    bytes: float
    seconds: float


def roofline_png(
    path: str | os.PathLike,
    points: Sequence[RooflinePoint],
    peak_flops: dict[str, float],
    hbm_bytes_per_s: float,
    title: str,
) -> None:
    """Log-log roofline: achieved FLOP/s against arithmetic intensity, under the HBM and compute roofs.

    Marker area grows with a point's time, so the points that matter stand out among hundreds.
    Points with no bytes, no time or no FLOPs have no place on log axes and are skipped.
    """
    kept = [p for p in points if p.bytes > 0 and p.seconds > 0 and p.flops > 0]
    x = np.array([p.flops / p.bytes for p in kept])
    y = np.array([p.flops / p.seconds for p in kept])
    seconds = np.array([p.seconds for p in kept])
    ridges = {d: peak / hbm_bytes_per_s for d, peak in peak_flops.items()}
    lo_x = min([*x, *ridges.values(), 1.0]) / 4
    hi_x = max([*x, *ridges.values(), 1.0]) * 8
    lo_y = min([*y, hbm_bytes_per_s * lo_x]) / 2
    hi_y = max([*y, *peak_flops.values(), hbm_bytes_per_s * lo_x]) * 3

    fig = Figure(figsize=(10, 7), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)

    top_ridge = max(ridges.values(), default=hi_x)
    xs = np.geomspace(lo_x, min(top_ridge, hi_x), 64)
    ax.plot(xs, hbm_bytes_per_s * xs, color="black", lw=2, label=f"HBM {_si(hbm_bytes_per_s)}B/s")
    for k, (dtype, peak) in enumerate(sorted(peak_flops.items(), key=lambda kv: -kv[1])):
        colour = ROOF_COLOURS[k % len(ROOF_COLOURS)]
        ridge = ridges[dtype]
        ax.plot([ridge, hi_x], [peak, peak], color=colour, lw=2)
        ax.plot([ridge], [peak], "o", color=colour, ms=6)
        ax.annotate(
            f"{dtype} {_si(peak, 'T')}FLOP/s",
            (hi_x, peak),
            xytext=(-4, 3),
            textcoords="offset points",
            ha="right",
            va="bottom",
            color=colour,
            fontsize=9,
        )
        ax.annotate(
            f"ridge {ridge:.0f} FLOP/B",
            (ridge, peak),
            xytext=(5, -4),
            textcoords="offset points",
            ha="left",
            va="top",
            color=colour,
            fontsize=8,
        )
    biggest = seconds.max() if len(seconds) else 1.0
    phases = [p.phase for p in kept]
    for phase in dict.fromkeys([*PHASE_COLOURS, *phases]):
        mine = np.array([ph == phase for ph in phases], bool)
        if not mine.any():
            continue
        ax.scatter(
            x[mine],
            y[mine],
            s=12 + 220 * seconds[mine] / biggest,
            color=PHASE_COLOURS.get(phase, "tab:green"),
            alpha=0.6,
            edgecolors="black",
            linewidths=0.4,
            label=f"{phase} ({int(mine.sum())})",
            zorder=3,
        )
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    legend = ax.legend(loc="upper left", fontsize=9, title="marker area ∝ time", title_fontsize=8)
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])
    fig.tight_layout()
    _save(fig, path)


def timeline_png(
    path: str | os.PathLike,
    runs: Sequence[TraceRun],
    units: Sequence[str],
    clock_hz: float,
    title: str,
    bins: int = 400,
) -> None:
    """Utilisation of each unit over time, one small panel per unit, averaged over the chips.

    A command's busy cycles on a unit are spread uniformly over its [start, end), so a bin shows
    the fraction of its time the unit was busy (capped at 100% per chip); lines mark where runs
    (phases) begin.
    """
    if not units:
        raise ValueError("no units to plot")
    for unit in units:
        if unit not in UNITS:
            raise ValueError(f"unknown unit {unit!r}; known: {', '.join(UNITS)}")
    t0 = min((r.offset for r in runs), default=0.0)
    t1 = max((run_end(r) for r in runs), default=1.0)
    if t1 <= t0:
        t1 = t0 + 1.0
    edges = np.linspace(t0, t1, bins + 1)
    chips = max((int(r.program.chip.max()) + 1 for r in runs if len(r.program)), default=1)
    cols = [UNITS.index(u) for u in units]
    busy = np.zeros((len(units), chips, bins))
    for run in runs:
        p = run.program
        for chip in np.unique(p.chip).tolist():
            mine = p.chip == chip
            start = run.offset + run.timeline.start[mine]
            end = run.offset + run.timeline.end[mine]
            for row, col in enumerate(cols):
                busy[row, chip] += _spread(start, end, p.busy[mine, col].astype(np.float64), edges)
    # A unit is at most fully busy. Overlapping DMA descriptors each count their start-up as
    # busy, so they can claim more than the engine's time: cap each chip before averaging.
    util = np.clip(busy / np.diff(edges), 0.0, 1.0).mean(axis=1)

    ms = 1e3 / clock_hz
    fig = Figure(figsize=(12, 1.15 * len(units) + 1.6), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(units), 1, sharex=True, squeeze=False)[:, 0]
    starts = [r.offset for r in runs]
    kinds = [r.name.split()[0] if r.name.split() else r.name for r in runs]
    changes = [i for i in range(len(runs)) if i == 0 or kinds[i] != kinds[i - 1]]
    marked = range(len(runs)) if len(runs) <= max(1, bins // 4) else changes
    for k, (ax, unit) in enumerate(zip(axes, units, strict=True)):
        colour = f"C{k % 10}"
        ax.fill_between(edges * ms, np.append(util[k], util[k][-1]), step="post", color=colour, alpha=0.35)
        ax.step(edges * ms, np.append(util[k], util[k][-1]), where="post", color=colour, lw=0.9)
        for i in marked:
            ax.axvline(starts[i] * ms, color="grey", lw=0.6, alpha=0.45, zorder=0)
        ax.set_ylim(0, 1.08)
        ax.set_yticks([0, 0.5, 1.0])
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.tick_params(axis="y", labelsize=7)
        mean = float(util[k].mean())
        ax.set_ylabel(unit, rotation=0, ha="right", va="center", fontsize=9)
        ax.text(1.005, 0.5, f"avg {mean:.0%}", transform=ax.transAxes, va="center", fontsize=8)
        ax.grid(True, axis="y", alpha=0.25)
        ax.margins(x=0)
    few = len(runs) <= 12
    for i in range(len(runs)) if few else changes[:12]:
        axes[0].annotate(
            runs[i].name if few else kinds[i],
            (starts[i] * ms, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize=8,
            color="dimgrey",
            va="bottom",
        )
    axes[-1].set_xlabel("time (ms)")
    suffix = f" — busy fraction, mean over {chips} chips" if chips > 1 else " — busy fraction"
    fig.suptitle(title + suffix, fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def _spread(start: np.ndarray, end: np.ndarray, amount: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin, the part of each command's `amount` that falls in it, spread uniformly over
    [start, end): the difference of the cumulative busy function F at the bin edges, where
    F(x) = sum_i rate_i * clip(x - start_i, 0, end_i - start_i) is evaluated with sorted prefix sums."""
    keep = amount > 0
    start, end, amount = start[keep], end[keep], amount[keep]
    if not len(start):
        return np.zeros(len(edges) - 1)
    span = end - start
    point = span <= 0  # a zero-length command drops its amount into the bin where it sits
    rate = np.where(point, 0.0, amount / np.where(point, 1.0, span))

    def ramp(at: np.ndarray) -> np.ndarray:
        """sum_i rate_i * max(0, x - at_i) for every edge x."""
        order = np.argsort(at, kind="stable")
        a, r = at[order], rate[order]
        csum_r = np.concatenate([[0.0], np.cumsum(r)])
        csum_ra = np.concatenate([[0.0], np.cumsum(r * a)])
        k = np.searchsorted(a, edges, side="right")
        return edges * csum_r[k] - csum_ra[k]

    cumulative = ramp(start) - ramp(end)
    if point.any():
        p = np.sort(start[point])
        cp = np.concatenate([[0.0], np.cumsum(amount[point][np.argsort(start[point], kind="stable")])])
        cumulative = cumulative + cp[np.searchsorted(p, edges, side="right")]
    return np.maximum(np.diff(cumulative), 0.0)


def _si(value: float, prefix: str | None = None) -> str:
    """'262 T' style numbers for labels (three significant digits at most, no exponent)."""
    scales = {"P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0}
    if prefix is None:
        prefix = next((p for p, s in scales.items() if value >= s), "")
    v = value / scales[prefix]
    text = f"{v:.0f}" if v >= 100 else f"{v:.3g}"
    return f"{text} {prefix}"


def _save(fig: Figure, path: str | os.PathLike) -> None:
    """Renders to a temporary file next to `path`, then moves it into place."""
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png")
