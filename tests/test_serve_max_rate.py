"""`tcpc serve --max-rate`: the highest Poisson rate whose latency percentiles meet the SLOs."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.serve import ServeOptions, serve
from tcp_compiler.serve.max_rate import Slo, max_rate, measured_requests, warmup_requests
from tcp_compiler.serve.server import serving_costs
from tcp_compiler.serve.workload import Workload, lengths

MODEL = "llama-3.2-1b"
WORK = Workload(requests=60, prompt_len=lengths("uniform:64:256"), gen_len=lengths("uniform:16:64"), seed=3)


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def _served(setup, shared: bool = True):
    cfg, hw, prec = setup
    costs = serving_costs(cfg, hw, prec, CompileOptions(), ServeOptions(), 1) if shared else None

    def at(rate: float | None):
        requests = dataclasses.replace(WORK, rate=rate or math.inf).load()
        return serve(cfg, hw, prec, requests, ServeOptions(), costs=costs)

    return at


def test_requests_cover_the_percentiles_tail() -> None:
    assert [measured_requests(p) for p in (50, 90, 99)] == [20, 100, 1000]
    assert warmup_requests(100) == 20


def test_the_found_rate_passes_and_the_bracket_top_fails(setup) -> None:
    slo = Slo(0.05, 0.009, 90.0, warmup=10)
    found = max_rate(_served(setup), slo)
    assert found.simulations >= 3 and 0 < found.margin <= 0.05
    fresh = _served(setup, shared=False)  # a new server, no costs kept from the search
    again = slo.tails(fresh(found.best.rate))
    assert again == (found.best.ttft_s, found.best.tpot_s) and slo.excess(*again) <= 1
    assert slo.excess(*slo.tails(fresh(found.best.rate * (1 + found.margin)))) > 1


def test_a_looser_slo_never_finds_a_lower_rate(setup) -> None:
    rates = [max_rate(_served(setup), Slo(None, tpot, 90.0, warmup=10)).best.rate for tpot in (0.007, 0.0095)]
    assert rates[0] < rates[1]


def test_cli_reports_the_rate_and_its_bracket(tmp_path, capsys) -> None:
    out = tmp_path / "m.json"
    code = main(["serve", MODEL, "--max-rate", "--slo-ttft", "0.05", "--slo-tpot", "0.009",
                 "--slo-percentile", "80", "--gen-len", "uniform:16:64", "--json", str(out)])  # fmt: skip
    assert code == 0
    doc = json.loads(out.read_text())
    m = doc["max_rate"]
    assert m["requests"] == 64 + 13 and m["warmup_requests"] == 13 and m["percentile"] == 80
    assert m["rate_per_s"] * (1 + m["margin"]) == pytest.approx(m["failing_rate_per_s"])
    assert doc["run"]["rate_per_s"] == m["rate_per_s"] and m["ttft_s"] <= 0.05 and m["tpot_s"] <= 0.009
    assert "highest rate meeting the SLOs" in capsys.readouterr().out


def test_an_impossible_slo_is_one_line(capsys) -> None:
    assert main(["serve", MODEL, "--max-rate", "--slo-ttft", "0.001", "--requests", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "even the lowest rate tried" in err and "x --slo-ttft 0.001 s" in err


@pytest.mark.parametrize(
    "flags, names",
    [
        (["--max-rate", "--slo-ttft", "0"], "--slo-ttft"),
        (["--max-rate", "--slo-tpot", "-1"], "--slo-tpot"),
        (["--max-rate", "--slo-ttft", "1", "--slo-percentile", "100"], "--slo-percentile"),
        (["--max-rate", "--slo-ttft", "1", "--slo-percentile", "0"], "--slo-percentile"),
        (["--max-rate", "--slo-ttft", "1", "--slo-percentile", "p90"], "--slo-percentile"),
        (["--max-rate"], "--slo-ttft"),
        (["--max-rate", "--slo-ttft", "1", "--rate", "4"], "--rate"),
        (["--max-rate", "--slo-ttft", "1", "--slo-percentile", "99.999"], "--slo-percentile"),
    ],
)
def test_bad_search_flags_exit_2(flags, names, capsys) -> None:
    assert main(["serve", MODEL, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err


def test_a_loose_slo_is_bound_by_the_servers_capacity(setup) -> None:
    """Past the rate the server completes requests at with all of them waiting, a long run's queue
    grows without bound: the search stops there, whatever a short sample's percentiles say."""
    found = max_rate(_served(setup), Slo(None, 10.0, 90.0, warmup=10))
    assert found.capacity_bound and found.simulations == 2
    burst = _served(setup)(None)
    assert found.best.rate == pytest.approx(len(burst.sequences) / max(s.finish_s for s in burst.sequences))
