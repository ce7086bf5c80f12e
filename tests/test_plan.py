"""`tcpc plan`: layouts of up to N chips crossed with precisions and server settings, ranked by
goodput per card under SLOs, each reproducible by its printed `tcpc serve` command."""

from __future__ import annotations

import io
import json
import shlex
from contextlib import redirect_stdout
from dataclasses import replace

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.executors import local_executor
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.planner import (
    FAILED,
    MISSES,
    NO_FIT,
    OK,
    Context,
    Layout,
    Setting,
    Space,
    misfit,
    pareto,
    plan,
    tasks,
)  # fmt: skip
from tcp_compiler.serve.max_rate import searched
from tcp_compiler.serve.workload import Workload, lengths

MODEL = "llama-3.2-1b"
SLOS = ["--slo-ttft", "0.05", "--slo-tpot", "0.009"]
SMALL = ["--max-seqs", "64", "--max-batch-tokens", "2048"]  # one server setting: 4 layouts, 3 tasks
SHORT = ["--prompt-len", "uniform:32:128", "--gen-len", "16", "--slo-percentile", "50"]  # 24 requests a run


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict:
    """One plan of llama-3.2-1b on up to 2 chips, its JSON, plot and printed output."""
    out = tmp_path_factory.mktemp("plan")
    argv = [
        "plan",
        MODEL,
        "--chips",
        "2",
        *SLOS,
        "--json",
        str(out / "plan.json"),
        "--plot",
        str(out / "plots"),
    ]
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(argv) == 0
    return {"doc": json.loads((out / "plan.json").read_text()), "out": printed.getvalue(), "dir": out}


def test_layouts_cover_every_factorisation() -> None:
    assert len(layouts := Space(8, fewer_chips=False).settings()) == 10
    assert {s.layout.chips for s in layouts} == {8} and Setting(
        Layout(2, 2, 2), "bf16", "bf16", 256, 2048
    ) in layouts
    fewer = {s.layout for s in Space(8).settings()}  # 1, 3, 3, 6, 3, 9, 3, 10 layouts of 1..8 chips
    assert len(fewer) == 38 and Layout(1, 1, 3) in fewer and Layout(1, 1, 1) in fewer


def test_lists_cross_and_a_precisions_own_kv_dtype_is_not_repeated() -> None:
    space = Space(1, dtypes=("bf16", "fp8"), kv_dtypes=(None, "bf16", "fp8"), max_seqs=(8, 64),
                  max_batch_tokens=(256,))  # fmt: skip
    found = space.settings()
    kinds = {(s.dtype, s.kv_dtype) for s in found}
    assert kinds == {("bf16", "bf16"), ("bf16", "fp8"), ("fp8", "fp8"), ("fp8", "bf16")}
    assert len(found) == len(kinds) * 2 == len(set(found))
    assert len(tasks(found)) == len(kinds)  # sequences at once share their layout's costs


def test_a_layout_that_does_not_fit_is_pruned_with_its_bytes() -> None:
    """llama-3.1-70b's bf16 weights (141 GB) need more than one card's HBM; on 4 cards they fit."""
    config, hw, prec = load_model("llama-3.1-70b").config, load_hardware("rngd"), precision("bf16")
    work = Workload(requests=4)
    why = misfit(config, hw, prec, Setting(Layout(1, 1, 4), "bf16", "bf16", 64, 2048), work, 1)
    assert why.startswith("needs ") and "GB HBM per chip" in why
    four = Setting(Layout(4, 1, 1), "bf16", "bf16", 64, 2048)
    assert misfit(config, hw.with_chips(4), prec, four, work, 4) == ""


def test_heads_that_do_not_split_are_pruned_not_searched() -> None:
    config, hw, prec = load_model(MODEL).config, load_hardware("rngd", 3), precision("bf16")
    assert "3" in misfit(config, hw, prec, Setting(Layout(3, 1, 1), "bf16", "bf16", 64, 2048), Workload(), 3)


def test_the_best_configurations_command_reproduces_its_goodput(planned, tmp_path) -> None:
    doc = planned["doc"]
    best, line = doc["candidates"][0], doc["commands"][0]
    assert f"1. {line}\n" in planned["out"]
    words = shlex.split(line)
    assert [
        words[words.index(f) + 1] for f in ("--tp", "--pp", "--dp", "--max-seqs", "--max-batch-tokens")
    ] == [str(best[k]) for k in ("tp", "pp", "dp", "max_seqs", "max_batch_tokens")]
    report = tmp_path / "best.json"
    assert main([*words[1:], "--json", str(report)]) == 0
    served = json.loads(report.read_text())
    assert served["goodput"]["requests_per_s"] / served["run"]["chips"] == pytest.approx(
        best["goodput_per_card"], rel=1e-9
    )


def test_cards_split_into_pe_ranks_plan_as_serve_runs_them(tmp_path) -> None:
    """A spec whose cards are split into PE ranks (system.pe_partitions) plans each card as that
    many tensor-parallel ranks, as `tcpc serve --hw` runs it: the printed command reproduces the
    goodput, and it differs from the unsplit card's (the ranks' reductions and DM are modelled)."""
    spec = tmp_path / "split.toml"
    spec.write_text('extends = "rngd"\ndescription = "test"\n'
                    '[system]\npe_partitions = { value = 4, source = "assumed: test" }\n')  # fmt: skip
    per_card = {}
    for hw in ("rngd", str(spec)):
        report = tmp_path / "plan.json"
        argv = ["plan", MODEL, "--hw", hw, "--chips", "1", *SLOS, *SMALL, *SHORT, "--json", str(report)]
        with redirect_stdout(io.StringIO()):
            assert main(argv) == 0
        doc = json.loads(report.read_text())
        best, words = doc["candidates"][0], shlex.split(doc["commands"][0])
        assert best["status"] == OK and words[words.index("--hw") + 1] == hw
        served = tmp_path / "served.json"
        assert main([*words[1:], "--json", str(served)]) == 0
        goodput = json.loads(served.read_text())["goodput"]["requests_per_s"]
        assert goodput == pytest.approx(best["goodput_per_card"], rel=1e-9)
        per_card[hw] = best["goodput_per_card"]
    assert per_card["rngd"] != per_card[str(spec)]


def test_ranked_by_goodput_per_card_with_fewer_chips_in_the_running(planned) -> None:
    rows = planned["doc"]["candidates"]
    ok = [r for r in rows if r["status"] == OK]
    assert len(rows) == 16 and len(ok) == 16  # 4 layouts of 1 or 2 chips x 2 sequences x 2 chunks
    per_card = [r["goodput_per_card"] for r in ok]
    assert per_card == sorted(per_card, reverse=True)
    assert {r["chips"] for r in ok} == {1, 2}
    assert all(0 < r["margin"] <= 0.05 or r["capacity_bound"] for r in ok)
    assert all(r["tpot_s"] <= 0.009 and r["ttft_s"] <= 0.05 for r in ok)
    assert (planned["dir"] / "plots" / "plan.png").stat().st_size > 10_000


def test_replicas_of_one_card_score_per_card_as_one_card(planned) -> None:
    """Each replica serves what a one-replica run does (the requests times dp), so two replicas
    of a card are that card twice: per card, the same goodput up to the router's split."""
    rows = {
        (r["tp"], r["pp"], r["dp"], r["max_seqs"], r["max_batch_tokens"]): r
        for r in planned["doc"]["candidates"]
    }
    for seqs, chunk in ((64, 512), (64, 2048), (256, 512), (256, 2048)):
        one, two = rows[1, 1, 1, seqs, chunk], rows[1, 1, 2, seqs, chunk]
        assert two["requests"] == 2 * one["requests"] == 240
        assert two["goodput_per_card"] == pytest.approx(one["goodput_per_card"], rel=0.1)


def test_all_chips_leaves_fewer_out(capsys, tmp_path) -> None:
    path = tmp_path / "p.json"
    assert (
        main(["plan", MODEL, "--chips", "2", "--all-chips", *SLOS, *SMALL, *SHORT, "--json", str(path)]) == 0
    )
    assert {r["chips"] for r in json.loads(path.read_text())["candidates"]} == {2}


def test_the_plan_is_the_same_on_one_worker_or_a_pool_and_monotone_in_the_slo() -> None:
    work, slo = searched(
        Workload(prompt_len=lengths("uniform:32:128"), gen_len=lengths("16")), 0.05, 0.009, 50.0
    )
    looser = replace(slo, tpot_s=0.02)
    context, space = (
        Context(MODEL, "rngd", work, (slo, looser)),
        Space(2, max_seqs=(16, 64), max_batch_tokens=(512,)),
    )
    one = plan(context, space, 1)
    assert one == plan(context, space, 2, local_executor)
    assert one[0] == plan(replace(context, slos=(slo,)), space, 1)[0]  # each SLO's plan is its own
    rates = [{r.setting: r.rate_per_s for r in ranked} for ranked in one]
    assert all(rates[1][s] >= rates[0][s] for s in rates[0])  # a looser SLO never finds a lower rate


def test_an_slo_no_rate_meets_is_listed_not_an_error(capsys) -> None:
    assert main(["plan", MODEL, "--chips", "1", "--slo-tpot", "0.0001", *SMALL, *SHORT]) == 0
    out = capsys.readouterr().out
    assert MISSES in out and "1 misses the SLOs" in out and "tcpc serve" not in out


def test_a_task_that_raised_fails_each_of_its_candidates(monkeypatch) -> None:
    def dies(points, jobs, run):
        for i, _ in enumerate(points):
            yield i, RuntimeError("worker died")

    work, slo = searched(Workload(), 0.05, 0.009, 90.0)
    (results,) = plan(Context(MODEL, "rngd", work, (slo,)), Space(2, max_seqs=(64,)), 1, dies)
    assert {r.status for r in results} == {FAILED} and all("worker died" in r.why for r in results)
    assert NO_FIT != FAILED


def test_pareto_keeps_the_points_nothing_beats() -> None:
    points = [(1.0, 10.0), (2.0, 20.0), (2.0, 15.0), (3.0, 5.0), (0.5, 1.0), (2.0, 20.0)]
    assert pareto(points) == [4, 0, 1]


@pytest.mark.parametrize("flags", [
    ["--chips", "2"],
    ["--chips", "2", "--slo-ttft", "1", "--rate", "3"],
    ["--chips", "2", "--slo-ttft", "1", "--dtype", "bf17"],
    ["--chips", "2", "--slo-ttft", "1", "--kv-dtype", "fp8,int3"],
    ["--chips", "2", "--slo-ttft", "1", "--max-seqs", "0"],
    ["--chips", "2", "--slo-ttft", "1", "--max-seqs", "64,,8"],
    ["--chips", "2", "--slo-ttft", "1", "--max-batch-tokens", "１２"],
    ["--chips", "0", "--slo-ttft", "1"],
    ["--chips", "2", "--slo-ttft", "1", "--top", "0"],
    ["--chips", "2", "--slo-ttft", "1", "--jobs", "-1"],
    ["--chips", "2", "--slo-ttft", "1", "--ray-address", "x:1"],
    ["--chips", "2", "--slo-ttft", "1", "--slo-percentile", "100"],
    ["--chips", "2", "--slo-ttft", "1", "--json", "/nonexistent/dir/p.json"],
])  # fmt: skip
def test_bad_plan_flags_exit_2(flags, capsys) -> None:
    assert main(["plan", MODEL, *flags]) == 2
    assert capsys.readouterr().err.count("\n") == 1
