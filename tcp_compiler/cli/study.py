"""A sweep's grid, declared once: the fields of `SweepGrid` generate `tcpc sweep`'s grid flags, and
a study file (`tcpc sweep --study study.toml`) states the same fields as TOML keys, each value read
by its flag's parser, so the file and the flags share one typed, validated schema.

    model = ["llama-3.1-8b", "llama-3.1-70b"]
    hw = ["rngd"]
    chips = [4]
    gen_len = [128]
    store = "study.parquet"
    [set]
    "hbm.sustained_bytes_per_cycle" = [720, 1440]   # or [set.hbm] sustained_bytes_per_cycle = [...]
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from tcp_compiler.cli import arg_types
from tcp_compiler.cli.flags import flag_parser
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.option_fields import flagged, option
from tcp_compiler.serve.workload import DEFAULT_RATE, Lengths, Workload, lengths
from tcp_compiler.spec_settings import spec_values

MAX_STUDY_BYTES = 1 << 20
SIMULATE_LENGTHS = (2048, 128)  # a simulation sweep's prompt and generated tokens, unless given


def _listed(parse: Callable[[str], list]) -> Callable[[str], tuple]:
    """A comma-separated list parser (tcp_compiler.cli.arg_types) whose errors are ValueErrors."""

    def read(text: str) -> tuple:
        try:
            return tuple(parse(text))
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None

    read.__name__ = parse.__name__
    return read


def _each(cls: type, name: str) -> Callable[[str], tuple]:
    """A comma-separated list of the option `name` of `cls`, each value read by that option's own
    parser (its bounds or `parse`): a sweep axis over an option declared once, where it is used."""
    read = flag_parser(dict((f.name, how) for f, how in flagged(cls))[name])
    assert read is not None, f"{cls.__name__}.{name} reads no text"

    def parse(text: str) -> tuple:
        parts = [t.strip(" \t") for t in text.split(",")]
        if not all(parts):
            raise ValueError(f"expected comma-separated values, got {text!r}")
        if len(parts) > arg_types.MAX_LIST:
            raise ValueError(f"expected at most {arg_types.MAX_LIST} values, got {len(parts)}")
        try:
            return tuple(read(part) for part in parts)
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None

    parse.__name__ = name
    return parse


def _names(text: str) -> tuple[str, ...]:
    values = tuple(t.strip() for t in text.split(",") if t.strip())
    if not values:
        raise ValueError(f"expected comma-separated names, got {text!r}")
    return values


def _dtypes(text: str) -> tuple[str, ...]:
    values = _names(text)
    bad = [v for v in values if v not in PRECISIONS]
    if bad:
        raise ValueError(f"{bad[0]!r} is not one of {', '.join(PRECISIONS)}")
    return values


def _settings(text: str) -> tuple[tuple[str, tuple[int | float, ...]], ...]:
    return (spec_values(text),)


@dataclass(frozen=True)
class SweepGrid:
    """The points of a sweep (every combination of these lists) and the store they go to."""

    model: tuple[str, ...] = ()  # the positional MODEL arguments
    hw: tuple[str, ...] = option(
        ("rngd",), "hardware specs, comma-separated or repeated (default rngd)", "NAME|FILE,...",
        parse=_names, repeat=True,
    )  # fmt: skip
    chips: tuple[int, ...] | None = option(
        None, "comma-separated tensor-parallel chips per pipeline stage (default: each spec's count)",
        "N,...", parse=_listed(arg_types.integers(1, arg_types.MAX_CHIPS)), aliases=("--tp",),
    )  # fmt: skip
    pp: tuple[int, ...] = option(
        (1,), "pipeline stages, comma-separated (default 1): each point runs on chips x stages", "P,...",
        parse=_listed(arg_types.integers(1, arg_types.MAX_CHIPS)),
    )  # fmt: skip
    batch: tuple[int, ...] = option(
        (1,), "sequences per batch, comma-separated (default 1)", "B,...",
        parse=_listed(arg_types.integers(1, arg_types.MAX_BATCH)),
    )  # fmt: skip
    prompt_len: tuple[Lengths, ...] | None = option(
        None, f"prompt tokens, comma-separated (default {SIMULATE_LENGTHS[0]}); with --serve, each as tcpc "
        f"serve's --prompt-len: N, uniform:LO:HI or normal:MEAN:STD (default {Workload().prompt_len})",
        "P,...", parse=_each(Workload, "prompt_len"),
    )  # fmt: skip
    gen_len: tuple[Lengths, ...] | None = option(
        None, f"generated tokens, comma-separated (default {SIMULATE_LENGTHS[1]}); with --serve, as "
        f"--prompt-len (default {Workload().gen_len})", "G,...", parse=_each(Workload, "gen_len"),
    )  # fmt: skip
    dtype: tuple[str, ...] = option(
        ("bf16",), f"precisions, comma-separated: {', '.join(PRECISIONS)} (default bf16)", "D,...",
        parse=_dtypes,
    )  # fmt: skip
    set: tuple[tuple[str, tuple[int | float, ...]], ...] = option(
        (), "spec values to sweep by address, e.g. hbm.sustained_bytes_per_cycle=720,1440; repeatable "
        "(every combination)", "TABLE.KEY=V,...", parse=_settings, repeat=True,
    )  # fmt: skip
    serve: bool = option(False, "sweep serving runs (one `tcpc serve` per load) instead of one batch")
    rate: tuple[float, ...] = option(
        (), f"with --serve: Poisson arrivals per second, or inf: all at once, comma-separated (default "
        f"{DEFAULT_RATE:g}, as tcpc serve, unless --concurrency is given)", "R,...",
        parse=_each(Workload, "rate"),
    )  # fmt: skip
    concurrency: tuple[int, ...] = option(
        (), "with --serve: closed-loop clients, comma-separated", "C,...",
        parse=_each(Workload, "concurrency"),
    )  # fmt: skip
    requests: tuple[int, ...] = option(
        (Workload().requests,), f"with --serve: requests per serving run (default {Workload().requests}); "
        "--prompt-len and --gen-len draw their lengths", "N", parse=_each(Workload, "requests"),
    )  # fmt: skip
    store: str | None = option(
        None, "a Parquet result store: points it holds are skipped, finished points are added as they "
        "complete", "FILE.parquet", parse=str,
    )  # fmt: skip


    def lengths(self) -> tuple[tuple[Lengths, ...], tuple[Lengths, ...]]:
        """The prompt and output lengths swept: those given, else tcpc serve's workload's (with
        --serve) or SIMULATE_LENGTHS."""
        if self.serve:
            defaults = ((Workload().prompt_len,), (Workload().gen_len,))
        else:
            defaults = tuple((lengths(str(n)),) for n in SIMULATE_LENGTHS)
        return self.prompt_len or defaults[0], self.gen_len or defaults[1]

    def loads(self) -> tuple[tuple[float, ...], tuple[int, ...]]:
        """The serving loads swept: the rates and concurrencies given, or tcpc serve's default rate."""
        if not (self.rate or self.concurrency):
            return (DEFAULT_RATE,), ()
        return self.rate, self.concurrency


def read_study(path: str) -> SweepGrid:
    """A study file's grid; an unknown key or a bad value is one line naming the file and key."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STUDY_BYTES + 1)
    except OSError as e:
        raise CliError(f"--study {path}: cannot read: {e.strerror}") from None
    if len(data) > MAX_STUDY_BYTES:
        raise CliError(f"{path}: larger than {MAX_STUDY_BYTES:,} bytes; a study file is a few lines")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CliError(f"{path}: not TOML: {e}") from None
    hows = {f.name: how for f, how in flagged(SweepGrid)}
    known = [f.name for f in fields(SweepGrid)]
    values: dict[str, Any] = {}
    for key, item in table.items():
        if key not in known:
            from simulator.spec import suggest

            raise CliError(f"{path}: {key}: no such key{suggest(key, known)}; known: {', '.join(known)}")
        try:
            values[key] = _model(item) if key == "model" else _read(key, item, hows[key])
        except (ValueError, argparse.ArgumentTypeError) as e:
            raise CliError(f"{path}: {key}: {e}") from None
    return SweepGrid(**values)


def _model(item: Any) -> tuple[str, ...]:
    names = [item] if isinstance(item, str) else item
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"expected a model name or a list of them, got {item!r}")
    return tuple(names)


def _read(key: str, item: Any, how: Any) -> Any:
    """A TOML value through its flag's parser: a list as the comma-separated text the flag takes."""
    if SweepGrid.__dataclass_fields__[key].type in (bool, "bool"):
        if not isinstance(item, bool):
            raise ValueError(f"expected true or false, got {item!r}")
        return item
    if key == "set":
        if not isinstance(item, dict):
            raise ValueError("expected a table of TABLE.KEY = [values]")
        return tuple(s for dotted, got in _dotted(item) for s in flag_parser(how)(f"{dotted}={_text(got)}"))
    if isinstance(item, dict):
        raise ValueError("expected a value or a list, got a table")
    return flag_parser(how)(_text(item))


def _dotted(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """`[set.hbm] sustained_bytes_per_cycle = [...]` and `"hbm.sustained_bytes_per_cycle" = [...]` alike."""
    out = []
    for key, item in table.items():
        if isinstance(item, dict):
            out += _dotted(item, f"{prefix}{key}.")
        else:
            out.append((prefix + key, item))
    return out


def _text(item: Any) -> str:
    items = item if isinstance(item, list) else [item]
    return ",".join(str(v) for v in items)
