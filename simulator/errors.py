"""User-facing errors of the simulator (bad hardware spec, unsimulatable program).

The `tcpc` CLI prints any of these as one line on stderr and exits with code 2, so messages are
escaped to a single line here once rather than at each place that builds one.
"""

from __future__ import annotations

import string
from collections.abc import Callable


def one_line(message: str) -> str:
    return message.replace("\r", "\\r").replace("\n", "\\n")


class SimulatorError(Exception):
    """Base of the simulator's user-facing errors; the message is the whole report, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class NamesOptions:
    """Part of an error about options the caller gave (fields of an options dataclass, keywords of
    a library call). Its template names each option as a `{field}` that its values do not fill, so
    each front end spells it its own way: str() as the option (chips), the CLI as its flag
    (--chips). Library errors of both packages share it (tcp_compiler.errors.OptionError)."""

    template: str
    values: dict[str, object]
    options: tuple[str, ...]  # the options the template names

    def _named(self, template: str, values: dict[str, object]) -> str:
        """Keeps the template and returns the message with each option spelled as itself."""
        self.template, self.values = template, values
        fields = (field for _, field, _, _ in string.Formatter().parse(template) if field)
        self.options = tuple(dict.fromkeys(f for f in fields if f not in values))
        return self.spelled(str)

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with each option written as `spell(option)`."""
        return one_line(self.template.format(**self.values, **{o: spell(o) for o in self.options}))

    # As it was made (a sweep's worker process may send it back). An error lists NamesOptions
    # before its Exception base, so that this, not BaseException's, is its __reduce__.
    def __reduce__(self):
        return _rebuilt, (type(self), self.template, self.values)


def _rebuilt(cls: type, template: str, values: dict[str, object]) -> NamesOptions:
    return cls(template, **values)


class HardwareError(SimulatorError):
    """A hardware spec that cannot be used: the message names the file and the dotted key."""


class HardwareOptionError(NamesOptions, HardwareError):
    """A bad value of a hardware option the caller gave (chips), named as NamesOptions says.

        HardwareOptionError("{chips} must be at least 1, got {value}", value=0)
    """

    def __init__(self, template: str, **values: object) -> None:
        super().__init__(self._named(template, values))


class OutputError(SimulatorError):
    """An output file that cannot be written: the message names it and why."""
