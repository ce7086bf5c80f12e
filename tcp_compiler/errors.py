"""User-facing errors of the compiler (bad model, config, checkpoint or argument).

The CLI prints any of these (and any ir.TirError) as one line on stderr and exits with code 2.
Library code names what the caller gave by its option name (OptionError); only the CLI speaks of
flags (CliError, and OptionError spelled with flag names).
"""

from __future__ import annotations

import string
from collections.abc import Callable


def _one_line(message: str) -> str:
    return message.replace("\r", "\\r").replace("\n", "\\n")


class TcpcError(Exception):
    """Base of the compiler's user-facing errors; the message is the whole report."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class CliError(TcpcError):
    """A bad argument or an output that cannot be written (raised by tcp_compiler.cli only)."""


class SearchError(TcpcError):
    """A search that cannot run as stated: a bad range, setting, objective or constraint (the
    message names its flag, as `tcpc search` spells it), or a folder that holds another search."""


class FrontendError(TcpcError):
    """A model that cannot be read: unknown family, missing or malformed config field."""


class RequestFileError(TcpcError):
    """A request file (serving trace) that cannot be read: the message names the file and line."""


class OptionError(TcpcError):
    """A bad value of options the caller gave (fields of an options dataclass or keywords of a
    library call). `template` names each option as a `{field}` that `values` does not fill, so each
    front end spells it its own way: str() as the option (kv_dtype), the CLI as its flag (--kv-dtype).

        OptionError("{kv_dtype} {value!r} is not supported", value="int2")
    """

    def __init__(self, template: str, **values: object) -> None:
        self.template, self.values = template, values
        fields = (field for _, field, _, _ in string.Formatter().parse(template) if field)
        self.options = tuple(dict.fromkeys(f for f in fields if f not in values))
        super().__init__(self.spelled(str))

    def spelled(self, spell: Callable[[str], str]) -> str:
        """The message with each option written as `spell(option)`."""
        return _one_line(self.template.format(**self.values, **{o: spell(o) for o in self.options}))

    def __reduce__(self):  # as it was made (a sweep's worker process may send it back)
        return _option_error, (type(self), self.template, self.values)


def _option_error(cls: type[OptionError], template: str, values: dict[str, object]) -> OptionError:
    return cls(template, **values)
