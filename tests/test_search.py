"""tcpc search: seeded, resumable from its folder, a front no feasible trial dominates, and ranges
checked against the spec's declarations before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.targets.rngd.spec import Hardware
from tcp_compiler.cli import main
from tcp_compiler.errors import OptionError
from tcp_compiler.search.front import dominates, feasible, pareto_front
from tcp_compiler.search.goals import parse_constraint, parse_objective
from tcp_compiler.search.space import parse_range
from tcp_compiler.search.study import Search, run_search
from tcp_compiler.search.trials import Workload

WORKLOAD = Workload("llama-3.2-1b", "rngd", 1, 64, 2, "bf16")


def _search(seed: int = 3, constraints: tuple[str, ...] = ()) -> Search:
    ranges = (
        parse_range("hbm.sustained_bytes_per_cycle=300:1500:log", Hardware),
        parse_range("memory.dm_bytes_per_slice=131072:1048576", Hardware),
    )
    objectives = (parse_objective("tokens_per_s_per_chip:max"), parse_objective("hardware.area_mm2:min"))
    return Search(WORKLOAD, ranges, objectives, tuple(parse_constraint(c) for c in constraints), seed=seed,
                  population=4)  # fmt: skip


def _trials(study) -> list[tuple]:
    return [(t.number, tuple(sorted(t.params.items())), tuple(t.values or ())) for t in study.trials]


def test_same_seed_same_trials(tmp_path: Path) -> None:
    a = run_search(_search(), tmp_path / "a", 6, 1).study
    b = run_search(_search(), tmp_path / "b", 6, 1).study
    assert _trials(a) == _trials(b)
    other = run_search(_search(seed=4), tmp_path / "c", 6, 1).study
    assert _trials(other) != _trials(a)


def test_a_search_resumes_from_its_folder(tmp_path: Path) -> None:
    first = _trials(run_search(_search(), tmp_path, 4, 1).study)
    resumed = run_search(_search(), tmp_path, 7, 1)
    assert resumed.added == 3 and _trials(resumed.study)[:4] == first
    again = run_search(_search(), tmp_path, 7, 1)
    assert again.added == 0 and len(again.study.trials) == 7
    # the params drawn after the resume are new ones, not the seed's first draws again
    params = [t[1] for t in _trials(again.study)]
    assert len(set(params)) == len(params)


def test_a_folder_holds_one_search(tmp_path: Path) -> None:
    run_search(_search(), tmp_path, 2, 1)
    with pytest.raises(OptionError, match="holds another search"):
        run_search(_search(seed=9), tmp_path, 2, 1)


def test_the_front_is_the_feasible_non_dominated_trials(tmp_path: Path) -> None:
    search = _search(constraints=("hardware.area_mm2<=650",))
    study = run_search(search, tmp_path, 12, 1).study
    ok = feasible(study)
    assert 0 < len(ok) < len(study.trials)  # the constraint excludes some trials
    front = pareto_front(search, ok)
    assert front

    def better(a, b) -> bool:  # tokens/s up, area down; written out here, not front.dominates
        (ta, aa), (tb, ab) = a.values, b.values
        return ta >= tb and aa <= ab and (ta > tb or aa < ab)

    for t in front:
        assert not any(better(o, t) for o in ok)
    for t in ok:
        if t not in front:
            assert any(better(f, t) or f.values == t.values for f in front)
    assert dominates((2.0, 1.0), (1.0, 1.0), (1, -1)) and not dominates((2.0, 2.0), (1.0, 1.0), (1, -1))


def test_cli_prints_the_front_with_commands_that_reproduce_each_hash(tmp_path: Path, capsys) -> None:
    args = ["search", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "2", "--trials", "4",
            "--population", "4", "--jobs", "1", "--dir", str(tmp_path / "s"),
            "--range", "chip.clock_hz=0.8e9:1.2e9", "--json", str(tmp_path / "front.json"),
            "--plot", str(tmp_path / "front.png")]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    front = json.loads((tmp_path / "front.json").read_text())["front"]
    assert front and (tmp_path / "front.png").stat().st_size > 0
    for row in front:
        assert row["hash"] in out and "tcpc simulate llama-3.2-1b" in row["command"]
        assert f"--set chip.clock_hz={row['chip.clock_hz']!r}" in row["command"]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("hbm.bandwidth=1:2", "--range hbm.bandwidth=1:2: hbm.bandwidth: no such key"),
        ("chip.clock_hz=2e9:1e9", "--range chip.clock_hz=2e9:1e9: LO must be below HI"),
        ("chip.clock_hz=1e9:1e12", "--range chip.clock_hz=1e9:1e12: chip.clock_hz: expected a number from"),
        ("chip.lanes_per_slice=4:8.5", "--range chip.lanes_per_slice=4:8.5: expected an integer"),
        ("chip.clock_hz=1e9", "--range chip.clock_hz=1e9: expected TABLE.KEY=LO:HI"),
        ("chip.clock_hz=1e9:2e9:ln", "--range chip.clock_hz=1e9:2e9:ln: expected TABLE.KEY=LO:HI"),
        ("dma.startup_cycles=0:10:log", "dma.startup_cycles: expected an integer from 1"),
    ],
)
def test_bad_ranges_are_refused_before_any_work(flag: str, expected: str, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "never"
    assert main(["search", "llama-3.2-1b", "--range", flag, "--dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not folder.exists()


def test_objectives_name_report_figures(tmp_path: Path, capsys) -> None:
    args = [
        "search",
        "llama-3.2-1b",
        "--prompt-len",
        "64",
        "--gen-len",
        "2",
        "--trials",
        "1",
        "--jobs",
        "1",
        "--dir",
        str(tmp_path),
        "--range",
        "chip.clock_hz=0.8e9:1.2e9",
        "--objective",
        "ttft_secs:min",
    ]
    assert main(args) == 2
    assert (
        "--objective ttft_secs: the report has no such figure (did you mean 'ttft_seconds'?)"
        in capsys.readouterr().err
    )
