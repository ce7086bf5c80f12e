"""The highest Poisson arrival rate whose latency percentiles meet the SLOs (`tcpc serve
--max-rate`): a bisection over rates, each probe a serving run of the same seeded requests, whose
arrivals stretch as 1 / rate (so a run at a higher rate is the same run, compressed).

The percentiles leave out the first requests (the warm-up: an empty server answers them faster than
a loaded one does) and count enough requests after them for the percentile asked: at least TAIL of
them beyond it. The answer's statistical margin is its bracket: the highest rate found passing and
the lowest found failing, which the bisection narrows to BRACKET of the rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tcp_compiler.errors import TcpcError
from tcp_compiler.option_fields import option
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.server import ServeResult
from tcp_compiler.serve.workload import Request, Workload

TAIL = 10  # measured requests beyond the percentile asked (p90: 100 measured, 10 in its tail)
WARMUP_FRACTION = 0.2  # of the measured requests served first and left out of the percentiles
BRACKET = 0.05  # the bisection stops once the lowest failing rate is within 5% of the highest passing
SPAN = 1 << 10  # the search reaches down to the server's capacity / SPAN before calling an SLO impossible


def percentile(text: str) -> float:
    """A percentile strictly between 0 and 100; a ValueError otherwise."""
    try:
        value = float(text.strip(" \t")) if text.isascii() else math.nan
    except ValueError:
        value = math.nan
    if not 0 < value < 100:
        raise ValueError(f"expected a percentile above 0 and below 100, got {text!r}")
    return value


@dataclass(frozen=True)
class SloPercentile:
    """The percentile the latency SLOs bound in a rate search (`tcpc serve --max-rate`, `tcpc plan`)."""

    slo_percentile: float = option(90.0, "the latency percentile --slo-ttft and --slo-tpot bound in the rate "
                                   "search (default %(default)s)", "P", parse=percentile)  # fmt: skip


def measured_requests(pct: float) -> int:
    """Requests the percentile is taken over: TAIL of them beyond it."""
    return math.ceil(TAIL / (1 - pct / 100) - 1e-9)


def warmup_requests(measured: int) -> int:
    return math.ceil(WARMUP_FRACTION * measured)


def searched(work: Workload, slo_ttft: float | None, slo_tpot: float | None,
             pct: float) -> tuple[Workload, Slo]:  # fmt: skip
    """The requests a search serves (`work`'s, the count raised to the warm-up and the requests the
    percentile needs) and the SLO it tests them against."""
    measured = max(work.requests, measured_requests(pct))
    slo = Slo(slo_ttft, slo_tpot, pct, warmup_requests(measured))
    return replace(work, requests=slo.warmup + measured), slo


def at_rate(work: Workload, rate: float | None) -> list[Request]:
    """`work`'s requests arriving at `rate` (None: all at once)."""
    return replace(work, rate=rate or math.inf).load()


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None
    tpot_s: float | None
    percentile: float
    warmup: int  # first requests (by id: arrival order) left out

    def tails(self, result: ServeResult) -> tuple[float, float]:
        """The run's TTFT and TPOT at the percentile, over the requests after the warm-up (TPOT over
        those of more than one output token)."""
        lat, seqs = latencies(result), result.sequences
        kept = np.array([s.id >= self.warmup for s in seqs])
        several = np.array([s.request.output_len > 1 for s in seqs])
        tpot = lat["tpot"][kept[several]]
        return (float(np.percentile(lat["ttft"][kept], self.percentile)),
                float(np.percentile(tpot, self.percentile)) if len(tpot) else 0.0)  # fmt: skip

    def excess(self, ttft: float, tpot: float) -> float:
        """The largest latency over its SLO, as a ratio (at most 1: it passes)."""
        pairs = ((ttft, self.ttft_s), (tpot, self.tpot_s))
        return max(value / slo for value, slo in pairs if slo is not None)


@dataclass(frozen=True)
class Probe:
    rate: float
    ttft_s: float  # at the percentile
    tpot_s: float
    result: ServeResult

    def passes(self, slo: Slo) -> bool:
        return slo.excess(self.ttft_s, self.tpot_s) <= 1.0


@dataclass(frozen=True)
class Found:
    best: Probe  # the highest rate found passing
    failing_rate: float  # the lowest rate found failing (or, capacity-bound, the first past capacity)
    simulations: int
    capacity_bound: bool  # the SLOs hold up to the server's capacity: rates past it fail as overload

    @property
    def margin(self) -> float:
        """How far above the found rate the lowest failing one is, as a fraction of it."""
        return self.failing_rate / self.best.rate - 1


def max_rate(serve_at: Callable[[float | None], ServeResult], slo: Slo) -> Found:
    """The highest rate meeting `slo`; `serve_at(rate)` serves the requests at `rate` (None: all at
    once). The all-at-once run's completion rate is the server's capacity for these requests: a
    higher arrival rate queues without bound in a long run (a finite sample can hide it), so no rate
    above it passes. Rates halve from it while they fail, down to it / SPAN; then bisection narrows
    the bracket to BRACKET. NoRate when no rate tried passes."""
    runs = 0

    def probe(rate: float | None) -> Probe:
        nonlocal runs
        runs += 1
        result = serve_at(rate)
        return Probe(rate or math.inf, *slo.tails(result), result)

    seqs = probe(None).result.sequences
    capacity = len(seqs) / max(max(s.finish_s for s in seqs), 1e-12)  # type: ignore[type-var]
    current = probe(capacity)
    if current.passes(slo):
        return Found(current, capacity * (1 + BRACKET), runs, True)
    low, high = None, current.rate
    while low is None:
        if high <= capacity / SPAN:
            raise _impossible(current, slo)
        current = probe(high / 2)
        if current.passes(slo):
            low = current
        else:
            high = current.rate
    while high / low.rate - 1 > BRACKET:
        mid = probe(math.sqrt(low.rate * high))
        if mid.passes(slo):
            low = mid
        else:
            high = mid.rate
    return Found(low, high, runs, False)


class NoRate(TcpcError):
    """No rate tried meets the SLOs."""


def _impossible(lowest: Probe, slo: Slo) -> NoRate:
    pairs = (("TTFT", lowest.ttft_s, slo.ttft_s, "--slo-ttft"),
             ("TPOT", lowest.tpot_s, slo.tpot_s, "--slo-tpot"))  # fmt: skip
    over = [f"{name} p{slo.percentile:g} {v:.3g} s is {v / s:.2f}x {flag} {s:g} s"
            for name, v, s, flag in pairs if s is not None and v > s]  # fmt: skip
    return NoRate(f"--max-rate: even the lowest rate tried, {lowest.rate:.3g} requests/s, fails: "
                     f"{'; '.join(over)}")  # fmt: skip
