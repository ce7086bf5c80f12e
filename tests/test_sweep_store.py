"""What-ifs and studies: `--set` by spec address, study files sharing the flags' schema, and the
Parquet result store that a rerun (after Ctrl-C too) resumes, computing only the missing points."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tcp_compiler.sweep as sweep
from tcp_compiler.cli import main
from tcp_compiler.executors import local_executor
from tcp_compiler.store import Store, read_rows
from tcp_compiler.sweep import Point, grid, point_hash, run_point, run_sweep

ROOT = Path(__file__).parents[1]
SMALL = ["llama-3.2-1b", "--prompt-len", "32", "--gen-len", "2", "--jobs", "1"]
HBM = "hbm.sustained_bytes_per_cycle"


def test_set_is_the_spec_file_that_changes_the_same_values(tmp_path: Path) -> None:
    run = ["simulate", "llama-3.2-1b", "--prompt-len", "32", "--gen-len", "3"]
    assert main([*run, "--hw", "rngd-2x-hbm", "--json", str(tmp_path / "file.json")]) == 0
    what_if = ["--set", "hbm.peak_bytes_per_cycle=3000", "--set", f"{HBM}=2880"]
    assert main([*run, *what_if, "--json", str(tmp_path / "set.json")]) == 0
    file, by_set = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("file", "set"))
    assert by_set["ttft_seconds"] == file["ttft_seconds"] != 0
    assert by_set["decode"] == file["decode"]
    assert HBM in by_set["hardware"]["assumed"]  # a set value is an assumption the report lists


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", *SMALL, "--set", "hbm.sustained_bytes_per_cyle=720"],
         f"argument --set: hbm.sustained_bytes_per_cyle: no such key (did you mean '{HBM}'?)"),
        (["sweep", *SMALL, "--set", f"{HBM}=720,0"], f"argument --set: {HBM}: expected a number from 0.001"),
        (["sweep", *SMALL, "--set", "chip.clusters=1.5"], "--set: chip.clusters: expected an integer"),
        (["simulate", "--set", f"{HBM}=720,1440"], f"argument --set: {HBM}: expected one value"),
        (["serve", "--set", "hbm"], "argument --set: expected TABLE.KEY=VALUE"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_a_one_line_usage_error(args: list[str], message: str, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_swept_value_is_a_column_and_changes_the_hash() -> None:
    points = grid(["llama-3.2-1b"], ["rngd"], None, [1], [32], [2], ["bf16"], settings=[(HBM, (720, 1440))])
    assert [p.spec for p in points] == [((HBM, 720),), ((HBM, 1440),)]
    slow, fast = (run_point(p) for p in points)
    assert (slow[HBM], fast[HBM]) == (720, 1440)
    assert fast["tpot_seconds_mean"] < slow["tpot_seconds_mean"]
    unset = Point(**{**vars(points[0]), "spec": ()})
    assert point_hash(points[0]) != point_hash(points[1]) != point_hash(unset) != point_hash(points[0])


def test_an_inconsistent_setting_fails_its_point_only() -> None:
    (point,) = grid(["llama-3.2-1b"], ["rngd"], None, [1], [32], [2], ["bf16"], settings=[(HBM, (1600,))])
    row = run_point(point)
    assert row["status"] == "failed" and "exceeds hbm.peak_bytes_per_cycle" in row["error"]


def test_a_point_that_raises_is_a_row_with_its_error() -> None:
    def broken(point: Point) -> dict:
        raise RuntimeError("a bug")

    points = grid(["llama-3.2-1b"], ["rngd"], None, [1, 2], [32], [2], ["bf16"])
    rows = run_sweep(points, 1, run=broken, executor=local_executor)
    assert [r["status"] for r in rows] == ["crashed", "crashed"]
    assert rows[1]["error"] == "RuntimeError: a bug" and rows[1]["batch"] == 2


def test_a_study_file_is_the_same_grid_as_the_flags(tmp_path: Path) -> None:
    flags = ["sweep", *SMALL, "--hw", "rngd,rngd-2", "--set", f"{HBM}=720,1440"]
    assert main([*flags, "--csv", str(tmp_path / "f.csv")]) == 0
    (tmp_path / "study.toml").write_text(
        'model = "llama-3.2-1b"\nhw = ["rngd", "rngd-2"]\nprompt_len = [32]\ngen_len = 2\n'
        f'store = "{tmp_path / "s.parquet"}"\n[set.hbm]\nsustained_bytes_per_cycle = [720, 1440]\n'
    )
    assert main(["sweep", "--study", str(tmp_path / "study.toml"), "--jobs", "1",
                 "--csv", str(tmp_path / "s.csv")]) == 0  # fmt: skip
    assert (tmp_path / "s.csv").read_text() == (tmp_path / "f.csv").read_text()
    assert len(read_rows(tmp_path / "s.parquet")) == 4


@pytest.mark.parametrize(
    ("study", "message"),
    [
        ("batch = [1]\nbatchs = [2]\n", "batchs: no such key (did you mean 'batch'?)"),
        ("batch = [1, 0]\n", "batch: expected integers from 1"),
        ('[set]\n"hbm.nope" = [1]\n', "set: hbm.nope: no such key"),
        ("serve = 1\n", "serve: expected true or false"),
    ],
)
def test_a_bad_study_file_is_one_line_naming_file_and_key(study: str, message: str, tmp_path, capsys) -> None:
    path = tmp_path / "study.toml"
    path.write_text('model = "llama-3.2-1b"\n' + study)
    assert main(["sweep", "--study", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {message}" in err and err.count("\n") == 1


def test_study_and_grid_flags_do_not_mix(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.toml").write_text('model = "llama-3.2-1b"\n')
    assert main(["sweep", "--study", str(tmp_path / "s.toml"), "--batch", "2"]) == 2
    assert "give no MODEL or grid flags" in capsys.readouterr().err


def test_the_store_keeps_every_figure_and_a_rerun_computes_nothing(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "1000")  # the store's path, however long, stays on one line
    store = tmp_path / "s.parquet"
    args = ["sweep", *SMALL, "--batch", "1,2", "--set", f"{HBM}=720,1440", "--store", str(store)]
    assert main(args) == 0
    rows = read_rows(store)
    assert len(rows) == 4 and {r[HBM] for r in rows} == {720, 1440}
    assert all(r["report.prefill.seconds"] == r["ttft_seconds"] for r in rows)  # the typed report's figures
    capsys.readouterr()
    ran: list[Point] = []
    monkeypatch.setattr(sweep, "run_point", lambda p, describe: ran.append(p) or run_point(p, describe))
    assert main([*args, "--csv", str(tmp_path / "again.csv")]) == 0
    assert ran == [] and "4 points already stored, 0 to run" in capsys.readouterr().err
    assert len((tmp_path / "again.csv").read_text().splitlines()) == 5  # the stored rows, exported
    assert main(["sweep", "--show", str(store)]) == 0
    shown = capsys.readouterr().out
    assert f"{store}: 4 points, 0 failed" in shown and f"{HBM}: 720" in shown


def test_an_interrupted_sweep_keeps_its_finished_points(tmp_path: Path, monkeypatch) -> None:
    store = tmp_path / "s.parquet"
    args = ["sweep", *SMALL, "--batch", "1,2,3,4", "--store", str(store)]
    ran: list[int] = []

    def interrupted_after_two(point: Point, describe) -> dict:
        if len(ran) == 2:
            raise KeyboardInterrupt
        ran.append(point.batch)
        return run_point(point, describe)

    monkeypatch.setattr(sweep, "run_point", interrupted_after_two)
    assert main(args) == 130
    assert [r["batch"] for r in read_rows(store)] == [1, 2]
    ran.clear()
    monkeypatch.setattr(sweep, "run_point", lambda p, describe: ran.append(p.batch) or run_point(p, describe))
    assert main(args) == 0
    assert ran == [3, 4] and sorted(r["batch"] for r in read_rows(store)) == [1, 2, 3, 4]


# `tcpc sweep` in a child whose points after the first announce themselves (the file argv[1]) and
# block until interrupted: Ctrl-C always arrives mid-sweep, after exactly one point has finished,
# however fast or loaded the machine is.
BLOCKING_SWEEP = """
import sys, time
from pathlib import Path
import tcp_compiler.sweep as sweep
from tcp_compiler.cli import main
finish, started = sweep.run_point, Path(sys.argv.pop(1))
def run_point(point, describe=str):
    if point.batch > 1:
        started.touch()
        time.sleep(3600)
    return finish(point, describe)
sweep.run_point = run_point
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_to_a_running_sweep_then_a_rerun_computes_only_the_missing_points(tmp_path: Path) -> None:
    store = tmp_path / "s.parquet"
    args = ["sweep", *SMALL, "--batch", "1,2,3,4,5,6,7,8", "--store", str(store)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = tmp_path / "second point started"
    blocking = [sys.executable, "-c", BLOCKING_SWEEP, str(started), *args]
    sweep_run = subprocess.Popen(blocking, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not started.exists() and sweep_run.poll() is None:
        time.sleep(0.05)
    sweep_run.send_signal(signal.SIGINT)
    _, err = sweep_run.communicate(timeout=120)
    assert sweep_run.returncode == 130, err
    assert [r["batch"] for r in read_rows(store)] == [1]
    tcpc = [sys.executable, "-m", "tcp_compiler", *args]
    rerun = subprocess.run(tcpc, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "1 point already stored, 7 to run" in rerun.stderr
    assert "7 rows added, 8 in all" in rerun.stderr
    assert sorted(r["batch"] for r in read_rows(store)) == list(range(1, 9))


def test_a_store_saves_atomically_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    with Store(path) as store:
        store.add({"hash": "a", "status": "ok", "x": 1})
        store.add({"hash": "b", "status": "crashed", "x": 2.5})
    rows = read_rows(path)
    assert [r["x"] for r in rows] == [1.0, 2.5] and Store(path).hashes() == {"a"}  # crashed: run again
    assert [p.name for p in tmp_path.iterdir()] == ["s.parquet"]
