"""Sweeps: one simulation per point of a grid, run on an executor (tcp_compiler.executors).

Each row carries its configuration (options, then the spec values the point sets) and a hash of
model + hardware + options + tcpc version, so any row can be reproduced; a point that fails reports
its error in its row and the sweep goes on. `run_point(point) -> row` is the unit other drivers
(stores, searches) call: the row's first columns are the headline ones (`columns`), then every
figure of the typed report as `report.<dotted name>`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ir.errors import TirError
from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from simulator.spec import Spec
from tcp_compiler import __version__
from tcp_compiler.errors import TcpcError
from tcp_compiler.executors import Executor, local_executor
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.report.build import build_report
from tcp_compiler.report.figures import figures
from tcp_compiler.simulate import simulate_generation
from tcp_compiler.spec_settings import Setting, with_settings

USER_ERRORS = (TirError, TcpcError, SimulatorError)  # a point's row reports these; others are bugs


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
    # spec values set by address (tcp_compiler.spec_settings): columns of their own, named by address
    spec: tuple[Setting, ...] = field(default=(), metadata={"column": False})


def spec_grid(settings: Sequence[tuple[str, Sequence[int | float]]]) -> list[tuple[Setting, ...]]:
    """Every combination of the swept spec values (one empty combination when none is swept)."""
    keys = [key for key, _ in settings]
    return [tuple(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in settings))]


def chip_counts(hw: str, chips: Sequence[int] | None) -> Sequence[int]:
    """The chip counts to sweep on a spec: those given, or the spec's own."""
    return chips or [load_hardware(hw).system.chips]


def grid(models: Sequence[str], hws: Sequence[str], chips: Sequence[int] | None, batch: Sequence[int],
         prompt_len: Sequence[int], gen_len: Sequence[int], dtype: Sequence[str], pp: Sequence[int] = (1,),
         settings: Sequence[tuple[str, Sequence[int | float]]] = ()) -> list[Point]:  # fmt: skip
    """Every combination, in a stable order (the order of the options as given); `chips` None: each
    spec's own count."""
    return [
        Point(model=m, hw=hw, chips=c, batch=b, prompt_len=p, gen_len=g, dtype=d, pp=stages, spec=values)
        for m, hw in itertools.product(models, hws)
        for values, c, b, p, g, d, stages in itertools.product(
            spec_grid(settings), chip_counts(hw, chips), batch, prompt_len, gen_len, dtype, pp
        )
    ]


def option_columns(point_type: type) -> tuple[str, ...]:
    """A point's options as columns of its row: its fields in order, but those marked
    `metadata={"column": False}`."""
    return tuple(f.name for f in fields(point_type) if f.metadata.get("column", True))


def options_of(point) -> dict:
    """A point's options for its hash; pp = 1 (no pipeline) and no spec values are left out."""
    options = asdict(point)
    if options.get("pp") == 1:
        del options["pp"]
    if not options.get("spec"):
        options.pop("spec", None)
    return options


def hardware(point) -> Spec:
    """The spec a point runs on: its chips x stages of `point.hw`, with the values it sets."""
    return with_settings(load_hardware(point.hw, point.chips * point.pp), point.spec)


def point_hash(point) -> str:
    """Reproducible identity of a point (simulate or serve): the model config file's contents, the
    spec's values, the options and tcpc's version. A model or spec that cannot be read leaves its
    part out: the row reports the error, its hash still names the options."""
    digest = hashlib.sha256(json.dumps(options_of(point), sort_keys=True).encode())
    digest.update(__version__.encode())
    with contextlib.suppress(*USER_ERRORS):
        digest.update(load_model(point.model).source.read_bytes())
    with contextlib.suppress(*USER_ERRORS):
        digest.update(json.dumps(hardware(point).to_dict(), sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


FIGURES = (  # the headline figures of a row, after its configuration
    "ttft_seconds", "tpot_seconds_mean", "tpot_seconds_first", "tpot_seconds_last", "throughput_tokens_per_s",
    "decode_tokens_per_s", "prefill_bound", "decode_bound", "weights_bytes", "kv_cache_bytes", "free_bytes",
)  # fmt: skip
COLUMNS = ("hash", *option_columns(Point), "status", "error", *FIGURES)


def columns(points: Sequence, headline: Sequence[str] = FIGURES) -> tuple[str, ...]:
    """The headline columns of the points' rows: hash, options, the spec values any point sets (by
    address), status, error and the `headline` figures."""
    kind = type(points[0]) if points else Point
    swept = dict.fromkeys(key for p in points for key, _ in p.spec)
    return ("hash", *option_columns(kind), *swept, "status", "error", *headline)


def base_row(point, status: str = "ok", error: str = "") -> dict:
    """A row's configuration: hash, options and spec values (a column each), status and error."""
    options = {k: v for k, v in asdict(point).items() if k in option_columns(type(point))}
    return {"hash": point_hash(point), **options, **dict(point.spec), "status": status, "error": error}


def crashed_row(point, error: Exception) -> dict:
    """The row of a point whose run raised what no user causes (a bug, a worker that died)."""
    return base_row(point, "crashed", f"{type(error).__name__}: {error}")


def run_point(point: Point, describe: Callable[[Exception], str] = str) -> dict:
    """One row; errors a user can cause become the row's `error` (as `describe` words them), never
    an exception."""
    row = base_row(point)
    try:
        config = load_model(point.model).config
        hw, tp = hardware(point).ranks(point.chips)  # a card split into PE ranks: one rank, tp x ranks
        sim = simulate_generation(config, hw, precision(point.dtype), point.batch, point.prompt_len,
                                  point.gen_len, tp, pp=point.pp)  # fmt: skip
        report = build_report(sim, top=1)
    except USER_ERRORS as e:
        return {**row, "status": "failed", "error": describe(e), **dict.fromkeys(FIGURES, "")}
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
    configuration = {k: v for k, v in row.items() if k not in FIGURES}
    headline = {**configuration, **{c: row.get(c, "") for c in FIGURES}}
    return {**headline, **figures(report, "report.")}


def run_sweep(
    points: Sequence, jobs: int, observer: Observer = QUIET,
    run: Callable[[Any], dict] = run_point, executor: Executor = local_executor,
    finished: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Rows in the grid's order, whatever order the workers finish in; `run` makes one point's row
    (a simulation by default, tcp_compiler.sweep.serve.run_serve_point for serving sweeps),
    `finished` sees each row as it completes (a store saves it there) and `observer` hears the
    points done."""
    rows: list[dict | None] = [None] * len(points)
    for done, (index, outcome) in enumerate(executor(points, jobs, run), start=1):
        row = outcome if isinstance(outcome, dict) else crashed_row(points[index], outcome)
        rows[index] = row
        if finished is not None:
            finished(row)
        observer.progress(done, len(points))
    return [r for r in rows if r is not None]


def csv_text(rows: Sequence[dict], columns: Sequence[str] = COLUMNS) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
