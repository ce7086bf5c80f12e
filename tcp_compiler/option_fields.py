"""Options declared once: a field of an options dataclass carries how it reads as text (its flag's
help, metavar, range or parser), so the command line is generated from the dataclass
(tcp_compiler/cli/flags.py) instead of restating it, as Vidur's flat configs generate their CLI.

    @dataclass(frozen=True)
    class ServeOptions:
        max_seqs: int = option(256, "sequences running at once (default %(default)s)", "S",
                               bounds=(1, MAX_SEQUENCES))

The flag is `--max-seqs` (tcp_compiler.cli.flags.flag); `%(default)s` in the help is the default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from dataclasses import Field, dataclass, field, fields
from typing import Any

# The largest values options take, as tcpc's flags allow (tcp_compiler/cli/arg_types.py)
MAX_TOKENS = 1 << 20  # tokens per prompt, output, iteration or grid step
MAX_SEQUENCES = 1 << 16  # requests, clients or running sequences


@dataclass(frozen=True)
class Flag:
    """How an option reads on a command line (its field's metadata)."""

    help: str
    metavar: str | None = None
    bounds: tuple[int, int] | None = None  # an integer from lo to hi inclusive
    parse: Callable[[str], Any] | None = None  # text -> value; a ValueError's message is the reason
    choices: Collection[str] | None = None  # read when the parser is built (a registry may grow)
    exclusive: str | None = None  # options sharing this name cannot be given together
    repeat: bool = False  # the flag may be given several times; `parse` returns a tuple, joined
    aliases: tuple[str, ...] = ()  # other spellings of the flag (`--tp` for `--chips`)


def option(default: Any, help: str, metavar: str | None = None, **how: Any) -> Any:
    """A dataclass field with its flag (Flag's other fields as keywords)."""
    return field(default=default, metadata={"flag": Flag(help, metavar, **how)})


def flagged(cls: type) -> list[tuple[Field, Flag]]:
    """The fields of an options dataclass that have a flag, in declaration order."""
    return [(f, f.metadata["flag"]) for f in fields(cls) if "flag" in f.metadata]


@dataclass(frozen=True)
class PrefillOptions:
    """How a generation's prefill runs (`tcpc simulate`): in chunks of prompt tokens, as a serving
    scheduler's token budget (ServeOptions.max_batch_tokens) chunks it, so its activations fit."""

    prefill_chunk: int | None = option(
        None, "run the prefill in chunks of at most N prompt tokens, whole prompts each, in turn "
        "(default: one program over the batch)", "N", bounds=(1, MAX_TOKENS),
    )  # fmt: skip


_ASCII_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def ascii_int(text: str) -> int:
    """The integer `text` spells in ASCII digits with an optional sign (spaces or tabs around it
    allowed); a ValueError otherwise. Python's int() also takes full-width and other Unicode digits,
    underscores and any Unicode whitespace, none of which a user typing an option means; and never a
    4,300-digit conversion."""
    stripped = text.strip(" \t")
    if len(stripped) > 24 or _ASCII_INT.fullmatch(stripped) is None:
        raise ValueError(f"{text!r} is not an integer in ASCII digits")
    return int(stripped, 10)


def positive_number(limit: float, allow_inf: bool = False) -> Callable[[str], float]:
    """A parser: a number above 0 and at most `limit` (or inf, when allowed)."""

    def parse(text: str) -> float:
        stripped = text.strip(" \t")
        typed = stripped.isascii() and not any(c == "_" or c.isspace() for c in stripped)
        try:  # float() also reads Unicode digits, underscores and newlines, which no user means
            value = float(stripped) if typed else math.nan
        except ValueError:
            value = math.nan
        if allow_inf and math.isinf(value) and value > 0:
            return value
        if not (math.isfinite(value) and 0 < value <= limit):
            raise ValueError(f"expected a number above 0 and at most {limit:g}, got {text!r}")
        return value

    return parse
