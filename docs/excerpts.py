"""Regenerates the parts of the docs that quote tcpc's output, so a quote cannot drift from the code.

A generated part is marked in README.md or docs/*.md as `<!-- generated: NAME -->...<!-- end -->`
(inline or around a whole block); NAME is a key of EXCERPTS. Every excerpt comes from running tcpc
itself, so after a change to the report, the program printer or the cost model:

    python docs/excerpts.py            # rewrite every marked part
    python docs/excerpts.py --check    # exit 1 naming the stale parts (tests/test_docs_excerpts.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->)(?P<body>.*?)(<!-- end -->)", re.S)
WIDTH = "100"  # terminal columns the quoted output is produced at


def documents() -> list[Path]:
    """The files that may hold generated parts."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def tcpc(*args: str) -> str:
    """tcpc's standard output for `args`, run from the repository root at a fixed width."""
    env = {**os.environ, "COLUMNS": WIDTH, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tcp_compiler", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"tcpc {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


@cache
def default_report() -> dict:
    """The JSON report of `tcpc simulate` with every default, as the README's tour runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        tcpc("simulate", "--json", str(Path(tmp) / "report.json"))
        return json.loads((Path(tmp) / "report.json").read_text())


def _phase(name: str, seconds: str, roofline: str) -> str:
    """ "compute-bound at 1.07x": a phase of the default run, as its summary row rounds it."""
    phase = default_report()[name]
    return f"{phase['bound']}-bound at {phase[seconds] / phase[roofline]:.2f}x"


def _program_blocks(text: str) -> list[list[str]]:
    """`--emit program` output cut into op blocks (an "op N ..." line and its indented lines)."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("op ") or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return blocks


def _ops(args: tuple[str, ...], headers: tuple[str, ...], total: bool) -> str:
    """The first op block whose header matches each regex in `headers` (and the totals line), as a
    fenced excerpt."""
    out = tcpc(*args)
    blocks = _program_blocks(out)
    parts = []
    for header in headers:
        block = next((b for b in blocks if re.search(header, b[0])), None)
        if block is None:
            raise RuntimeError(f"no op matching {header!r} in tcpc {' '.join(args)}")
        parts.append("\n".join(block))
    if total:
        parts.append(next(line for line in out.splitlines() if line.startswith("total:")))
    return "\n```\n" + "\n...\n".join(parts) + "\n```\n"


PROGRAM = ("compile", "llama-3.2-1b", "--phase", "decode", "--past", "64", "--emit", "program")
EXCERPTS: dict[str, Callable[[], str]] = {
    "tour-prefill": lambda: _phase("prefill", "seconds", "roofline_seconds"),
    "tour-decode": lambda: _phase("decode", "tpot_seconds_mean", "roofline_seconds_mean"),
    "program-decode": lambda: _ops(PROGRAM, (r"^op \d+ %l0\.q \[", r"^op \d+ %l0\.k_cache \["), total=True),
    "program-all-reduce": lambda: _ops(
        (*PROGRAM, "--hw", "rngd-2"), (r"%l0\.o\.sum\S* \[all_reduce\]",), total=False
    ),
    "area-total": lambda: f"{default_report()['hardware']['area_mm2']:.0f}",
}


def regenerate(text: str, where: str) -> str:
    """`text` with every marked part replaced by its excerpt."""

    def body(match: re.Match) -> str:
        name = match["name"]
        if name not in EXCERPTS:
            raise KeyError(f"{where}: unknown excerpt {name!r}; known: {', '.join(EXCERPTS)}")
        return match[1] + EXCERPTS[name]() + match[4]

    return MARKED.sub(body, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a part is stale")
    args = parser.parse_args(argv)
    stale = []
    for path in documents():
        text = path.read_text()
        new = regenerate(text, path.name)
        if new == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(new)
    verb = "stale (run python docs/excerpts.py)" if args.check else "rewritten"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
