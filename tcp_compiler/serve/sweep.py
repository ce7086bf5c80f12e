"""Serving sweeps: one `tcpc serve` run per point of a grid of load (arrival rate or closed-loop
concurrency) x chips x precision, for `tcpc sweep --serve`. Rows follow tcp_compiler.sweep's
conventions: a hash to reproduce the point, and a failed point's error in its row."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ir.errors import TirError
from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve
from tcp_compiler.serve.workload import Workload, lengths
from tcp_compiler.sweep import option_columns, options_of


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
    prompt_len: str  # a Workload's length: N, uniform:LO:HI or normal:MEAN:STD
    gen_len: str
    rate: float | None  # requests per second (Poisson), or None with a concurrency
    concurrency: int | None  # closed-loop clients, or None with a rate
    seed: int = field(default=0, metadata={"column": False})


def serve_grid(model: str, hw: str, chips: list[int], dtypes: list[str], requests: int,
               prompt_len: list[str], gen_len: list[str], rates: list[float],
               concurrency: list[int], pp: tuple[int, ...] | list[int] = (1,),
               ) -> list[ServePoint]:  # fmt: skip
    """Every combination, loads last (rates, then concurrencies), in the order given."""
    loads = [(r, None) for r in rates] + [(None, c) for c in concurrency]
    return [
        ServePoint(model=model, hw=hw, chips=c, pp=stages, dtype=d, requests=requests, prompt_len=p,
                   gen_len=g, rate=rate, concurrency=clients)  # fmt: skip
        for c, stages, d, p, g, (rate, clients)
        in itertools.product(chips, pp, dtypes, prompt_len, gen_len, loads)
    ]


SERVE_COLUMNS = (
    "hash", *option_columns(ServePoint), "status", "error",
    "throughput_output_tokens_per_s", "throughput_total_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "preemptions", "peak_kv_blocks_used",
)  # fmt: skip


def run_serve_point(point: ServePoint, describe: Callable[[Exception], str] = str) -> dict:
    """One row; errors a user can cause become the row's `error` (as `describe` words them), never
    an exception."""
    row = {**asdict(point), "hash": _hash(point), "status": "ok", "error": ""}
    try:
        config = load_model(point.model).config
        hw = load_hardware(point.hw, point.chips * point.pp)
        requests = Workload(requests=point.requests, prompt_len=lengths(str(point.prompt_len)),
                            gen_len=lengths(str(point.gen_len)), seed=point.seed, rate=point.rate,
                            concurrency=point.concurrency).load()  # fmt: skip
        options, chips = ServeOptions(concurrency=point.concurrency), CompileOptions(chips=point.chips)
        result = serve(config, hw, precision(point.dtype), requests, options, chips, pp=point.pp)
    except (TirError, TcpcError, SimulatorError) as e:
        row.update(status="failed", error=describe(e))
        return {c: _blank(row.get(c)) for c in SERVE_COLUMNS}
    report = serve_report(result)
    row.update(
        throughput_output_tokens_per_s=report.throughput_output_tokens_per_s,
        throughput_total_tokens_per_s=report.throughput_total_tokens_per_s,
        ttft_p50_s=report.ttft_seconds.p50, ttft_p99_s=report.ttft_seconds.p99,
        tpot_p50_s=report.tpot_seconds.p50, tpot_p99_s=report.tpot_seconds.p99,
        e2e_p50_s=report.e2e_seconds.p50, preemptions=report.preemptions,
        peak_kv_blocks_used=report.kv_cache.peak_blocks_used,
    )  # fmt: skip
    return {c: _blank(row.get(c)) for c in SERVE_COLUMNS}


def _blank(value):
    return "" if value is None else value


def _hash(point: ServePoint) -> str:
    """Reproducible identity: the model config file's contents and the point's options."""
    digest = hashlib.sha256(json.dumps(options_of(point), sort_keys=True).encode())
    with contextlib.suppress(TcpcError):  # the row reports the error; its hash still names the options
        digest.update(load_model(point.model).source.read_bytes())
    return digest.hexdigest()[:16]
