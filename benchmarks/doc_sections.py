"""Generated sections of the docs: a script's figures between its BEGIN and END markers."""

from __future__ import annotations

from pathlib import Path

from simulator.files import atomic_output


def write_section(page: Path, begin: str, end: str, lines: list[str]) -> None:
    """Replaces the page's section between `begin` and `end` (markers kept) with `lines`, or adds
    the section at the end of the page; written atomically."""
    body = "\n".join([begin, *lines, end])
    text = page.read_text()
    if begin in text and end in text:
        text = text[: text.index(begin)] + body + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    with atomic_output(page) as tmp:
        tmp.write_text(text)
    print(f"wrote {page}")
