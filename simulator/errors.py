"""User-facing errors of the simulator (bad hardware spec, unsimulatable program).

The `tcpc` CLI prints any of these as one line on stderr and exits with code 2, so messages are
escaped to a single line here once rather than at each place that builds one.
"""

from __future__ import annotations


class SimulatorError(Exception):
    """Base of the simulator's user-facing errors; the message is the whole report, on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\r", "\\r").replace("\n", "\\n"))


class HardwareError(SimulatorError):
    """A hardware spec that cannot be used: the message names the file and the dotted key."""


class OutputError(SimulatorError):
    """An output file that cannot be written: the message names it and why."""
