"""Every benchmark script answers --help with its usage and exits 0 without running, and none
rewrites a page under docs/ unless asked with --write-docs (benchmarks/doc_sections.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAIN = 'if __name__ == "__main__":'
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if MAIN in p.read_text())
DOCS_PATH = re.compile(r"""["']docs["']|/ "docs"|docs/[\w-]+\.md["']""")


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) >= 14, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_prints_usage_and_exits_0(script: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, env=env,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("usage: "), (proc.stdout[:300], proc.stderr[-500:])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_that_names_a_docs_page_writes_it_only_with_write_docs(script: Path) -> None:
    text = script.read_text()
    if DOCS_PATH.search(text) is None:
        return
    assert "add_write_docs(parser" in text, f"{script.name} names a docs page but has no --write-docs"
    assert "atomic_output(DOC" not in text and "atomic_output(page" not in text  # only doc_sections writes


def test_doc_sections_print_instead_of_writing_without_the_flag(tmp_path: Path, capsys) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from doc_sections import write_page, write_section
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- b -->\nold\n<!-- e -->\n")
    write_section(page, "<!-- b -->", "<!-- e -->", ["new"], write=False)
    write_page(page, "all new\n", write=False)
    assert page.read_text() == "intro\n<!-- b -->\nold\n<!-- e -->\n"
    assert capsys.readouterr().out == "new\nall new\n"
    write_section(page, "<!-- b -->", "<!-- e -->", ["new"], write=True)
    assert page.read_text() == "intro\n<!-- b -->\nnew\n<!-- e -->\n"


def test_no_parser_in_the_repository_takes_flag_prefixes() -> None:
    """argparse's default reads `--batch` as `--batch-bucket`; every parser turns that off (tcpc's
    own in tcp_compiler/cli/__init__.py, which every subcommand parser inherits)."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if ".venv" in path.parts or "tests" in path.relative_to(ROOT).parts[:1]:
            continue
        for line in path.read_text().splitlines():
            if "ArgumentParser(" in line and "allow_abbrev=False" not in line and "class " not in line:
                offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not offenders, offenders
