"""Options as flags: an option (a field of an options dataclass, a keyword of a library call) is
the flag `--` + its name with `-` for `_`, so library errors that name options (OptionError) print
with the flags the user typed."""

from __future__ import annotations

from tcp_compiler.errors import OptionError


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def message(error: OptionError) -> str:
    return error.spelled(flag)
