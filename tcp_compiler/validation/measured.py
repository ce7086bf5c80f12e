"""Measured serving runs, as a real server's benchmark wrote them: (a) vLLM `bench serve
--save-result` JSON (per-request arrays `input_lens`, `output_lens`, `ttfts`, `itls` when it was
run with `--save-detailed`, the aggregate `mean_ttft_ms`, `p99_tpot_ms`, ... fields otherwise;
concurrency `max_concurrency` and rate `request_rate` from the file), or (b) a per-request .csv or
.jsonl with input_tokens, output_tokens, ttft_s, tpot_s and optionally latency_s, arrival_s,
power_w, its concurrency or rate given by the caller.

Every value is checked as a request trace's are (tcp_compiler.serve.request_tables): a bad file is
a one-line RequestFileError naming the file, the line or key, and what was expected.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tcp_compiler.errors import OptionError, RequestFileError
from tcp_compiler.frontend import json_input
from tcp_compiler.option_fields import MAX_SEQUENCES, MAX_TOKENS
from tcp_compiler.serve import request_tables
from tcp_compiler.serve.workload import MAX_RATE
from tcp_compiler.validation.metrics import LATENCIES, RunMetrics, Stat, per_request

MAX_RESULT_BYTES = 512 << 20  # a detailed vLLM result of 1,000 requests x 4,096 tokens is ~80 MB
MAX_RESULT_DEPTH = 4  # the result object, its arrays, `itls`' inner lists, a metadata entry
MAX_SECONDS = 1e6  # any one latency or a run's length: beyond it, a unit mistake
MAX_THROUGHPUT = 1e12  # tokens/s
MAX_POWER_W = 1e6
COLUMNS = ("input_tokens", "output_tokens", "ttft_s", "tpot_s")
OPTIONAL_COLUMNS = ("latency_s", "arrival_s", "power_w")
VLLM_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}  # ours: vLLM's name
VLLM_STATS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}


@dataclass(frozen=True, eq=False)
class MeasuredRun:
    """One measured run: how its requests arrived, each request's lengths, the per-request times
    the file holds (None where it holds none), and the run's figures."""

    source: str  # the file
    concurrency: int | None  # closed-loop clients (vLLM's max_concurrency)
    rate: float | None  # requests/s (inf: all at once); None when not stated
    input_tokens: np.ndarray  # per request, in the order the requests were sent
    output_tokens: np.ndarray
    ttft_s: np.ndarray | None
    tpot_s: np.ndarray | None  # per request; 0 where a request has a single output token
    itl_s: np.ndarray | None  # every gap between two successive tokens, pooled over the requests
    latency_s: np.ndarray | None
    arrival_s: np.ndarray | None  # from the first request's, when the file gives them
    metrics: RunMetrics
    power_w: float | None  # average power per card while the run ran, when measured
    notes: tuple[str, ...] = ()  # what was assumed reading it

    @property
    def load(self) -> str:
        """How its requests arrived, in words, as the replay takes them: `concurrency 128`, `trace`
        (the file's arrival times), `all at once` or `rate 4/s`."""
        if self.concurrency is not None:
            return f"concurrency {self.concurrency}"
        if self.arrival_s is not None or self.rate is None:
            return "trace"
        return "all at once" if math.isinf(self.rate) else f"rate {self.rate:g}/s"


def read_measured(path: str | Path, concurrency: int | None = None, rate: float | None = None) -> MeasuredRun:
    """The measured run in `path`: a vLLM result (.json) or a per-request table (.csv, .jsonl).
    `concurrency` or `rate` say how the requests arrived where the file does not (a vLLM result
    states its own max_concurrency and request_rate)."""
    path = Path(path)
    if concurrency is not None and rate is not None:
        raise OptionError("give {concurrency} or {rate}, not both")
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv", ".jsonl"):
        raise RequestFileError(f"{path}: expected a vLLM result .json or a per-request .csv or .jsonl")
    text = request_tables.read_text(path, MAX_RESULT_BYTES, "measured results")
    run = _vllm(path, text, concurrency, rate) if suffix == ".json" else _table(path, text, concurrency, rate)
    if run.concurrency is None and run.rate is None and run.arrival_s is None:
        raise OptionError("{path}: give {concurrency} or {rate}: the file does not say how its requests "
                          "arrived (no concurrency, rate or arrival times)", path=str(path))  # fmt: skip
    if run.concurrency is not None and run.rate is not None and math.isfinite(run.rate):
        capped = f"rate {run.rate:g}/s, at most {run.concurrency} in flight: replayed as a closed loop"
        run = dataclasses.replace(run, notes=(*run.notes, capped))
    return run


def _vllm(path: Path, text: str, concurrency: int | None, rate: float | None) -> MeasuredRun:
    try:
        doc = json_input.loads(text, MAX_RESULT_DEPTH)
    except ValueError as e:
        raise RequestFileError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestFileError(
            f"{path}: expected a JSON object (a vLLM bench serve result), got {type(doc).__name__}"
        )
    where = str(path)
    stated_c = _optional(where, doc, "max_concurrency", True, 1, MAX_SEQUENCES, "clients")
    stated_r = doc.get("request_rate")
    if stated_r == "inf":
        stated_r = math.inf
    elif stated_r is not None:
        stated_r = request_tables.cell(where, "request_rate", stated_r, False, 0, MAX_RATE, "requests/s")
        if stated_r == 0:
            raise RequestFileError(f'{where}: field request_rate: expected above 0 or "inf", got 0')
    if stated_c is not None or stated_r is not None:  # the file's own, over the caller's defaults
        concurrency, rate = (None if stated_c is None else int(stated_c)), stated_r
    power = _optional(where, doc, "power_w", False, 0, MAX_POWER_W, "W")
    duration = _optional(where, doc, "duration", False, 0, MAX_SECONDS, "seconds")
    if "input_lens" in doc or "ttfts" in doc:
        return _vllm_detailed(path, doc, concurrency, rate, power, duration)
    return _vllm_aggregate(path, doc, concurrency, rate, power)


def _vllm_detailed(
    path: Path,
    doc: dict,
    concurrency: int | None,
    rate: float | None,
    power: float | None,
    duration: float | None,
) -> MeasuredRun:
    """The per-request arrays; requests that failed (a non-empty `errors` entry, or no output)
    are left out, as vLLM leaves them out of its figures."""
    where = str(path)
    inputs = _array(where, doc, "input_lens", True, 0, MAX_TOKENS, "tokens")
    n = len(inputs)
    if not 1 <= n <= MAX_SEQUENCES:
        raise RequestFileError(
            f"{where}: field input_lens: expected 1 to {MAX_SEQUENCES:,} requests, got {n:,}"
        )
    outputs = _array(where, doc, "output_lens", True, 0, MAX_TOKENS, "tokens", n)
    ttfts = _array(where, doc, "ttfts", False, 0, MAX_SECONDS, "seconds", n)
    itls = _itls(where, doc, n)
    latencies = _array(where, doc, "latencies", False, 0, MAX_SECONDS, "seconds", n, required=False)
    starts = _array(where, doc, "start_times", False, -1e12, 1e12, "seconds", n, required=False)
    errors = doc.get("errors")
    if errors is not None and not (isinstance(errors, list) and len(errors) == n):
        raise RequestFileError(f"{where}: field errors: expected a list of {n:,} entries, as input_lens")
    ok = outputs > 0
    if errors is not None:
        ok &= np.array([not e for e in errors], bool)
    notes = [f"{int((~ok).sum()):,} failed requests left out"] if not ok.all() else []
    if not ok.any():
        raise RequestFileError(f"{where}: no request succeeded (every output_lens is 0 or has an error)")
    if (inputs[ok] == 0).any():
        i = int(np.flatnonzero(ok & (inputs == 0))[0])
        raise RequestFileError(f"{where}: field input_lens[{i}]: expected 1 to {MAX_TOKENS:,} tokens, got 0")
    gaps = [itls[i] for i in np.flatnonzero(ok)]
    latency = latencies[ok] if latencies is not None else ttfts[ok] + np.array([g.sum() for g in gaps])
    inputs, outputs, ttft = inputs[ok], outputs[ok], ttfts[ok]
    arrivals = starts[ok] - starts[ok].min() if starts is not None else None
    several = outputs > 1
    tpot = np.where(several, (latency - ttft) / np.maximum(outputs - 1, 1), 0.0)
    itl = np.concatenate(gaps) if gaps else np.zeros(0)
    metrics = per_request(ttft, latency, outputs, itl, duration, inputs)
    metrics = _throughputs(where, doc, metrics)
    return MeasuredRun(
        str(path),
        concurrency,
        rate,
        inputs,
        outputs,
        ttft,
        tpot,
        itl,
        latency,
        arrivals,
        metrics,
        power,
        tuple(notes),
    )


def _vllm_aggregate(
    path: Path, doc: dict, concurrency: int | None, rate: float | None, power: float | None
) -> MeasuredRun:
    """A result saved without per-request arrays: every request is taken to have the mean
    lengths (`total_input_tokens / completed`, rounded), as with vLLM's fixed-length random
    dataset (the vendor's method); the figures are the file's."""
    where = str(path)
    completed = int(_required(where, doc, "completed", True, 1, MAX_SEQUENCES, "requests"))
    total_in = _required(where, doc, "total_input_tokens", True, 1, MAX_TOKENS * MAX_SEQUENCES, "tokens")
    total_out = _required(where, doc, "total_output_tokens", True, 1, MAX_TOKENS * MAX_SEQUENCES, "tokens")
    prompt, output = max(1, round(total_in / completed)), max(1, round(total_out / completed))
    if prompt > MAX_TOKENS or output > MAX_TOKENS:
        raise RequestFileError(
            f"{where}: a request of {prompt:,} + {output:,} tokens on average; expected at "
            f"most {MAX_TOKENS:,} each"
        )
    stats = {}
    for ours, theirs in VLLM_METRICS.items():
        values = {
            s: _optional(where, doc, f"{v}_{theirs}_ms", False, 0, MAX_SECONDS * 1e3, "ms")
            for s, v in VLLM_STATS.items()
        }
        stats[ours] = Stat(**{s: None if v is None else v / 1e3 for s, v in values.items()})
    metrics = RunMetrics(*(stats[m] for m in LATENCIES), None, None)
    metrics = _throughputs(where, doc, metrics)
    note = (
        f"per-request lengths not saved (vLLM --save-detailed): every request taken as the mean, "
        f"{prompt:,} in / {output:,} out"
    )
    return MeasuredRun(
        str(path),
        concurrency,
        rate,
        np.full(completed, prompt),
        np.full(completed, output),
        None,
        None,
        None,
        None,
        None,
        metrics,
        power,
        (note,),
    )


def _throughputs(where: str, doc: dict, metrics: RunMetrics) -> RunMetrics:
    """The file's own throughputs where it has them (vLLM's duration is its wall clock)."""
    out = _optional(where, doc, "output_throughput", False, 0, MAX_THROUGHPUT, "tokens/s")
    total = _optional(where, doc, "total_token_throughput", False, 0, MAX_THROUGHPUT, "tokens/s")
    return RunMetrics(
        metrics.ttft,
        metrics.tpot,
        metrics.itl,
        metrics.e2e,
        metrics.output_tokens_per_s if out is None else out,
        metrics.total_tokens_per_s if total is None else total,
    )


def _table(path: Path, text: str, concurrency: int | None, rate: float | None) -> MeasuredRun:
    rows = request_tables.rows(path, text, COLUMNS)
    if not rows:
        raise RequestFileError(f"{path}: no requests")
    if len(rows) > MAX_SEQUENCES:
        raise RequestFileError(f"{path}: {len(rows):,} requests; expected at most {MAX_SEQUENCES:,}")
    present = {c for c in OPTIONAL_COLUMNS if c in rows[0][1]}
    bounds = {
        "input_tokens": (True, 1, MAX_TOKENS, "tokens"),
        "output_tokens": (True, 1, MAX_TOKENS, "tokens"),
        "ttft_s": (False, 0, MAX_SECONDS, "seconds"),
        "tpot_s": (False, 0, MAX_SECONDS, "seconds"),
        "latency_s": (False, 0, MAX_SECONDS, "seconds"),
        "arrival_s": (False, 0, MAX_SECONDS, "seconds"),
        "power_w": (False, 0, MAX_POWER_W, "W"),
    }
    names = [*COLUMNS, *sorted(present)]
    values = {name: np.empty(len(rows)) for name in names}
    for i, (line, row) in enumerate(rows):
        where = f"{path}:{line}"
        for name in names:
            if name not in row:
                raise RequestFileError(f"{where}: missing field {name} (the first row has it)")
            values[name][i] = request_tables.cell(where, name, row[name], *bounds[name])
        extra = next((c for c in OPTIONAL_COLUMNS if c in row and c not in present), None)
        if extra is not None:
            raise RequestFileError(
                f"{where}: field {extra} given, but not in the first row: give it in every row"
            )
    arrival = values.get("arrival_s")
    inputs, outputs = values["input_tokens"].astype(np.int64), values["output_tokens"].astype(np.int64)
    ttft, tpot = values["ttft_s"], np.where(outputs > 1, values["tpot_s"], 0.0)
    latency = values.get("latency_s")
    if latency is None:
        latency = ttft + tpot * (outputs - 1)
    elif (latency < ttft).any():
        i = int(np.flatnonzero(latency < ttft)[0])
        raise RequestFileError(
            f"{path}:{rows[i][0]}: field latency_s: expected at least ttft_s "
            f"({ttft[i]:g}), got {latency[i]:g}"
        )
    duration = None
    if arrival is not None:
        arrival = arrival - arrival.min()
        duration = float((arrival + latency).max())
    # A table has no inter-token gaps: its ITL figures stay None.
    metrics = per_request(ttft, latency, outputs, np.zeros(0), duration, inputs)
    power = float(values["power_w"].mean()) if "power_w" in values else None
    return MeasuredRun(
        str(path), concurrency, rate, inputs, outputs, ttft, tpot, None, latency, arrival, metrics, power
    )


def _required(where: str, doc: dict, key: str, integer: bool, lo: float, hi: float, unit: str) -> float:
    if key not in doc:
        raise RequestFileError(f"{where}: missing field {key} (and no per-request arrays input_lens, ttfts)")
    return request_tables.cell(where, key, doc[key], integer, lo, hi, unit)


def _optional(
    where: str, doc: dict, key: str, integer: bool, lo: float, hi: float, unit: str
) -> float | None:
    value = doc.get(key)
    return None if value is None else request_tables.cell(where, key, value, integer, lo, hi, unit)


def _array(
    where: str,
    doc: dict,
    key: str,
    integer: bool,
    lo: float,
    hi: float,
    unit: str,
    n: int | None = None,
    required: bool = True,
) -> np.ndarray | None:
    """A per-request array of numbers, of `n` entries when given; checked in bulk, and the first
    bad entry named."""
    value = doc.get(key)
    if value is None:
        if required:
            raise RequestFileError(f"{where}: missing field {key} (vLLM saves it in detailed results)")
        return None
    if not isinstance(value, list):
        raise RequestFileError(f"{where}: field {key}: expected a list, got {type(value).__name__}")
    if n is not None and len(value) != n:
        raise RequestFileError(f"{where}: field {key}: {len(value):,} entries, input_lens has {n:,}")
    return _numbers(where, key, value, integer, lo, hi, unit)


def _numbers(where: str, key: str, value: list, integer: bool, lo: float, hi: float, unit: str) -> np.ndarray:
    typed = all(type(v) in (int, float) for v in value)
    array = np.array(value, dtype=float) if typed and all(abs(v) < 1e300 for v in value) else None
    if array is None or not (
        np.isfinite(array).all()
        and (array >= lo).all()
        and (array <= hi).all()
        and (not integer or (array == np.round(array)).all())
    ):
        for i, v in enumerate(value):  # the first bad one, named
            if type(v) not in (int, float):
                shown = request_tables.shown(v)
                raise RequestFileError(f"{where}: field {key}[{i}]: expected a number, got {shown}")
            request_tables.cell(where, f"{key}[{i}]", v, integer, lo, hi, unit)
    assert array is not None  # the loop above named a bad entry otherwise
    return array.astype(np.int64) if integer else array


def _itls(where: str, doc: dict, n: int) -> list[np.ndarray]:
    value = doc.get("itls")
    if value is None:
        raise RequestFileError(f"{where}: missing field itls (vLLM saves it in detailed results)")
    if not isinstance(value, list) or len(value) != n:
        got = f"{len(value):,} entries" if isinstance(value, list) else type(value).__name__
        raise RequestFileError(
            f"{where}: field itls: expected a list of {n:,} lists, as input_lens; got {got}"
        )
    gaps = []
    for i, inner in enumerate(value):
        if not isinstance(inner, list):
            raise RequestFileError(f"{where}: field itls[{i}]: expected a list, got {type(inner).__name__}")
        gaps.append(
            _numbers(where, f"itls[{i}]", inner, False, 0, MAX_SECONDS, "seconds") if inner else np.zeros(0)
        )
    return gaps
