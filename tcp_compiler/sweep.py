"""Sweeps: one simulation per point of a grid, run in worker processes.

Each row carries its configuration and a hash of model + hardware + options, so any row can be
reproduced; a point that fails reports its error in its row and the sweep goes on.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from typing import Any

from ir.errors import TirError
from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation


@dataclass(frozen=True, kw_only=True)
class Point:
    """One simulation's options; its fields, in order, are the first columns of its row."""

    model: str
    hw: str
    chips: int
    pp: int = 1  # pipeline stages, each of `chips` tensor-parallel chips
    batch: int
    prompt_len: int
    gen_len: int
    dtype: str


def grid(model: str, hw: str, chips: Sequence[int], batch: Sequence[int], prompt_len: Sequence[int],
         gen_len: Sequence[int], dtype: Sequence[str], pp: Sequence[int] = (1,)) -> list[Point]:  # fmt: skip
    """Every combination, in a stable order (the order of the options as given)."""
    return [
        Point(model=model, hw=hw, chips=c, batch=b, prompt_len=p, gen_len=g, dtype=d, pp=stages)
        for c, b, p, g, d, stages in itertools.product(chips, batch, prompt_len, gen_len, dtype, pp)
    ]


def option_columns(point_type: type) -> tuple[str, ...]:
    """A point's options as columns of its row: its fields in order, but those marked
    `metadata={"column": False}`."""
    return tuple(f.name for f in fields(point_type) if f.metadata.get("column", True))


def options_of(point) -> dict:
    """A point's options for its hash; pp = 1 (no pipeline) is left out, so rows hashed before
    pipeline parallelism existed keep their hashes."""
    options = asdict(point)
    if options.get("pp") == 1:
        del options["pp"]
    return options


def point_hash(point: Point) -> str:
    """Reproducible identity of a point: the model config and hardware files' contents + options."""
    digest = hashlib.sha256()
    model = load_model(point.model)
    digest.update(model.source.read_bytes())
    hw = load_hardware(point.hw, point.chips * point.pp)
    digest.update(json.dumps(hw.to_dict(), sort_keys=True, default=str).encode())
    digest.update(json.dumps(options_of(point), sort_keys=True).encode())
    return digest.hexdigest()[:16]


COLUMNS = (
    "hash", *option_columns(Point), "status", "error",
    "ttft_seconds", "tpot_seconds_mean", "tpot_seconds_first", "tpot_seconds_last", "throughput_tokens_per_s",
    "decode_tokens_per_s", "prefill_bound", "decode_bound", "weights_bytes", "kv_cache_bytes", "free_bytes",
)  # fmt: skip


def run_point(point: Point, describe: Callable[[Exception], str] = str) -> dict:
    """One row; errors a user can cause become the row's `error` (as `describe` words them), never
    an exception."""
    row = {**asdict(point), "hash": "", "status": "ok", "error": ""}
    try:
        row["hash"] = point_hash(point)
        config = load_model(point.model).config
        hw = load_hardware(point.hw, point.chips * point.pp)
        sim = simulate_generation(config, hw, precision(point.dtype), point.batch, point.prompt_len,
                                  point.gen_len, point.chips, pp=point.pp)  # fmt: skip
        report = build_report(sim, top=1)
    except (TirError, TcpcError, SimulatorError) as e:
        row.update(status="failed", error=describe(e))
        return {c: row.get(c, "") for c in COLUMNS}
    decode, memory = report.decode, report.memory
    row.update(
        ttft_seconds=report.ttft_seconds,
        throughput_tokens_per_s=report.throughput_tokens_per_s,
        decode_tokens_per_s=report.decode_tokens_per_s,
        prefill_bound=report.prefill.bound,
        weights_bytes=memory.weights_bytes,
        kv_cache_bytes=memory.kv_cache_bytes,
        free_bytes=memory.free_bytes,
    )
    if decode.steps:
        row.update(
            tpot_seconds_mean=decode.tpot_seconds_mean,
            tpot_seconds_first=decode.tpot_seconds_first,
            tpot_seconds_last=decode.tpot_seconds_last,
            decode_bound=decode.bound,
        )
    return {c: row.get(c, "") for c in COLUMNS}


def run_sweep(
    points: Sequence, jobs: int, observer: Observer = QUIET,
    run: Callable[[Any], dict] = run_point,
) -> list[dict]:
    """Rows in the grid's order, whatever order the workers finish in; `run` makes one point's row
    (a simulation by default, tcp_compiler.serve.sweep.run_serve_point for serving sweeps), and
    `observer` hears the points done."""
    rows: list[dict | None] = [None] * len(points)
    for done, (index, row) in enumerate(_results(points, jobs, run), start=1):
        rows[index] = row
        observer.progress(done, len(points))
    return [r for r in rows if r is not None]


def _results(points: Sequence, jobs: int, run: Callable[[Any], dict]) -> Iterator[tuple[int, dict]]:
    if jobs <= 1:
        for i, p in enumerate(points):
            yield i, run(p)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run, p): i for i, p in enumerate(points)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def csv_text(rows: Sequence[dict], columns: Sequence[str] = COLUMNS) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
