"""DMA moves laid out onto the chip's TensorDMA engines as the engine model shares them.

The engine model pools a chip's engines (simulator.dma_shares): a move running at `rate` bytes per
cycle holds rate / bytes_per_cycle_each engines' worth of the pool, and any number of descriptors
may be in flight. Drawing each descriptor on a track of its own would show more tracks than the chip
has engines, so instead each interval of constant shares stacks the moves (in the engine's order)
on the engines 0..n-1, and an engine that two moves share in that interval serves them one after
the other for their fractions of it. So every engine track is busy exactly while the pool is, and
a move's slices add up to its bytes / bytes_per_cycle_each engine-cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.dma_shares import Shares

_TINY = 1e-9  # engines, or cycles: below this a fraction is float noise


@dataclass(frozen=True)
class EngineSlices:
    """Engine `engine` of `chip` served move `command` over [t0, t1) (cycles, the run's axis)."""

    command: np.ndarray  # int64
    chip: np.ndarray  # int64
    engine: np.ndarray  # int64
    t0: np.ndarray  # float64
    t1: np.ndarray

    def __len__(self) -> int:
        return len(self.command)


def engine_slices(shares: Shares, engines: int, bytes_per_cycle_each: float) -> EngineSlices:
    """Lays each interval's shares onto the engines; consecutive slices of one move on one engine
    are merged, so a move alone on the pool is one slice per engine it holds."""
    rows: list[list[float]] = []  # [command, chip, engine, t0, t1]
    last: dict[tuple[int, int], list[float]] = {}  # (chip, engine) -> its latest slice
    bounds = np.flatnonzero(
        np.r_[True, (np.diff(shares.t0) != 0) | (np.diff(shares.chip) != 0), True]
    ).tolist()  # one group per interval of one chip
    width = (shares.rate / bytes_per_cycle_each).tolist()
    command, chip_of, t0s, t1s = (a.tolist() for a in (shares.command, shares.chip, shares.t0, shares.t1))
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        chip, a, b = chip_of[lo], t0s[lo], t1s[lo]
        top = np.cumsum([0.0, *width[lo:hi]]).tolist()
        for engine in range(engines):
            parts = [
                (command[lo + j], min(top[j + 1], engine + 1) - max(top[j], engine))
                for j in range(hi - lo)
                if top[j] < engine + 1 and top[j + 1] > engine
            ]
            previous = last.get((chip, engine))
            parts.sort(key=lambda part: previous is None or part[0] != previous[0] or previous[4] < a - _TINY)
            at = a
            for cmd, fraction in parts:
                if fraction <= _TINY:
                    continue
                end = min(b, at + fraction * (b - a))
                if (
                    previous is not None
                    and previous[0] == cmd
                    and abs(previous[4] - at) <= _TINY * max(1.0, at)
                ):
                    previous[4] = end
                else:
                    previous = [cmd, chip, engine, at, end]
                    rows.append(previous)
                at = end
            if previous is not None:
                last[(chip, engine)] = previous
    cols = np.array(rows, np.float64).reshape(len(rows), 5)
    return EngineSlices(
        cols[:, 0].astype(np.int64),
        cols[:, 1].astype(np.int64),
        cols[:, 2].astype(np.int64),
        cols[:, 3],
        cols[:, 4],
    )
