"""Roofline, utilisation-over-time and energy-by-unit PNGs of simulated runs, for reports and quick
visual checks.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot), so nothing ever opens a window
and the global backend is left alone; files are written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from simulator.busy_time import binned_utilisation, chips_of, phase_utilisation
from simulator.files import atomic_output
from simulator.roofline_markers import Marker, markers
from simulator.spec import Spec
from simulator.trace import TraceRun, run_end

PHASE_COLOURS = {"prefill": "tab:blue", "decode": "tab:orange"}
SHAPES = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
LEGEND_MARKERS = 16  # legend entries for single markers; lighter ones are grouped per phase
ROOF_COLOURS = ("tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")


@dataclass(frozen=True)
class RooflinePoint:
    """One measured thing (an op, a layer, a phase): its FLOPs, HBM bytes and simulated time."""

    name: str
    phase: str  # "prefill" | "decode"
    flops: float
    bytes: float
    seconds: float
    layer: int = -1  # a per-layer op's decoder layer: identical layers' points share one legend entry
    role: str = ""  # a per-layer op's role in its layer


def roofline_png(
    path: str | os.PathLike,
    points: Sequence[RooflinePoint],
    peak_flops: dict[str, float],
    hbm_bytes_per_s: float,
    title: str,
) -> list[str]:
    """Log-log roofline: achieved FLOP/s against arithmetic intensity, under the HBM and compute roofs.

    Points on one spot share a marker (simulator.roofline_markers) and every legend entry is one
    visible marker; marker area grows with time, so the points that matter stand out. Points with no
    bytes, no time or no FLOPs have no place on log axes and are skipped. Returns the legend's labels.
    """
    spots = markers(points)
    x = np.array([m.x for m in spots])
    y = np.array([m.y for m in spots])
    ridges = {d: peak / hbm_bytes_per_s for d, peak in peak_flops.items()}
    lo_x = min([*x, *ridges.values(), 1.0]) / 4
    hi_x = max([*x, *ridges.values(), 1.0]) * 8
    lo_y = min([*y, hbm_bytes_per_s * lo_x]) / 2
    hi_y = max([*y, *peak_flops.values(), hbm_bytes_per_s * lo_x]) * 3

    fig = Figure(figsize=(13, 7), dpi=110)
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
    labels = _draw_markers(ax, spots)
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.1)
    # beside the axes, never over a roof or a point
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=8,
                       title="marker area ∝ time", title_fontsize=8)  # fmt: skip
    for handle in legend.legend_handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])
    fig.tight_layout()
    _save(fig, path)
    return labels


def _draw_markers(ax: Axes, spots: list[Marker]) -> list[str]:
    """One scatter per marker, each with its own legend entry (distinct shape within its phase);
    past LEGEND_MARKERS, the lighter markers of a phase are small dots under one entry per phase."""
    biggest = max((m.seconds for m in spots), default=1.0)
    named, rest = spots[:LEGEND_MARKERS], spots[LEGEND_MARKERS:]
    shape_of: dict[str, int] = {}
    labels: list[str] = []
    for m in named:
        k = shape_of[m.phase] = shape_of.get(m.phase, -1) + 1
        label = f"{m.phase}: {m.label}"
        ax.scatter(
            [m.x], [m.y], s=12 + 220 * m.seconds / biggest, marker=SHAPES[k % len(SHAPES)],
            color=PHASE_COLOURS.get(m.phase, "tab:green"), alpha=0.7, edgecolors="black", linewidths=0.4,
            label=label, zorder=3,
        )  # fmt: skip
        labels.append(label)
    for phase in dict.fromkeys(m.phase for m in rest):
        mine = [m for m in rest if m.phase == phase]
        label = f"{phase}: {len(mine)} lighter spots ({sum(len(m.names) for m in mine)} ops)"
        ax.scatter(
            [m.x for m in mine], [m.y for m in mine], s=10, marker=".",
            color=PHASE_COLOURS.get(phase, "tab:green"), alpha=0.8, label=label, zorder=2,
        )  # fmt: skip
        labels.append(label)
    return labels


def timeline_png(
    path: str | os.PathLike,
    runs: Sequence[TraceRun],
    units: Sequence[str],
    hw: Spec,
    title: str,
    bins: int = 400,
) -> None:
    """Utilisation of each unit over time, one small panel per unit, averaged over the chips.

    Utilisation is the report's (simulator.utilisation: DMA and links by the bytes they moved at
    full bandwidth), binned by simulator.busy_time; each panel says its mean per phase, which is
    the report's figure when every step of the phase is plotted. Lines mark where runs begin.
    """
    if not units:
        raise ValueError("no units to plot")
    known = runs[0].program.sites.unit_names if runs else ()
    for unit in units:
        if unit not in known:
            raise ValueError(f"unknown unit {unit!r}; known: {', '.join(known)}")
    t0 = min((r.offset for r in runs), default=0.0)
    t1 = max((run_end(r) for r in runs), default=1.0)
    if t1 <= t0:
        t1 = t0 + 1.0
    edges = np.linspace(t0, t1, bins + 1)
    chips = chips_of(runs)
    util = binned_utilisation(runs, hw, units, edges)
    means = phase_utilisation(runs, hw, units)

    clock_hz = hw.rates.clock_hz
    ms = 1e3 / clock_hz
    fig = Figure(figsize=(12, 1.15 * len(units) + 1.6), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(units), 1, sharex=True, squeeze=False)[:, 0]
    starts = [r.offset for r in runs]
    kinds = [r.phase for r in runs]
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
        ax.set_ylabel(unit, rotation=0, ha="right", va="center", fontsize=9)
        text = "\n".join(f"{phase} {m[unit]:.0%}" for phase, m in means.items())
        ax.text(1.005, 0.5, text, transform=ax.transAxes, va="center", fontsize=8)
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
    suffix = f" — utilisation, mean over {chips} chips" if chips > 1 else " — utilisation"
    fig.suptitle(title + suffix, fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def energy_png(path: str | os.PathLike, by_phase: dict[str, dict[str, float]], title: str) -> None:
    """Dynamic energy per unit (and memory), one bar group per phase: where the joules go."""
    homes = list(dict.fromkeys(h for homes in by_phase.values() for h in homes))
    fig = Figure(figsize=(8, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.8 / max(len(by_phase), 1)
    for k, (phase, joules) in enumerate(by_phase.items()):
        x = np.arange(len(homes)) + k * width
        ax.bar(x, [joules.get(h, 0.0) for h in homes], width, label=phase,
               color=PHASE_COLOURS.get(phase))  # fmt: skip
    ax.set_xticks(np.arange(len(homes)) + width * (len(by_phase) - 1) / 2, homes, rotation=30, ha="right")
    ax.set_ylabel("J (decode: per step)")
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    ax.set_title(f"energy by unit: {title}")
    _save(fig, path)


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
