"""The figures a measured run and its replay are compared on, defined once for both sides as vLLM's
serving benchmark defines them (tcp_compiler.serve.metrics): TTFT, TPOT, ITL (every gap between
two successive tokens of a request, pooled over the requests) and E2E at mean/p50/p90/p99, and
output and total tokens per second over the run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
THROUGHPUTS = ("output_tokens_per_s", "total_tokens_per_s")


@dataclass(frozen=True)
class Stat:
    """A latency over the requests, in seconds; None where the source does not give it (a vLLM
    result file keeps the percentiles it was asked for: p99 by default)."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @staticmethod
    def of(values: np.ndarray) -> Stat:
        """The statistics of a sample (numpy's linear percentiles, as vLLM takes them); all None
        for an empty one."""
        if len(values) == 0:
            return Stat()
        p50, p90, p99 = (float(v) for v in np.percentile(values, (50, 90, 99)))
        return Stat(float(np.mean(values)), p50, p90, p99)


@dataclass(frozen=True)
class RunMetrics:
    """One run's figures, measured or simulated."""

    ttft: Stat
    tpot: Stat
    itl: Stat
    e2e: Stat
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None

    def flat(self) -> dict[str, float | None]:
        """Every figure by name: `ttft_p50_s`, ..., `output_tokens_per_s`, `total_tokens_per_s`."""
        named = {f"{m}_{s}_s": getattr(getattr(self, m), s) for m in LATENCIES for s in STATS}
        return {**named, **{t: getattr(self, t) for t in THROUGHPUTS}}


def per_request(
    ttft: np.ndarray,
    latency: np.ndarray,
    outputs: np.ndarray,
    itl: np.ndarray,
    duration: float | None,
    inputs: np.ndarray,
) -> RunMetrics:
    """The figures from per-request times (seconds) and lengths: TPOT is (latency - TTFT) /
    (output - 1) over the requests of more than one output token; throughput is tokens over
    `duration` (None: unknown)."""
    several = outputs > 1
    tpot = (latency - ttft)[several] / (outputs[several] - 1)
    rate = (lambda tokens: float(tokens) / duration) if duration else (lambda tokens: None)
    return RunMetrics(Stat.of(ttft), Stat.of(tpot), Stat.of(itl), Stat.of(latency),
                      rate(outputs.sum()), rate(outputs.sum() + inputs.sum()))  # fmt: skip


FIGURES = tuple(RunMetrics(*(Stat(),) * 4, None, None).flat())  # every figure's name, in order
