"""The requests a serving run answers: lengths (fixed or drawn from a seeded distribution), arrival
times (all at once, Poisson at a rate, or a closed loop of clients), or a request file; Workload
declares them as options (with their flags, tcp_compiler.option_fields).

Everything here is deterministic for a given seed, so the same command gives the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tcp_compiler.errors import OptionError, RequestFileError
from tcp_compiler.option_fields import MAX_SEQUENCES, MAX_TOKENS, ascii_int, option, positive_number
from tcp_compiler.serve import request_tables

MAX_TRACE_BYTES = 64 << 20  # a request file of a million lines fits easily
TRACE_FIELDS = ("arrival_s", "prompt_len", "output_len")
DEFAULT_RATE = 8.0  # requests per second, with neither a rate nor a concurrency: a few dozen busy
MAX_RATE = 1e6
MAX_ARRIVAL_S = 1e6  # about 11.6 days: longer than any trace, so a later arrival is a unit mistake


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (None: when a closed-loop client frees up) and its lengths;
    `shared_prefix`: its prompt's first tokens, the same in every request (a system prompt)."""

    id: int
    arrival_s: float | None
    prompt_len: int
    output_len: int
    shared_prefix: int = 0


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
    rate: an offline batch, like vLLM's benchmark at rate inf), or None for a closed loop. A rate
    so low that the arrivals span more than MAX_ARRIVAL_S is an OptionError."""
    rng = np.random.default_rng(seed)
    prompts, outputs = prompt.draw(count, rng), output.draw(count, rng)
    if closed_loop:
        arrivals: list[float | None] = [None] * count
    elif rate is None:
        arrivals = [0.0] * count
    else:
        arrivals = [float(t) for t in np.cumsum(rng.exponential(1.0 / rate, count))]
        if not arrivals[-1] <= MAX_ARRIVAL_S:
            raise OptionError(
                "{rate} {rate_value:g}: {count:,} requests would arrive over {span:.3g} s, beyond the "
                "{limit:,.0f} s a run may span; raise {rate} or lower {requests}",
                rate_value=rate,
                count=count,
                span=arrivals[-1],
                limit=MAX_ARRIVAL_S,
            )
    return [
        Request(i, arrivals[i], int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]


def load_trace(path: str | Path, arrivals: bool = True) -> list[Request]:
    """Requests from a .jsonl (one object per line) or .csv (a header row) file with arrival_s,
    prompt_len and output_len, in arrival order; any bad line is a one-line error naming the file,
    line and field. Without `arrivals` (a closed loop over the file's lengths) arrival_s is not
    read and the requests keep the file's order."""
    path = Path(path)
    text = request_tables.read_text(path, MAX_TRACE_BYTES, "request files")
    fields = TRACE_FIELDS if arrivals else TRACE_FIELDS[1:]
    rows = request_tables.rows(path, text, fields)
    requests = [_request(f"{path}:{line}", row, i, arrivals) for i, (line, row) in enumerate(rows)]
    if not requests:
        raise RequestFileError(f"{path}: no requests")
    return sorted(requests, key=lambda r: (r.arrival_s, r.id)) if arrivals else requests


def _request(where: str, row: dict, index: int, arrivals: bool) -> Request:
    def field(name: str, integer: bool, lo: float, hi: float, unit: str) -> float:
        if name not in row:
            raise RequestFileError(f"{where}: missing field {name}")
        return request_tables.cell(where, name, row[name], integer, lo, hi, unit)

    arrival = field("arrival_s", False, 0, MAX_ARRIVAL_S, "seconds") if arrivals else None
    prompt = int(field("prompt_len", True, 1, MAX_TOKENS, "tokens"))
    output = int(field("output_len", True, 1, MAX_TOKENS, "tokens"))
    return Request(index, arrival, prompt, output)


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
        None,
        "requests from a .jsonl or .csv file (arrival_s, prompt_len, output_len; with --concurrency: "
        "a closed loop over its lengths, arrival_s not needed)",
        "FILE",
    )
    shared_prefix: int = option(
        0, "the first N tokens of every prompt are the same (a system prompt; at most the prompt)", "N",
        bounds=(0, MAX_TOKENS),
    )

    def load(self) -> list[Request]:
        """The requests (`drawn`), each with the shared prefix its prompt holds."""
        return [replace(r, shared_prefix=min(self.shared_prefix, r.prompt_len)) for r in self.drawn()]

    def drawn(self) -> list[Request]:
        """The requests: read from the trace file (with a concurrency, its lengths in a closed
        loop), or drawn (at DEFAULT_RATE when neither a rate nor a concurrency is given; a rate of
        inf: all at once)."""
        if self.trace_file:
            if self.rate is not None:
                raise OptionError("{trace_file} gives each request's arrival: drop {rate}")
            return load_trace(self.trace_file, arrivals=self.concurrency is None)
        rate = DEFAULT_RATE if self.rate is None and self.concurrency is None else self.rate
        rate = None if rate is not None and math.isinf(rate) else rate
        closed_loop = self.concurrency is not None
        return synthetic(self.requests, self.prompt_len, self.gen_len, rate, closed_loop, self.seed)
