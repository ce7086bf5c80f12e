"""Every JSON report carries where it came from: the tcpc version, the git commit of the checkout
(null outside one) and the command line (tcp_compiler/provenance.py; docs/report-schema.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tcp_compiler import __version__, provenance
from tcp_compiler.cli import main
from tcp_compiler.report.schema import render_schema

GEMM = Path(__file__).parents[1] / "examples" / "ir" / "gemm.tir"


def _check(found: dict, argv: list[str]) -> None:
    assert list(found) == list(provenance.KEYS)
    assert found["tcpc_version"] == __version__ and found["command_line"] == ["tcpc", *argv]
    assert found["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", found["git_commit"])


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "llama-3.2-1b", "--prompt-len", "8", "--gen-len", "2"],
        ["serve", "llama-3.2-1b", "--requests", "2", "--prompt-len", "16", "--gen-len", "2"],
        ["sweep", "llama-3.2-1b", "--batch", "1,2", "--prompt-len", "8", "--gen-len", "2", "--jobs", "1"],
    ],
    ids=lambda c: c[0],
)
def test_json_reports_carry_version_commit_and_command_line(command: list[str], tmp_path: Path) -> None:
    argv = [*command, "--json", str(tmp_path / "r.json")]
    assert main(argv) == 0
    written = json.loads((tmp_path / "r.json").read_text())
    for report in written if isinstance(written, list) else [written]:  # sweep: every row
        _check(report["provenance"], argv)


def test_inspect_json_carries_it(capsys) -> None:
    assert main(["inspect", str(GEMM), "--json"]) == 0
    _check(json.loads(capsys.readouterr().out)["provenance"], ["inspect", str(GEMM), "--json"])


def test_outside_a_git_checkout_the_commit_is_null(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    provenance.git_commit.cache_clear()
    try:
        assert provenance.provenance(["simulate"])["git_commit"] is None
        (tmp_path / ".git").mkdir()  # a broken checkout: git fails, the report is still written
        provenance.git_commit.cache_clear()
        assert provenance.provenance(["simulate"])["git_commit"] is None
    finally:
        provenance.git_commit.cache_clear()


def test_the_schema_doc_describes_every_provenance_key() -> None:
    doc = render_schema()
    section = doc.split("## `provenance`")[1]
    assert [m for m in re.findall(r"^\| `(\w+)` \|", section, re.M)] == list(provenance.KEYS)
