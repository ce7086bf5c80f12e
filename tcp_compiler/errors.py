"""User-facing errors of the compiler (bad model, config, checkpoint or argument).

The CLI prints any of these (and any ir.TirError) as one line on stderr and exits with code 2.
"""

from __future__ import annotations


class TcpcError(Exception):
    """Base of the compiler's user-facing errors; the message is the whole report."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


class CliError(TcpcError):
    """A bad argument or an output that cannot be written."""


class FrontendError(TcpcError):
    """A model that cannot be read: unknown family, missing or malformed config field."""
