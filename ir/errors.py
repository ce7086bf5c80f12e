"""The project's IR errors. Every user-facing failure is one of these, with a one-line message."""

from __future__ import annotations


class TirError(Exception):
    """Base of all IR errors; the CLI turns one into a single stderr line and exit code 2.

    Messages quote user text (names, attribute strings), so line breaks are escaped here once
    for every error rather than at each place that builds a message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


class ParseError(TirError):
    """Malformed text: the message starts with `FILE:LINE:COL:`."""


class VerifyError(TirError):
    """An ill-typed graph: names the op, the value and the mismatch."""


class TypeRuleError(Exception):
    """Raised by an op's type rule; the verifier adds the op, value and location."""


class InterpretError(TirError):
    """A graph that type-checks but cannot run on the given inputs (missing feed, bad index)."""


class NonFiniteError(InterpretError):
    """An op whose result holds NaN or +inf (inputs that overflow, or NaN weights): names the op."""
