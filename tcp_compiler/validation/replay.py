"""A measured run's requests served again by the simulation (tcp_compiler.serve): the same
lengths in the same order, arriving as they did: a closed loop at the run's concurrency (vLLM's
`--max-concurrency` sends a request as one ends), else the file's arrival times, else all at once
(rate inf) or Poisson at its rate (seeded, first request at 0 as vLLM sends it)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from simulator.spec import Spec
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.report.serve_types import ServeReport
from tcp_compiler.serve import IterationCosts, Request, ServeResult, serve
from tcp_compiler.serve.metrics import duration, latencies
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.validation.measured import MeasuredRun
from tcp_compiler.validation.metrics import RunMetrics, per_request


@dataclass(frozen=True, eq=False)
class Replay:
    """The simulated run: what happened (`result`), its serving report, and the figures it is
    compared on (`metrics`, defined as the measured run's)."""

    result: ServeResult
    report: ServeReport
    metrics: RunMetrics


def replay(
    run: MeasuredRun,
    config: ModelConfig,
    hw: Spec,
    precision: Precision,
    options: ServeOptions = ServeOptions(),
    compile_options: CompileOptions | None = None,
    pp: int = 1,
    costs: IterationCosts | None = None,
    seed: int = 0,
) -> Replay:
    """Serves `run`'s requests through the simulation (`options` the serving policy; its
    concurrency is the run's) and returns the simulated run."""
    requests, concurrency = replayed_requests(run, seed)
    options = dataclasses.replace(options, concurrency=concurrency)
    result = serve(config, hw, precision, requests, options, compile_options, costs, pp, token_gaps=True)
    return Replay(result, serve_report(result), simulated_metrics(result))


def replayed_requests(run: MeasuredRun, seed: int = 0) -> tuple[list[Request], int | None]:
    """The run's requests as the server takes them, and the closed loop's clients (None: open)."""
    n = len(run.input_tokens)
    lengths = list(zip(run.input_tokens.tolist(), run.output_tokens.tolist(), strict=True))
    if run.concurrency is not None:
        return [Request(i, None, p, o) for i, (p, o) in enumerate(lengths)], run.concurrency
    if run.arrival_s is not None:
        arrivals = run.arrival_s.tolist()
    elif run.rate is not None and math.isinf(run.rate):
        arrivals = [0.0] * n
    elif run.rate is not None:
        gaps = np.random.default_rng(seed).exponential(1.0 / run.rate, n)
        arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])]).tolist()
    else:
        raise OptionError("{path}: give {concurrency} or {rate}: the file states neither, nor arrival "
                          "times", path=run.source)  # fmt: skip
    order = sorted(range(n), key=lambda i: arrivals[i])  # the server takes them in arrival order
    return [Request(i, arrivals[k], *lengths[k]) for i, k in enumerate(order)], None


def simulated_metrics(result: ServeResult) -> RunMetrics:
    """The figures of a simulated run served with token gaps recorded (serve(token_gaps=True))."""
    lat = latencies(result)
    seqs = result.sequences
    outputs = np.array([s.request.output_len for s in seqs])
    inputs = np.array([s.request.prompt_len for s in seqs])
    itl = np.concatenate([np.frombuffer(s.itl, float) for s in seqs]) if seqs else np.zeros(0)
    return per_request(lat["ttft"], lat["e2e"], outputs, itl, duration(result), inputs)
