"""Errors the CLI reports as one line and exit code 2."""

from __future__ import annotations


class CliError(Exception):
    """A bad argument or an output that cannot be written; the message is the whole report."""
