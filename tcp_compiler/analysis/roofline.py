"""The roofline, in one place: how long work would take if the resource it needs most ran at its
roof the whole time, and what bounds it.

Every bound tcpc reports divides here: the simulate report's phases, layers, ops and op roles,
serve's model bound per iteration (tcp_compiler.serve.metrics), the config-only floor
(tcp_compiler.analysis.config_floor), and through the report the sweeps and the roofline plot.
The roofs are one chip's: peak contraction rate for a dtype, sustained HBM bandwidth (the rate the
simulator moves HBM bytes at), per-direction chip-link bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.spec import DTypeName, Spec

Bound = Literal["compute", "memory", "communication", "overhead"]  # what bounds a piece of work (see `bound`)


@dataclass(frozen=True)
class Roofline:
    """One chip's roofs; `terms` gives the seconds of a piece of work under each."""

    flops_per_s: float
    hbm_bytes_per_s: float
    link_bytes_per_s: float

    @classmethod
    def of(cls, hw: Spec, *dtypes: DTypeName) -> Roofline:
        """The roofs of `hw` with compute at the fastest peak of `dtypes` (a report's: the
        contraction engine's operand dtype) and HBM at its sustained bandwidth."""
        flops = max(hw.flops_per_second(d) for d in dtypes)
        return cls(flops, hw.hbm_bytes_per_second, hw.link_bytes_per_second)

    @classmethod
    def published_peak(cls, hw: Spec, *dtypes: DTypeName) -> Roofline:
        """As `of`, but HBM at its published peak, above the sustained rate: for a floor that no
        phase may beat, whatever the simulator's HBM rate (tcp_compiler.analysis.config_floor)."""
        flops = max(hw.flops_per_second(d) for d in dtypes)
        return cls(flops, hw.hbm_peak_bytes_per_second, hw.link_bytes_per_second)

    def terms(self, flops: float, hbm_bytes: float, link_bytes: float) -> tuple[float, float, float]:
        """Seconds of the compute, memory and communication terms (numpy arrays work too)."""
        return flops / self.flops_per_s, hbm_bytes / self.hbm_bytes_per_s, link_bytes / self.link_bytes_per_s

    def pipeline_terms(self, stages: list[tuple[int, int, int]], micro_batches: int) -> tuple[float, ...]:
        """Each term of a pipeline whose stages (work per chip of one micro-batch each) follow one
        another: a micro-batch passes every stage in turn, and the busiest stage works through
        every micro-batch, so a term is its sum over the stages plus (m - 1) of its largest."""
        per_stage = [self.terms(*work) for work in stages]
        return tuple(sum(t) + (micro_batches - 1) * max(t) for t in zip(*per_stage, strict=True))


def peak_flops(hw: Spec, dtype: DTypeName) -> float:
    """One chip's peak contraction rate for operands of `dtype` (FLOP/s): the compute roof of
    work that multiplies in it (the config floor counts each operand at its own)."""
    return hw.flops_per_second(dtype)


def bound(seconds: float, compute: float, memory: float, communication: float) -> Bound:
    """What limits a piece of work: the largest roofline term, or overhead when even that term
    explains less than half of the time it took (start-ups, latencies, serialisation)."""
    terms: dict[Bound, float] = {"compute": compute, "memory": memory, "communication": communication}
    name = max(terms, key=terms.__getitem__)
    return name if seconds <= 2 * terms[name] else "overhead"
