"""The rich Console the commands print tables with, at a width that keeps table cells whole.

Rich falls back to 80 columns when standard output is not a terminal, so `tcpc simulate | less`
split cells over lines. A terminal keeps its own width; piped output takes `COLUMNS` if set,
else PIPED_WIDTH.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 120


def console(stderr: bool = False) -> Console:
    """A Console on standard output (or error): the terminal's width, else COLUMNS, else 120."""
    probe = Console(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return probe
    return Console(stderr=stderr, width=PIPED_WIDTH)
