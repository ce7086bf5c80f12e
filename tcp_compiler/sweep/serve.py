"""Serving sweeps: one `tcpc serve` run per point of a grid of load (arrival rate or closed-loop
concurrency) x chips x precision x spec values, for `tcpc sweep --serve`. Rows follow
tcp_compiler.sweep's conventions: a hash to reproduce the point, a failed point's error in its row,
headline columns first and then every figure of the typed report as `report.<dotted name>`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.figures import figures
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve
from tcp_compiler.serve.workload import Lengths, Workload, lengths
from tcp_compiler.spec_settings import Setting
from tcp_compiler.sweep import USER_ERRORS, base_row, chip_counts, hardware, option_columns, spec_grid


@dataclass(frozen=True, kw_only=True)
class ServePoint:
    """One serving run's options; its fields, in order, are the first columns of its row (all but
    the seed). The load and lengths are those of a Workload."""

    model: str
    hw: str
    chips: int
    pp: int = 1  # pipeline stages, each of `chips` tensor-parallel chips
    dtype: str
    requests: int
    prompt_len: str  # a length distribution as `tcpc serve --prompt-len` takes it (Lengths' text)
    gen_len: str
    rate: float | None  # requests per second (Poisson; inf: all at once), or None with a concurrency
    concurrency: int | None  # closed-loop clients, or None with a rate
    seed: int = field(default=0, metadata={"column": False})
    spec: tuple[Setting, ...] = field(default=(), metadata={"column": False})  # as a Point's


def serve_grid(models: Sequence[str], hws: Sequence[str], chips: Sequence[int] | None, dtypes: Sequence[str],
               requests: int, prompt_len: Sequence[Lengths], gen_len: Sequence[Lengths],
               rates: Sequence[float], concurrency: Sequence[int], pp: Sequence[int] = (1,),
               settings: Sequence[tuple[str, Sequence[int | float]]] = ()) -> list[ServePoint]:  # fmt: skip
    """Every combination, loads last (rates, then concurrencies), in the order given; `chips` None:
    each spec's own count."""
    loads = [(r, None) for r in rates] + [(None, c) for c in concurrency]
    return [
        ServePoint(model=m, hw=hw, chips=c, pp=stages, dtype=d, requests=requests, prompt_len=str(p),
                   gen_len=str(g), rate=rate, concurrency=clients, spec=values)  # fmt: skip
        for m, hw in itertools.product(models, hws)
        for values, c, stages, d, p, g, (rate, clients) in itertools.product(
            spec_grid(settings), chip_counts(hw, chips), pp, dtypes, prompt_len, gen_len, loads
        )
    ]


SERVE_FIGURES = (
    "throughput_output_tokens_per_s", "throughput_total_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "preemptions", "peak_kv_blocks_used",
)  # fmt: skip
SERVE_COLUMNS = ("hash", *option_columns(ServePoint), "status", "error", *SERVE_FIGURES)


def run_serve_point(point: ServePoint, describe: Callable[[Exception], str] = str) -> dict:
    """One row; errors a user can cause become the row's `error` (as `describe` words them), never
    an exception."""
    row = {k: _blank(v) for k, v in base_row(point).items()}
    try:
        config = load_model(point.model).config
        hw, tp = hardware(point).ranks(point.chips)  # a card split into PE ranks: one rank, tp x ranks
        requests = Workload(requests=point.requests, prompt_len=lengths(point.prompt_len),
                            gen_len=lengths(point.gen_len), seed=point.seed, rate=point.rate,
                            concurrency=point.concurrency).load()  # fmt: skip
        options, chips = ServeOptions(concurrency=point.concurrency), CompileOptions(chips=tp)
        result = serve(config, hw, precision(point.dtype), requests, options, chips, pp=point.pp)
    except USER_ERRORS as e:
        return {**row, "status": "failed", "error": describe(e), **dict.fromkeys(SERVE_FIGURES, "")}
    report = serve_report(result)
    row.update(
        throughput_output_tokens_per_s=report.throughput_output_tokens_per_s,
        throughput_total_tokens_per_s=report.throughput_total_tokens_per_s,
        ttft_p50_s=report.ttft_seconds.p50, ttft_p99_s=report.ttft_seconds.p99,
        tpot_p50_s=report.tpot_seconds.p50, tpot_p99_s=report.tpot_seconds.p99,
        e2e_p50_s=report.e2e_seconds.p50, preemptions=report.preemptions,
        peak_kv_blocks_used=report.kv_cache.peak_blocks_used,
    )  # fmt: skip
    configuration = {k: v for k, v in row.items() if k not in SERVE_FIGURES}
    headline = {**configuration, **{c: _blank(row.get(c)) for c in SERVE_FIGURES}}
    return {**headline, **figures(report, "report.")}


def _blank(value):
    return "" if value is None else value
