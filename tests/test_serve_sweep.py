"""`tcpc sweep --serve`: one serving run per load x chips x dtype, rows as `tcpc serve` reports them;
its workload is tcpc serve's unless told otherwise, its flags and study keys read as tcpc serve's."""

from __future__ import annotations

import csv
import json
import math

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve
from tcp_compiler.serve.workload import DEFAULT_RATE, Workload, lengths, synthetic
from tcp_compiler.sweep.plots import serve_sweep_figures
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


def test_a_serving_sweep_runs_serves_default_workload(tmp_path) -> None:
    out = tmp_path / "s.csv"
    assert main(["sweep", "llama-3.2-1b", "--serve", "--requests", "4", "--csv", str(out)]) == 0
    (row,) = list(csv.DictReader(out.open()))
    work = Workload()
    assert (row["prompt_len"], row["gen_len"]) == (str(work.prompt_len), str(work.gen_len)) != ("2048", "128")
    assert (float(row["rate"]), row["concurrency"], row["status"]) == (DEFAULT_RATE, "", "ok")


def test_a_serving_sweep_takes_serves_length_distributions(tmp_path) -> None:
    out = tmp_path / "s.csv"
    args = ["sweep", "llama-3.2-1b", "--serve", "--concurrency", "2", "--requests", "4", "--jobs", "1",
            "--prompt-len", "uniform:16:64,normal:32:4", "--gen-len", "fixed:4",
            "--csv", str(out)]  # fmt: skip
    assert main(args) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["prompt_len"], r["gen_len"], r["status"]) for r in rows] == [
        ("uniform:16:64", "4", "ok"), ("normal:32:4", "4", "ok")]  # fmt: skip
    point = ServePoint(model="llama-3.2-1b", hw="rngd", chips=1, dtype="bf16", requests=4,
                       prompt_len="uniform:16:64", gen_len="4", rate=None, concurrency=2)  # fmt: skip
    figure = "throughput_output_tokens_per_s"
    assert float(rows[0][figure]) == run_serve_point(point)[figure]


@pytest.mark.parametrize(("args", "message"), [
    (["--prompt-len", "uniform:64:512"], "--prompt-len uniform:64:512: a simulation sweep takes fixed"),
    (["--serve", "--gen-len", "uniform:9:3"], "--gen-len: expected uniform:LO:HI with 1 <= LO <= HI"),
    (["--serve", "--concurrency", "2,0"], "--concurrency: expected an integer from 1"),
    (["--serve", "--rate", "4,-1"], "--rate: expected a number above 0"),
])  # fmt: skip
def test_serve_workload_flags_read_as_tcpc_serve_reads_them(args, message, capsys) -> None:
    assert main(["sweep", "llama-3.2-1b", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_study_file_takes_the_serve_workload_keys(tmp_path) -> None:
    from tcp_compiler.cli.study import read_study

    study = 'model = "llama-3.2-1b"\nserve = true\nprompt_len = ["uniform:16:64", 32]\nrate = [4, inf]\n'
    (tmp_path / "s.toml").write_text(study + "concurrency = 2\nrequests = 8\n")
    grid = read_study(str(tmp_path / "s.toml"))
    assert [str(v) for v in grid.prompt_len] == ["uniform:16:64", "32"]
    assert grid.rate == (4.0, math.inf) and grid.concurrency == (2,) and grid.requests == (8,)
    assert [str(v) for v in grid.lengths()[1]] == [str(Workload().gen_len)]


@pytest.mark.parametrize(("study", "message"), [
    ('prompt_len = ["uniform:64"]\n', "prompt_len: expected N, fixed:N, uniform:LO:HI or normal:MEAN:STD"),
    ("rate = [0]\n", "rate: expected a number above 0"),
])  # fmt: skip
def test_a_bad_serve_key_in_a_study_is_one_line(study, message, tmp_path, capsys) -> None:
    path = tmp_path / "s.toml"
    path.write_text('model = "llama-3.2-1b"\nserve = true\n' + study)
    assert main(["sweep", "--study", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {message}" in err and err.count("\n") == 1


def test_a_serving_sweep_writes_its_plots_with_failed_points_marked(tmp_path, capsys) -> None:
    args = ["sweep", "llama-3.2-1b", "--serve", "--concurrency", "2,4", "--rate", "8", "--requests", "4",
            "--prompt-len", "32", "--gen-len", "4", "--hw", "rngd-4", "--chips", "1,3", "--jobs", "1",
            "--csv", str(tmp_path / "s.csv"), "--plot", str(tmp_path / "p")]  # fmt: skip
    assert main(args) == 0
    assert "serve_vs_rate.png, serve_vs_concurrency.png" in capsys.readouterr().err
    for name in ("serve_vs_rate.png", "serve_vs_concurrency.png"):
        assert (tmp_path / "p" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    figures = serve_sweep_figures(rows, "t")
    fig = figures["serve_vs_concurrency.png"]
    for ax in fig.axes:  # 3 chips do not divide the heads: both of their loads fail
        (marks,) = [line for line in ax.get_lines() if line.get_label().startswith("failed")]
        assert list(marks.get_xdata()) == [2.0, 4.0]
    assert "2 of 4 points failed" in fig.get_supxlabel()


def test_sweep_plots_mark_failed_points() -> None:
    from matplotlib.figure import Figure

    from tcp_compiler.sweep.plots import _plot

    ok = {"status": "ok", "concurrency": 2, "ttft_p50_s": 0.5, "chips": 1}
    ax = Figure().add_subplot()
    rows = [ok, {**ok, "concurrency": 8, "status": "failed", "ttft_p50_s": "", "chips": 3},
            {**ok, "concurrency": 4, "ttft_p50_s": ""}]  # fmt: skip
    _plot(ax, rows, "concurrency", "ttft_p50_s", ("chips",))
    marks = [line for line in ax.get_lines() if line.get_label().startswith("failed")]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [8.0]  # a figure a run lacks is no failure
