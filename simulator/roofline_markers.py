"""Which roofline points share one visible marker, and what its legend entry says.

Identical layers give identical points (l0.down ... l9.down sit on one spot), so a legend entry per
point, or per phase with a point count, promises markers nobody can see. Points of one phase that
land within `CLOSE` decades of each other on both axes become one marker whose label says how many
ops it stands for; every legend entry then matches one marker on the plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

CLOSE = 0.02  # decades: closer than this on both log axes is one spot at any sensible figure size


class Point(Protocol):
    name: str
    phase: str
    flops: float
    bytes: float
    seconds: float
    layer: int  # the decoder layer of a per-layer op, -1 for none
    role: str  # what a per-layer op does in its layer, the same in every layer ("" for none)


@dataclass
class Marker:
    """One visible spot: the points drawn there (heaviest first) and their total time."""

    phase: str
    x: float  # FLOP per HBM byte
    y: float  # FLOP/s
    names: list[str] = field(default_factory=list)
    seconds: float = 0.0
    layers: list[int] = field(default_factory=list)  # each point's layer, as `names`
    roles: list[str] = field(default_factory=list)  # each point's role, as `names`

    @property
    def label(self) -> str:
        """"down x10 (l0-l9)" for a role repeated over layers, "up, gate" for a few others,
        "a +5 more" for many."""
        if len(self.names) == 1:
            return self.names[0]
        roles = set(self.roles)
        if min(self.layers) >= 0 and len(roles) == 1 and "" not in roles:
            return f"{roles.pop()} x{len(self.names)} (l{min(self.layers)}-l{max(self.layers)})"
        if len(self.names) <= 3:
            return ", ".join(self.names)
        return f"{self.names[0]} +{len(self.names) - 1} more"


def markers(points: Sequence[Point]) -> list[Marker]:
    """The plottable points (FLOPs, bytes and time all positive) merged into markers, heaviest
    marker first; a point joins the first marker of its phase it would be drawn on top of."""
    kept = [p for p in points if p.bytes > 0 and p.seconds > 0 and p.flops > 0]
    out: list[Marker] = []
    for p in sorted(kept, key=lambda p: -p.seconds):
        x, y = p.flops / p.bytes, p.flops / p.seconds
        near = next((m for m in out if m.phase == p.phase and _close(m.x, x) and _close(m.y, y)), None)
        if near is None:
            near = Marker(p.phase, x, y)
            out.append(near)
        near.names.append(p.name)
        near.layers.append(p.layer)
        near.roles.append(p.role)
        near.seconds += p.seconds
    return sorted(out, key=lambda m: -m.seconds)


def _close(a: float, b: float) -> bool:
    return abs(math.log10(a) - math.log10(b)) < CLOSE
