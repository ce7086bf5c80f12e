"""Serving sweeps: one `tcpc serve` run per point of a grid of load (arrival rate or closed-loop
concurrency) x chips x precision, for `tcpc sweep --serve`. Rows follow tcp_compiler.sweep's
conventions: a hash to reproduce the point, and a failed point's error in its row."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from dataclasses import asdict, dataclass

from ir.errors import TirError
from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.server import ServeOptions, serve
from tcp_compiler.serve.workload import lengths, synthetic
from tcp_compiler.sweep import options_of


@dataclass(frozen=True)
class ServePoint:
    model: str
    hw: str
    chips: int
    dtype: str
    requests: int
    prompt_len: int
    gen_len: int
    rate: float | None  # requests per second (Poisson), or None with a concurrency
    concurrency: int | None  # closed-loop clients, or None with a rate
    seed: int = 0
    pp: int = 1  # pipeline stages, each of `chips` tensor-parallel chips


def serve_grid(model: str, hw: str, chips: list[int], dtypes: list[str], requests: int,
               prompt_len: list[int], gen_len: list[int], rates: list[float],
               concurrency: list[int], pp: tuple[int, ...] | list[int] = (1,),
               ) -> list[ServePoint]:  # fmt: skip
    """Every combination, loads last (rates, then concurrencies), in the order given."""
    loads = [(r, None) for r in rates] + [(None, c) for c in concurrency]
    return [
        ServePoint(model, hw, c, d, requests, p, g, rate, clients, pp=stages)
        for c, stages, d, p, g, (rate, clients)
        in itertools.product(chips, pp, dtypes, prompt_len, gen_len, loads)
    ]


SERVE_COLUMNS = (
    "hash", "model", "hw", "chips", "pp", "dtype", "requests", "prompt_len", "gen_len", "rate", "concurrency",
    "status", "error", "throughput_output_tokens_per_s", "throughput_total_tokens_per_s", "ttft_p50_s",
    "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "preemptions", "peak_kv_blocks_used",
)  # fmt: skip


def run_serve_point(point: ServePoint) -> dict:
    """One row; errors a user can cause become the row's `error`, never an exception."""
    row = {**asdict(point), "hash": _hash(point), "status": "ok", "error": ""}
    try:
        config = load_model(point.model).config
        hw = load_hardware(point.hw, point.chips * point.pp)
        requests = synthetic(point.requests, lengths(str(point.prompt_len)), lengths(str(point.gen_len)),
                             point.rate, point.concurrency is not None, point.seed)  # fmt: skip
        options, chips = ServeOptions(concurrency=point.concurrency), CompileOptions(chips=point.chips)
        result = serve(config, hw, precision(point.dtype), requests, options, chips, pp=point.pp)
    except (TirError, TcpcError, SimulatorError) as e:
        row.update(status="failed", error=str(e))
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
