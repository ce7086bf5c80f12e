"""`tcpc sweep --serve`: one serving run per load x chips x dtype, rows as `tcpc serve` reports them."""

from __future__ import annotations

import csv
import json

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve
from tcp_compiler.serve.workload import lengths, synthetic
from tcp_compiler.sweep.serve import ServePoint, run_serve_point


def test_a_row_is_the_serve_run_of_its_point() -> None:
    point = ServePoint(model="llama-3.2-1b", hw="rngd", chips=1, dtype="bf16", requests=8, prompt_len="64",
                       gen_len="16", rate=None, concurrency=4)  # fmt: skip
    row = run_serve_point(point)
    requests = synthetic(8, lengths("64"), lengths("16"), None, True, 0)
    result = serve(load_model("llama-3.2-1b").config, load_hardware("rngd"), precision("bf16"), requests,
                   ServeOptions(concurrency=4), CompileOptions(chips=1))  # fmt: skip
    report = serve_report(result)
    assert row["status"] == "ok"
    assert row["throughput_output_tokens_per_s"] == report.throughput_output_tokens_per_s
    assert row["ttft_p99_s"] == report.ttft_seconds.p99


def test_sweep_serve_writes_one_row_per_load_in_order(tmp_path, capsys) -> None:
    out = tmp_path / "s.csv"
    args = ["sweep", "llama-3.2-1b", "--serve", "--rate", "4,16", "--concurrency", "8", "--requests", "8",
            "--prompt-len", "64", "--gen-len", "16", "--jobs", "1", "--csv", str(out),
            "--json", str(tmp_path / "s.json")]  # fmt: skip
    assert main(args) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["rate"], r["concurrency"]) for r in rows] == [("4.0", ""), ("16.0", ""), ("", "8")]
    assert all(r["status"] == "ok" and float(r["throughput_output_tokens_per_s"]) > 0 for r in rows)
    assert len(json.loads((tmp_path / "s.json").read_text())) == 3
    assert "out tok/s" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--rate", "4"], "add --serve"),
    (["--serve", "--rate", "0"], "--rate"),
    (["--serve", "--rate", "4", "--batch", "8"], "no --batch"),
])  # fmt: skip
def test_bad_serving_sweeps_are_one_line_errors(args, message, capsys) -> None:
    assert main(["sweep", "llama-3.2-1b", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_sweep_plots_mark_failed_points() -> None:
    from matplotlib.figure import Figure

    from tcp_compiler.sweep.plots import _plot

    ok = {"status": "ok", "concurrency": 2, "ttft_p50_s": 0.5, "chips": 1}
    ax = Figure().add_subplot()
    _plot(ax, [ok, {**ok, "concurrency": 8, "status": "failed", "ttft_p50_s": "", "chips": 3}], "concurrency",
          "ttft_p50_s", ("chips",))  # fmt: skip
    marks = [line for line in ax.get_lines() if line.get_label().startswith("failed")]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [8.0]
