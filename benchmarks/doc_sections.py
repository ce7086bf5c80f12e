"""Pages under docs/ that benchmarks write: a script's figures between its BEGIN and END markers,
or a whole page. A benchmark writes them only when asked with --write-docs (add_write_docs);
otherwise it prints what it would write, so running one to look at its figures changes no page."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.files import atomic_output

ROOT = Path(__file__).resolve().parents[1]


def add_write_docs(parser: argparse.ArgumentParser, *pages: Path) -> None:
    """The --write-docs flag, naming the pages it rewrites."""
    names = ", ".join(str(p.resolve().relative_to(ROOT)) for p in pages)
    parser.add_argument(
        "--write-docs", action="store_true", help=f"write the figures into {names} (default: only print them)"
    )


def write_section(page: Path, begin: str, end: str, lines: list[str], write: bool) -> None:
    """With `write`, replaces the page's section between `begin` and `end` (markers kept) with
    `lines`, or adds the section at the end of the page, atomically; without, prints `lines`."""
    if not write:
        print("\n".join(lines))
        return
    body = "\n".join([begin, *lines, end])
    text = page.read_text()
    if begin in text and end in text:
        text = text[: text.index(begin)] + body + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    write_page(page, text, write)


def write_page(page: Path, text: str, write: bool) -> None:
    """With `write`, the whole page becomes `text`, atomically; without, `text` is printed."""
    if not write:
        print(text, end="")
        return
    with atomic_output(page) as tmp:
        tmp.write_text(text)
    print(f"wrote {page}")
