"""Unit busy cycles laid out over time, for the utilisation timeline: the report's definition
(simulator.utilisation), only binned.

Each command's busy cycles on a unit are spread over when it used that unit: a DMA move's over the
pieces where it moved, in proportion to the bytes it moved in each (simulator.dma_shares), so its
start-up and its slowed-down stretches count for what they were; anything else's uniformly over
its [start, end). Summed over a phase, the bins give back exactly the report's busy cycles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.dma_shares import dma_shares
from simulator.spec import Spec
from simulator.trace import TraceRun
from simulator.utilisation import busy_cycles, command_bytes, utilisation


def chips_of(runs: Sequence[TraceRun]) -> int:
    """How many chips the runs' programs place commands on."""
    return max((int(r.program.chip.max()) + 1 for r in runs if len(r.program)), default=1)


def binned_busy(runs: Sequence[TraceRun], hw: Spec, units: Sequence[str], edges: np.ndarray) -> np.ndarray:
    """Busy cycles per unit, chip and bin [units, chips, bins] on the global time axis (cycles)."""
    out = np.zeros((len(units), chips_of(runs), len(edges) - 1))
    for run in runs:
        p, t, at = run.program, run.timeline, run.offset
        cols = [p.sites.unit(u) for u in units]
        amount = busy_cycles(p.sites.units, hw, p.busy, command_bytes(p))[:, cols]
        s = dma_shares(p, t, hw.rates.hbm_bytes_per_cycle, hw.rates.dma_bytes_per_cycle)
        moved = s.rate * (s.t1 - s.t0)
        per_command = np.bincount(s.command, weights=moved, minlength=len(p))
        piece = amount[s.command] * (moved / np.where(per_command > 0, per_command, 1.0)[s.command])[:, None]
        whole = per_command == 0  # commands that never moved bytes: spread over their whole span
        for chip in np.unique(p.chip).tolist():
            mine, pieces = whole & (p.chip == chip), s.chip == chip
            for row in range(len(cols)):
                out[row, chip] += spread(at + t.start[mine], at + t.end[mine], amount[mine, row], edges)
                out[row, chip] += spread(at + s.t0[pieces], at + s.t1[pieces], piece[pieces, row], edges)
    return out


def binned_utilisation(
    runs: Sequence[TraceRun], hw: Spec, units: Sequence[str], edges: np.ndarray
) -> np.ndarray:
    """Utilisation per unit and bin [units, bins], the mean over the chips of each chip's."""
    return utilisation(binned_busy(runs, hw, units, edges), np.diff(edges)).mean(axis=1)


def phase_utilisation(
    runs: Sequence[TraceRun], hw: Spec, units: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per phase (prefill, decode) and unit: busy cycles over the phase's cycles, mean over chips:
    the report's figure when the runs are all of the phase's programs."""
    chips = chips_of(runs)
    busy: dict[str, np.ndarray] = {}
    cycles: dict[str, float] = {}
    for run in runs:
        p, phase = run.program, run.phase
        counts = command_bytes(p)
        per_chip = np.zeros((chips, len(p.sites.units)))
        for chip in range(chips):
            mine = p.chip == chip
            moved = {k: v[mine].sum() for k, v in counts.items()}
            per_chip[chip] = busy_cycles(p.sites.units, hw, p.busy[mine].sum(axis=0), moved)
        cols = [p.sites.unit(u) for u in units]
        busy[phase] = busy.get(phase, 0.0) + per_chip[:, cols]
        cycles[phase] = cycles.get(phase, 0.0) + run.timeline.cycles
    means = {phase: utilisation(busy[phase], cycles[phase]).mean(axis=0) for phase in busy}
    return {phase: dict(zip(units, m.tolist(), strict=True)) for phase, m in means.items()}


def spread(start: np.ndarray, end: np.ndarray, amount: np.ndarray, edges: np.ndarray) -> np.ndarray:
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
