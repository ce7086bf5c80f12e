"""Options as flags: an option (a field of an options dataclass, a keyword of a library call) is
the flag `--` + its name with `-` for `_`. Flags are generated from options dataclasses
(tcp_compiler.option_fields) and library errors that name options (OptionError) print with the
flags the user typed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tcp_compiler.cli import arg_types
from tcp_compiler.errors import OptionError
from tcp_compiler.option_fields import Flag, flagged


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def describe(error: Exception) -> str:
    """An error's one-line message as the CLI prints it: options named by their flags."""
    return error.spelled(flag) if isinstance(error, OptionError) else str(error)


def add_flags(container: Any, cls: type, suffix: str = "") -> None:
    """One flag per flagged field of the dataclass `cls`, named after the field (+ `suffix`), its
    default the field's; options sharing an `exclusive` name form a mutually exclusive group."""
    exclusive: dict[str, Any] = {}
    for field, how in flagged(cls):
        target = container
        if how.exclusive is not None:
            if how.exclusive not in exclusive:
                exclusive[how.exclusive] = container.add_mutually_exclusive_group()
            target = exclusive[how.exclusive]
        extra: dict[str, Any] = {"metavar": how.metavar} if how.metavar is not None else {}
        if how.choices is not None:
            extra["choices"] = tuple(how.choices)
        kind = _type(how)
        if kind is not None:
            extra["type"] = kind
        target.add_argument(flag(field.name + suffix), default=field.default, help=how.help, **extra)


def declared(cls: type, name: str) -> tuple[Any, Flag]:
    """The default and the flag of the option `name` of the options dataclass `cls`."""
    field, how = next((f, how) for f, how in flagged(cls) if f.name == name)
    return field.default, how


def help_of(cls: type, name: str) -> str:
    """The option's help with its default written in (for a flag whose own default differs)."""
    default, how = declared(cls, name)
    return how.help.replace("%(default)s", str(default))


def list_type(cls: type, name: str) -> Callable[[str], list]:
    """An argparse type: comma-separated values of the option `name`, each read as its own flag
    reads one, at most arg_types.MAX_LIST of them (a sweep's list of an option)."""
    _, how = declared(cls, name)
    one = _type(how) or str

    def read(text: str) -> list:
        values = [one(part.strip(" \t")) for part in text.split(",")]
        if len(values) > arg_types.MAX_LIST:
            limit = arg_types.MAX_LIST
            raise argparse.ArgumentTypeError(f"expected at most {limit} values, got {len(values)}")
        return values

    read.__name__ = name
    return read


def from_args(cls: type, args: argparse.Namespace, suffix: str = "", **given: Any) -> Any:
    """The dataclass `cls` from its flags' values (and `given` for fields without a flag)."""
    return cls(**{field.name: getattr(args, field.name + suffix) for field, _ in flagged(cls)}, **given)


def _type(how: Flag) -> Callable[[str], Any] | None:
    if how.bounds is not None:
        return arg_types.integer(*how.bounds)
    return None if how.parse is None else flag_type(how.parse)


def flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser that raises ValueError with the reason."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    read.__name__ = parse.__name__
    return read
