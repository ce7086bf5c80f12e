"""Where a JSON report came from: the tcpc version, the git commit of the checkout it ran from
(when it is one) and the command line, so a report read later can be reproduced or set aside.

Every JSON report (`simulate --json`, `serve --json`, `sweep --json`, `inspect --json`) carries
`provenance(argv)` under the key `provenance`; KEYS documents its keys (docs/report-schema.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tcp_compiler import __version__

ROOT = Path(__file__).resolve().parents[1]
DOC = (
    "Where the report came from: the last top-level key, added by the command that wrote the report. "
    "Every tcpc JSON report carries it (`serve --json` and `inspect --json` at the top level too, "
    "`sweep --json` on every row)."
)
KEYS = {  # key -> (type, meaning): the schema doc's section
    "tcpc_version": ("string", "the version of tcpc that wrote the report"),
    "git_commit": (
        "string or null",
        "the commit of the tcpc checkout that ran (null outside a git checkout, e.g. an installed package)",
    ),
    "command_line": ("list of strings", "the command as run: `tcpc` then its arguments"),
}


def provenance(argv: Sequence[str]) -> dict[str, Any]:
    """The `provenance` object of a report written by `tcpc argv`."""
    return {"tcpc_version": __version__, "git_commit": git_commit(), "command_line": ["tcpc", *argv]}


@cache
def git_commit() -> str | None:
    """HEAD of the checkout tcpc runs from, or None when it is not one (or git is missing or slow):
    only the checkout's own .git is asked, never a repository that merely contains an install."""
    if not (ROOT / ".git").exists():
        return None
    try:
        proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and len(commit) in (40, 64) else None  # SHA-1 or SHA-256
