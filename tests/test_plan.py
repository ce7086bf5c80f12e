"""`tcpc plan`: layouts of N chips ranked by goodput per card under SLOs, each reproducible."""

from __future__ import annotations

import json
import shlex

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.planner import Layout, fits, layouts
from tcp_compiler.serve.workload import Workload

MODEL = "llama-3.2-1b"


def test_layouts_cover_every_factorisation() -> None:
    found = layouts(8)
    assert len(found) == 10 and len(set(found)) == 10 and all(c.chips == 8 for c in found)
    assert Layout(2, 2, 2) in found and layouts(1) == [Layout(1, 1, 1)]


def test_a_layout_whose_weights_do_not_fit_is_pruned() -> None:
    """llama-3.1-70b's bf16 weights (141 GB) need more than one card's HBM; on 4 cards they fit."""
    config, hw, prec = load_model("llama-3.1-70b").config, load_hardware("rngd"), precision("bf16")
    work = Workload(requests=4)
    assert not fits(config, hw, prec, Layout(1, 1, 4), work)
    assert fits(config, hw, prec, Layout(4, 1, 1), work)


def test_the_best_layouts_command_reproduces_its_goodput(tmp_path, capsys) -> None:
    assert main(["plan", MODEL, "--chips", "2", "--slo-ttft", "0.05", "--slo-tpot", "0.009"]) == 0
    out = capsys.readouterr().out
    best = next(line for line in out.splitlines() if line.startswith("1. tcpc serve "))
    row = [cell.strip() for cell in next(line for line in out.splitlines() if "│" in line).split("│")]
    assert shlex.split(best)[6:12] == ["--tp", row[0], "--pp", row[1], "--dp", row[2]]
    per_card = float(row[6])
    report = tmp_path / "best.json"
    assert main([*shlex.split(best)[2:], "--json", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert doc["goodput"]["requests_per_s"] / doc["run"]["chips"] == pytest.approx(per_card, rel=5e-3)


@pytest.mark.parametrize("flags", [["--chips", "2"], ["--chips", "2", "--slo-ttft", "1", "--rate", "3"]])
def test_bad_plan_flags_exit_2(flags, capsys) -> None:
    assert main(["plan", MODEL, *flags]) == 2
    assert capsys.readouterr().err.count("\n") == 1
