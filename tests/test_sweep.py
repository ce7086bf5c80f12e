"""`tcpc sweep`: a grid of simulations, one reproducible row per point, failures kept in their rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tcp_compiler.cli import main
from tcp_compiler.sweep import COLUMNS, grid, point_hash, run_point, run_sweep


def test_grid_order_and_row_contents() -> None:
    points = grid(["llama-3.2-1b"], ["rngd-2"], [1, 2], [1, 4], [64], [3], ["bf16"])
    assert [(p.chips, p.batch) for p in points] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    rows = run_sweep(points, jobs=1)
    assert [r["batch"] for r in rows] == [1, 4, 1, 4] and all(r["status"] == "ok" for r in rows)
    assert all(tuple(r)[: len(COLUMNS)] == COLUMNS for r in rows)
    # then every figure of the typed report, by its dotted name
    assert rows[0]["report.prefill.seconds"] == rows[0]["ttft_seconds"]
    assert rows[0]["report.memory.free_bytes"] == rows[0]["free_bytes"]
    # More sequences per batch give more tokens per second; a second chip shortens TPOT.
    assert rows[1]["throughput_tokens_per_s"] > rows[0]["throughput_tokens_per_s"]
    assert rows[2]["tpot_seconds_mean"] < rows[0]["tpot_seconds_mean"]


def test_parallel_rows_equal_serial_rows() -> None:
    points = grid(["llama-3.2-1b"], ["rngd"], [1], [1, 2, 8], [32, 64], [2], ["bf16", "fp8"])
    assert run_sweep(points, jobs=2) == run_sweep(points, jobs=1)


def test_hash_names_model_hardware_and_options(tmp_path: Path) -> None:
    (p,) = grid(["llama-3.2-1b"], ["rngd"], [1], [1], [64], [2], ["bf16"])
    (q,) = grid(["llama-3.2-1b"], ["rngd"], [1], [2], [64], [2], ["bf16"])
    (r,) = grid(["llama-3.2-1b"], ["rngd-2"], [1], [1], [64], [2], ["bf16"])
    assert point_hash(p) == point_hash(p)
    assert len({point_hash(p), point_hash(q), point_hash(r)}) == 3


def test_a_failing_point_reports_in_its_row() -> None:
    (bad,) = grid(["llama-3.2-1b"], ["rngd-4"], [3], [1], [64], [2], ["bf16"])
    row = run_point(bad)
    assert row["status"] == "failed" and "do not split over 3 chips" in row["error"]
    assert row["ttft_seconds"] == ""


def test_cli_writes_csv_json_and_plots(tmp_path: Path, capsys) -> None:
    args = [
        "sweep",
        "llama-3.2-1b",
        "--batch",
        "1,4",
        "--prompt-len",
        "32,64",
        "--gen-len",
        "2",
        "--jobs",
        "2",
    ]
    args += ["--chips", "1,3", "--hw", "rngd-4"]
    args += [
        "--csv",
        str(tmp_path / "s.csv"),
        "--json",
        str(tmp_path / "s.json"),
        "--plot",
        str(tmp_path / "p"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "sweep: 8 points" in out and "failed" in out
    with open(tmp_path / "s.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and tuple(rows[0]) == COLUMNS
    assert sum(r["status"] == "failed" for r in rows) == 4  # 3 chips do not divide the heads
    assert json.loads((tmp_path / "s.json").read_text())[0]["hash"] == rows[0]["hash"]
    for name in ("throughput_vs_batch.png", "latency_vs_prompt.png"):
        assert (tmp_path / "p" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_lists_are_usage_errors(capsys) -> None:
    try:
        main(["sweep", "llama-3.2-1b", "--batch", "1,x"])
    except SystemExit as e:
        assert e.code == 2
    assert "--batch: expected comma-separated integers" in capsys.readouterr().err


def test_a_sweep_over_chips_on_the_one_chip_spec_runs_each_count() -> None:
    rows = [run_point(p) for p in grid(["llama-3.2-1b"], ["rngd"], [1, 2], [1], [32], [2], ["bf16"])]
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["error"] for r in rows]
    assert rows[1]["weights_bytes"] < rows[0]["weights_bytes"]
