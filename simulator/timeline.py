"""When each command of a Program ran: what both engines produce and every report reads."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EPS = 1e-9  # cycles: event times closer than this are the same moment (both engines use it)


@dataclass
class Timeline:
    start: np.ndarray  # float64 cycles
    end: np.ndarray

    def row(self, k: int) -> Timeline:
        """Program k's timeline, of a block's [programs, commands] one (simulator.engine.simulate_block)."""
        return Timeline(self.start[k], self.end[k])

    @property
    def cycles(self) -> int:
        return int(math.ceil(self.end.max() - EPS)) if len(self.end) else 0
