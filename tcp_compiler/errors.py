"""User-facing errors of the compiler (bad model, config, checkpoint or argument).

The CLI prints any of these (and any ir.TirError) as one line on stderr and exits with code 2.
Library code names what the caller gave by its option name (OptionError); only the CLI speaks of
flags (CliError, and OptionError spelled with flag names).
"""

from __future__ import annotations

from simulator.errors import NamesOptions, one_line


class TcpcError(Exception):
    """Base of the compiler's user-facing errors; the message is the whole report."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class CliError(TcpcError):
    """A bad argument or an output that cannot be written (raised by tcp_compiler.cli only)."""


class SearchError(TcpcError):
    """A search that cannot run as stated: a bad range, setting, objective or constraint (the
    message names its flag, as `tcpc search` spells it), or a folder that holds another search."""


class FrontendError(TcpcError):
    """A model that cannot be read: unknown family, missing or malformed config field."""


class RequestFileError(TcpcError):
    """A request file (serving trace) that cannot be read: the message names the file and line."""


class OptionError(NamesOptions, TcpcError):
    """A bad value of options the caller gave (fields of an options dataclass or keywords of a
    library call), named as simulator.errors.NamesOptions says: str() as the option (kv_dtype),
    the CLI as its flag (--kv-dtype).

        OptionError("{kv_dtype} {value!r} is not supported", value="int2")
    """

    def __init__(self, template: str, **values: object) -> None:
        super().__init__(self._named(template, values))


class StoreError(TcpcError):
    """A result store (a sweep's Parquet file) that cannot be read or written: the message names it."""


class CapacityError(OptionError):
    """A run that does not fit HBM: `values` carry the figures per chip (needed, weights, kv_cache,
    activations, available) and, once the generation driver has tried them, what would fit
    (tcp_compiler.generation.fit); the template names the options those are, so the CLI words them
    as its flags (--batch 32, --kv-dtype fp8)."""
