"""docs/energy.md's generated figures (the README's default run, `tcpc serve`'s default, the +-50 %
sensitivity table) are what benchmarks/energy_figures.py computes now."""

from __future__ import annotations

from benchmarks.energy_figures import MARKS, PAGE, sections


def test_energy_doc_figures_are_current() -> None:
    text = PAGE.read_text()
    for name, lines in sections().items():
        begin, end = MARKS[name]
        written = text[text.index(begin) + len(begin) : text.index(end)].strip("\n")
        assert written == "\n".join(lines), f"run: python -m benchmarks.energy_figures --write-docs ({name})"
