"""Options as flags: an option (a field of an options dataclass, a keyword of a library call) is
the flag `--` + its name with `-` for `_`. Flags are generated from options dataclasses
(tcp_compiler.option_fields) and library errors that name options (simulator.errors.NamesOptions:
OptionError, HardwareOptionError) print with the flags the user typed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from simulator.errors import NamesOptions
from tcp_compiler.cli import arg_types
from tcp_compiler.option_fields import Flag, flagged


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def describe(error: Exception) -> str:
    """An error's one-line message as the CLI prints it: options named by their flags."""
    return error.spelled(flag) if isinstance(error, NamesOptions) else str(error)


def add_flags(container: Any, cls: type, suffix: str = "", only: tuple[str, ...] | None = None) -> None:
    """One flag per flagged field of the dataclass `cls` (or of those named in `only`, for a command
    that takes some of its options), named after the field (+ `suffix`), its default the field's;
    options sharing an `exclusive` name form a mutually exclusive group. A bool field is a switch;
    a `repeat` flag collects its values over every time it is given."""
    exclusive: dict[str, Any] = {}
    for field, how in flagged(cls):
        if only is not None and field.name not in only:
            continue
        target = container
        if how.exclusive is not None:
            if how.exclusive not in exclusive:
                exclusive[how.exclusive] = container.add_mutually_exclusive_group()
            target = exclusive[how.exclusive]
        names = (flag(field.name + suffix), *how.aliases)
        if field.type in (bool, "bool"):
            target.add_argument(*names, action="store_true", help=how.help)
            continue
        extra: dict[str, Any] = {"metavar": how.metavar} if how.metavar is not None else {}
        if how.choices is not None:
            extra["choices"] = tuple(how.choices)
        kind = flag_parser(how)
        if kind is not None:
            extra["type"] = kind
        if how.repeat:  # argparse would extend a default: None stands for the field's (from_args)
            extra.update(action="extend", default=None)
        else:
            extra["default"] = field.default
        target.add_argument(*names, dest=field.name + suffix, help=how.help, **extra)


def from_args(cls: type, args: argparse.Namespace, suffix: str = "", **given: Any) -> Any:
    """The dataclass `cls` from its flags' values (and `given` for fields without a flag)."""
    values = {field.name: getattr(args, field.name + suffix) for field, _ in flagged(cls)}
    repeated = {field.name: field.default for field, how in flagged(cls) if how.repeat}
    values.update({name: default if values[name] is None else tuple(values[name])
                   for name, default in repeated.items()})  # fmt: skip
    return cls(**values, **given)


def flag_parser(how: Flag) -> Callable[[str], Any] | None:
    """The argparse type of a flag: text -> value, or an ArgumentTypeError with the reason."""
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
