"""The rich Console the commands print tables with, at a width that keeps table cells whole.

Rich falls back to 80 columns when standard output is not a terminal, so `tcpc simulate | less`
split cells over lines. A terminal keeps its own width; piped output takes `COLUMNS` if set,
else PIPED_WIDTH.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 120


class _Console(Console):
    """Rich exits with status 1 when its reader goes away; tcpc's main decides instead (the
    reader of `tcpc simulate | head` had what it wanted: status 0)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """A Console on standard output (or error): the terminal's width, else COLUMNS, else 120."""
    probe = _Console(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return probe
    return _Console(stderr=stderr, width=PIPED_WIDTH)
