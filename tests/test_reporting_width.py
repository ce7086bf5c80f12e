"""Output width (issue 16): piped output uses COLUMNS or 120 columns, not rich's 80; at 100
columns no line of `tcpc simulate`, `tcpc hw show` or `tcpc sweep` is longer, and no table cell
is cut (a long name or error wraps at word ends, a source too; tests/test_table_widths.py)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.cli.console import PIPED_WIDTH, console
from tcp_compiler.report.tables import wrap

ROOT = Path(__file__).parents[1]


def test_piped_output_is_120_columns_or_columns(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console().width == PIPED_WIDTH == 120  # pytest's capture is not a terminal
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100


def test_a_piped_process_gets_120_columns() -> None:
    """A real pipe, no COLUMNS: a long line (the assumed values) runs past rich's old 80."""
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "tcp_compiler", "hw", "show", "rngd"], capture_output=True,
                            text=True, env=env, check=True, cwd=ROOT)  # fmt: skip
    widths = [len(line.rstrip()) for line in result.stdout.splitlines()]
    assert 80 < max(widths) <= 120


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_simulate_at_100_columns_keeps_every_cell_whole(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out_json = tmp_path / "r.json"
    args = ["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "3", "--json", str(out_json)]
    assert main(args) == 0
    lines = _lines(capsys.readouterr().out)
    assert max(len(line) for line in lines) <= 100
    report = json.loads(out_json.read_text())
    for phase, roles in report["op_roles"].items():
        for role in roles[:10]:  # each shown role's row holds its name, count and time whole
            cells = [role["role"], str(role["count"]), f"{role['seconds'] * 1e3:.3f}"]
            assert any(line.split()[:3] == cells for line in lines if line.split()), (phase, role["role"])
    units = {u["unit"] for u in report["units"]["prefill"]}
    assert units <= {line.split()[0] for line in lines if line.split()}  # a unit per row, whole


def test_hw_show_at_100_columns(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["hw", "show", "rngd"]) == 0
    lines = _lines(capsys.readouterr().out)
    hw = load_hardware("rngd")
    # a parameter is a row and its source wrapped onto at most about two more (339 lines for 108)
    assert max(len(line) for line in lines) <= 100 and len(lines) <= 3 * len(list(hw.parameters())) + 30
    assert not any("…" in line for line in lines)
    text = "\n".join(lines)
    for dotted, _, _, source in hw.parameters():
        key = dotted.rsplit(".", 1)[1]
        assert any(line.startswith(key + " ") for line in lines), key  # one row per parameter
        for word in source.split():  # every word of every source is printed whole (paths may break at /)
            assert all(piece in text for piece in word.split("/")), (dotted, word)
    assert "startup_cycles" in text and "500 cycles" in text


@pytest.mark.parametrize("width", [20, 40, 60])
def test_wrap_breaks_at_spaces_or_after_slashes(width: int) -> None:
    text = ("published: B:computing-tensors/contraction-engine/packet-reducer (64 B packet = 32 bf16); "
            "FK:tcl/examples/segment_gemm.py uses 1,500 B/cycle")  # fmt: skip
    lines = wrap(text, width)
    assert all(len(line) <= width for line in lines)
    assert " ".join(lines).replace("/ ", "/") == text
    words = set(text.split())
    for line in lines:  # a line starts at a word's start or after a slash, and ends at its end or a slash
        first, last = line.split()[0], line.split()[-1]
        assert any(w.startswith(first) or f"/{first}" in w for w in words), line
        assert last.endswith("/") or any(w.endswith(last) for w in words), line


def test_sweep_help_describes_every_list_option(capsys) -> None:
    with contextlib.suppress(SystemExit):
        main(["sweep", "--help"])
    help_text = capsys.readouterr().out
    lines = help_text.splitlines()
    for flag in ("--batch", "--prompt-len", "--gen-len", "--chips", "--pp", "--dtype"):
        start = next(i for i, line in enumerate(lines) if line.strip().startswith(flag))
        # the option's help: its line and the indented ones after it, up to the next option
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("-")), len(lines))
        described = " ".join(line.strip() for line in lines[start:end])
        assert "comma-separated" in described, described


def test_a_failed_sweep_point_wraps_its_error(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = tmp_path / "s.json"
    args = ["sweep", "llama-3.2-1b", "--prompt-len", "32", "--gen-len", "2", "--chips", "1,3", "--jobs", "1"]
    assert main([*args, "--json", str(out)]) == 0
    lines = _lines(capsys.readouterr().out)
    assert max(len(line) for line in lines) <= 100
    failed = [i for i, line in enumerate(lines) if "failed:" in line]
    assert len(failed) == 1 and lines[failed[0]].split()[0] == "3"
    rest = lines[failed[0] :]
    assert "1 point failed; the whole error is in its row of --csv and --json" in rest
    assert "do not split over 3 chips (heads must be a multiple" in " ".join(" ".join(rest).split())
    rows = json.loads(out.read_text())
    assert "do not split over 3 chips (heads must be a multiple" in rows[1]["error"]


def test_inspect_tables_keep_cells_whole_at_100_columns(capsys, monkeypatch) -> None:
    from tcp_compiler.cli import main

    monkeypatch.setenv("COLUMNS", "100")
    assert main(["inspect", "examples/ir/llama_decoder_layer.tir"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert any(line.startswith("%q ") and "f32[" in line for line in lines)  # one op, one line
