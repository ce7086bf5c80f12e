"""`tcpc sweep --executor ray` and `tcpc search --executor ray`, for real: one local Ray with 2 CPUs
for the module, the same rows (and search trials) as the process pool, a failed point kept as a
row. Ray is the `cluster` extra, which CI installs. The Ray tests share this module (one Ray start,
and no test module before it runs with a Ray behind it: test_sweep's process pools broke after one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray

from tcp_compiler.cli import main
from tcp_compiler.executors import local_executor, ray_executor
from tcp_compiler.planner import Context, Space, plan
from tcp_compiler.search.study import run_search
from tcp_compiler.serve.max_rate import searched
from tcp_compiler.serve.workload import Workload, lengths
from tcp_compiler.store import read_rows
from tcp_compiler.sweep import Point, grid, run_sweep
from tests.test_search import _search, _trials

pytestmark = pytest.mark.timeout(300)  # a Ray that cannot schedule a task fails here, not at CI's limit

POINTS = grid(["llama-3.2-1b"], ["rngd"], [1, 3], [1, 2], [32], [2], ["bf16"],
              settings=[("hbm.sustained_bytes_per_cycle", (720, 1440))])  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """Started once for the module: a Ray start costs seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_rows_equal_the_process_pool_rows() -> None:
    on_ray = run_sweep(POINTS, 2, executor=ray_executor())
    assert on_ray == run_sweep(POINTS, 2, executor=local_executor)
    assert [r["status"] for r in on_ray].count("failed") == 4  # 3 chips do not divide the heads
    assert ray.is_initialized()  # a Ray the caller started is left running


def _dies(point: Point) -> dict:
    raise SystemExit("the worker went away")  # not an Exception: Ray reports the task as failed


def test_a_point_whose_task_fails_is_a_row_with_its_error() -> None:
    rows = run_sweep(POINTS[:2], 2, run=_dies, executor=ray_executor())
    assert [r["status"] for r in rows] == ["crashed", "crashed"]
    assert all(r["error"] and r["hash"] for r in rows)


def test_the_cli_sweeps_on_ray_into_a_store(tmp_path: Path) -> None:
    store = tmp_path / "s.parquet"
    args = ["sweep", "llama-3.2-1b", "--prompt-len", "32", "--gen-len", "2", "--batch", "1,2",
            "--executor", "ray", "--store", str(store)]  # fmt: skip
    assert main(args) == 0
    assert sorted(r["batch"] for r in read_rows(store)) == [1, 2]


def test_trials_on_ray_equal_the_local_ones(tmp_path: Path) -> None:
    ran, on_ray_executor = [], ray_executor()

    def recorded(points, jobs, run):  # every trial goes through the Ray executor
        for index, outcome in on_ray_executor(points, jobs, run):
            ran.append(index)
            yield index, outcome

    on_ray = run_search(_search(), tmp_path / "ray", 4, 2, executor=recorded)
    local = run_search(_search(), tmp_path / "local", 4, 2, executor=local_executor)
    assert on_ray.added == 4 and not on_ray.failed and sorted(ran) == [0, 1, 2, 3]
    assert _trials(on_ray.study) == _trials(local.study)
    assert ray.is_initialized()  # a Ray the caller started is left running


def test_the_cli_searches_on_ray(tmp_path: Path) -> None:
    args = ["search", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "2", "--trials", "2",
            "--population", "2", "--dir", str(tmp_path / "s"), "--range", "chip.clock_hz=0.8e9:1.2e9",
            "--executor", "ray", "--json", str(tmp_path / "front.json")]  # fmt: skip
    assert main(args) == 0
    assert json.loads((tmp_path / "front.json").read_text())["front"]


def test_ray_address_needs_the_ray_executor(tmp_path: Path, capsys) -> None:
    args = ["search", "llama-3.2-1b", "--range", "chip.clock_hz=0.8e9:1.2e9", "--dir", str(tmp_path),
            "--ray-address", "auto"]  # fmt: skip
    assert main(args) == 2
    assert "--ray-address applies to --executor ray" in capsys.readouterr().err


def test_a_plan_on_ray_equals_the_process_pool() -> None:
    """`tcpc plan --executor ray`: the same ranking, figure for figure, as the process pool's."""
    short = Workload(prompt_len=lengths("uniform:32:128"), gen_len=lengths("16"))
    work, slo = searched(short, 0.05, 0.009, 50.0)
    context = Context("llama-3.2-1b", "rngd", work, (slo,))
    space = Space(2, fewer_chips=False, max_seqs=(16,), max_batch_tokens=(512,))
    assert plan(context, space, 2, ray_executor()) == plan(context, space, 2, local_executor)
