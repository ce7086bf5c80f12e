"""The requests a serving run answers: lengths (fixed or drawn from a seeded distribution), arrival
times (all at once, Poisson at a rate, or a closed loop of clients), or a request file; Workload
declares them as options (with their flags, tcp_compiler.option_fields).

Everything here is deterministic for a given seed, so the same command gives the same numbers.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.files import read_input
from tcp_compiler.errors import OptionError, RequestFileError
from tcp_compiler.option_fields import MAX_SEQUENCES, MAX_TOKENS, ascii_int, option, positive_number

MAX_TRACE_BYTES = 64 << 20  # a request file of a million lines fits easily
TRACE_FIELDS = ("arrival_s", "prompt_len", "output_len")
DEFAULT_RATE = 8.0  # requests per second, with neither a rate nor a concurrency: a few dozen busy
MAX_RATE = 1e6


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (None: when a closed-loop client frees up) and its lengths."""

    id: int
    arrival_s: float | None
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: `fixed:N` (or just N), `uniform:LO:HI` (inclusive) or
    `normal:MEAN:STD` (rounded, clipped to at least 1)."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.a), np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, n).astype(np.int64)
        return np.maximum(1, np.rint(rng.normal(self.a, self.b, n))).astype(np.int64)

    @property
    def upper(self) -> float:
        """The largest length drawn (a normal's tail: mean + 6 std), to check positions up front."""
        return {"fixed": self.a, "uniform": self.b}.get(self.kind, self.a + 6 * self.b)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def lengths(text: str) -> Lengths:
    """Parses a length option's value (prompt_len, gen_len); raises ValueError with the reason."""
    parts = text.strip(" \t").lower().split(":")
    try:
        if not text.isascii():  # float() and int() read other scripts' digits, which no user means
            raise ValueError(text)
        if len(parts) == 1 or (parts[0] == "fixed" and len(parts) == 2):
            value = ascii_int(parts[-1])
            if not 1 <= value <= MAX_TOKENS:
                raise ValueError(f"expected a length from 1 to {MAX_TOKENS:,}, got {text!r}")
            return Lengths("fixed", value)
        if parts[0] == "uniform" and len(parts) == 3:
            lo, hi = ascii_int(parts[1]), ascii_int(parts[2])
            if not 1 <= lo <= hi <= MAX_TOKENS:
                raise ValueError(f"expected uniform:LO:HI with 1 <= LO <= HI <= {MAX_TOKENS:,}, got {text!r}")
            return Lengths("uniform", lo, hi)
        if parts[0] == "normal" and len(parts) == 3:
            mean, std = float(parts[1]), float(parts[2])
            finite = math.isfinite(mean) and math.isfinite(std)
            if not (finite and 1 <= mean <= MAX_TOKENS and 0 <= std <= MAX_TOKENS):
                raise ValueError(
                    f"expected normal:MEAN:STD with 1 <= MEAN <= {MAX_TOKENS:,}, STD >= 0, got {text!r}"
                )
            return Lengths("normal", mean, std)
    except ValueError as e:
        if "expected" in str(e):
            raise
    raise ValueError(f"expected N, fixed:N, uniform:LO:HI or normal:MEAN:STD, got {text!r}")


def synthetic(
    count: int, prompt: Lengths, output: Lengths, rate: float | None, closed_loop: bool, seed: int
) -> list[Request]:
    """`count` requests with seeded lengths; arrivals Poisson at `rate` per second, all at 0 (no
    rate: an offline batch, like vLLM's benchmark at rate inf), or None for a closed loop."""
    rng = np.random.default_rng(seed)
    prompts, outputs = prompt.draw(count, rng), output.draw(count, rng)
    if closed_loop:
        arrivals: list[float | None] = [None] * count
    elif rate is None:
        arrivals = [0.0] * count
    else:
        arrivals = [float(t) for t in np.cumsum(rng.exponential(1.0 / rate, count))]
    return [
        Request(i, arrivals[i], int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]


def load_trace(path: str | Path) -> list[Request]:
    """Requests from a .jsonl (one object per line) or .csv (a header row) file with arrival_s,
    prompt_len and output_len; any bad line is a one-line error naming the file, line and field."""
    path = Path(path)
    try:
        text = read_input(path, MAX_TRACE_BYTES, "request files").decode("utf-8")
    except OSError as e:
        raise RequestFileError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise RequestFileError(f"{path}: not UTF-8 text") from None
    rows = _csv_rows(path, text) if path.suffix.lower() == ".csv" else _jsonl_rows(path, text)
    requests = [_request(path, line, row, i) for i, (line, row) in enumerate(rows)]
    if not requests:
        raise RequestFileError(f"{path}: no requests")
    return sorted(requests, key=lambda r: (r.arrival_s, r.id))


def _jsonl_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    rows = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as e:
            raise RequestFileError(f"{path}:{line}: not valid JSON: {e}") from None
        if not isinstance(row, dict):
            raise RequestFileError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        rows.append((line, row))
    return rows


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise RequestFileError(f"{path}: empty; expected a header row {','.join(TRACE_FIELDS)}") from None
    missing = [f for f in TRACE_FIELDS if f not in header]
    if missing:
        expected = ",".join(TRACE_FIELDS)
        raise RequestFileError(f"{path}:1: header lacks {', '.join(missing)} (expected {expected})")
    rows = []
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise RequestFileError(
                f"{path}:{reader.line_num}: {len(cells)} fields, the header has {len(header)}"
            )
        rows.append((reader.line_num, dict(zip(header, (c.strip() for c in cells), strict=True))))
    return rows


def _request(path: Path, line: int, row: dict, index: int) -> Request:
    def field(name: str, integer: bool) -> float:
        if name not in row:
            raise RequestFileError(f"{path}:{line}: missing field {name}")
        try:
            return _number(row[name], integer)
        except (TypeError, ValueError, OverflowError):
            want = "an integer" if integer else "a number"
            raise RequestFileError(
                f"{path}:{line}: field {name}: expected {want}, got {row[name]!r}"
            ) from None

    arrival = field("arrival_s", False)
    if not (math.isfinite(arrival) and arrival >= 0):
        raise RequestFileError(
            f"{path}:{line}: field arrival_s: expected at least 0 seconds, got {row['arrival_s']!r}"
        )
    prompt, output = int(field("prompt_len", True)), int(field("output_len", True))
    for name, value in (("prompt_len", prompt), ("output_len", output)):
        if not 1 <= value <= MAX_TOKENS:
            raise RequestFileError(
                f"{path}:{line}: field {name}: expected 1 to {MAX_TOKENS:,} tokens, got {value}"
            )
    return Request(index, arrival, prompt, output)


def _number(value: object, integer: bool) -> float:
    """A JSON or CSV cell as a number: integers must be whole (2.0 is 2, 2.5 is not one)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, str):
        value = value.strip()
        return int(value, 10) if integer and len(value) <= 24 else float(value)
    if not isinstance(value, (int, float)):
        raise TypeError(value)
    if integer and not float(value).is_integer():
        raise ValueError(value)
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Workload:
    """Which requests a run serves: `requests` drawn with `seed` (lengths, then arrivals at `rate`
    or from `concurrency` closed-loop clients), or those of a request file."""

    requests: int = option(64, "requests (default %(default)s)", "N", bounds=(1, MAX_SEQUENCES))
    prompt_len: Lengths = option(
        lengths("uniform:64:512"),
        "prompt tokens: N, uniform:LO:HI or normal:MEAN:STD (default %(default)s)",
        "P",
        parse=lengths,
    )
    gen_len: Lengths = option(
        lengths("uniform:32:256"), "output tokens, as --prompt-len (default %(default)s)", "G", parse=lengths
    )
    seed: int = option(0, "for lengths and arrivals", bounds=(0, (1 << 63) - 1))
    rate: float | None = option(
        None,
        f"Poisson arrivals per second, or inf: all at once (default {DEFAULT_RATE:g})",
        "R",
        parse=positive_number(MAX_RATE, allow_inf=True),
        exclusive="arrivals",
    )
    concurrency: int | None = option(
        None,
        "closed loop: C clients, each sending its next request when one ends",
        "C",
        bounds=(1, MAX_SEQUENCES),
        exclusive="arrivals",
    )
    trace_file: str | None = option(
        None, "requests from a .jsonl or .csv file (arrival_s, prompt_len, output_len)", "FILE"
    )

    def load(self) -> list[Request]:
        """The requests: read from the trace file, or drawn (at DEFAULT_RATE when neither a rate
        nor a concurrency is given; a rate of inf: all at once)."""
        if self.trace_file:
            if self.rate is not None or self.concurrency is not None:
                raise OptionError("{trace_file} gives each request's arrival: drop {rate} / {concurrency}")
            return load_trace(self.trace_file)
        rate = DEFAULT_RATE if self.rate is None and self.concurrency is None else self.rate
        rate = None if rate is not None and math.isinf(rate) else rate
        closed_loop = self.concurrency is not None
        return synthetic(self.requests, self.prompt_len, self.gen_len, rate, closed_loop, self.seed)
