"""`tcpc search --executor ray`, for real: trials costed as Ray tasks on one local Ray with 2 CPUs
give the trials the local executor gives (same seed, same params, same figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray

from tcp_compiler.cli import main
from tcp_compiler.executors import local_executor, ray_executor
from tcp_compiler.search.study import run_search
from tests.test_search import _search, _trials


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """Started once for the module: a Ray start costs seconds."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


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
