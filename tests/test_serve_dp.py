"""`tcpc serve --dp R --router NAME`: data-parallel replicas behind a router, each its own server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import Request, ServeOptions, serve, synthetic
from tcp_compiler.serve.workload import lengths

MODEL = "llama-3.2-1b"


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def _closed(n: int) -> list[Request]:
    return synthetic(n, lengths("uniform:16:200"), lengths("uniform:2:40"), None, True, 1)


def test_one_replica_is_todays_server(setup) -> None:
    """With one replica the router has no choice: either router gives the same report, with no
    data-parallel section."""
    cfg, hw, prec = setup
    requests = synthetic(12, lengths("uniform:16:200"), lengths("uniform:2:40"), 20.0, False, 1)
    reports = [serve_report(serve(cfg, hw, prec, requests, ServeOptions(router=name))).to_dict()
               for name in ("round-robin", "least-outstanding")]  # fmt: skip
    assert reports[0] == reports[1]
    assert "data_parallel" not in reports[0]


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding"])
def test_two_replicas_serve_twice_the_clients_at_twice_the_throughput(setup, router) -> None:
    """Replicas share nothing, so 2C clients on two replicas run as C clients on one, twice."""
    cfg, hw, prec = setup
    one = serve(cfg, hw, prec, _closed(64), ServeOptions(concurrency=4))
    two = serve(cfg, hw, prec, _closed(128), ServeOptions(concurrency=8, dp=2, router=router))
    rate = serve_report(two).throughput_output_tokens_per_s
    ratio = rate / serve_report(one).throughput_output_tokens_per_s
    assert ratio == pytest.approx(2.0, abs=0.06)
    assert two.chips == 2 * one.chips
    report = serve_report(two)
    assert report.data_parallel is not None
    rows = report.data_parallel.per_replica
    assert sum(r.requests for r in rows) == 128 and all(r.busy_s > 0 for r in rows)


def _peak_outstanding(result) -> int:
    """The most unfinished requests any one replica held at an arrival."""
    seqs = result.sequences
    peak = 0
    for s in seqs:
        for r in range(len(result.routed)):
            held = sum(1 for o in seqs if o.replica == r and o.arrival_s <= s.arrival_s < o.finish_s)
            peak = max(peak, held)
    return peak


def test_least_outstanding_balances_a_skewed_load_better_than_round_robin(setup) -> None:
    """Long and short requests in turn: round robin sends every long one to the same replica,
    least-outstanding steers new requests away from the one they pile up on."""
    cfg, hw, prec = setup
    requests = [Request(i, i * 0.01, 64, 120 if i % 2 == 0 else 2) for i in range(40)]
    peaks = {name: _peak_outstanding(serve(cfg, hw, prec, requests, ServeOptions(dp=2, router=name)))
             for name in ("round-robin", "least-outstanding")}  # fmt: skip
    assert peaks["least-outstanding"] < peaks["round-robin"]


def test_capacity_is_per_replica(setup) -> None:
    """Each replica holds its own KV cache, as large as one server's; replicas do not pool it, so a
    request one replica cannot hold is refused however many there are."""
    cfg, hw, prec = setup
    requests = _closed(8)
    one = serve(cfg, hw, prec, requests, ServeOptions(concurrency=2))
    four = serve(cfg, hw, prec, requests, ServeOptions(concurrency=2, dp=4))
    assert four.budget == one.budget
    used = four.iterations.array("kv_blocks_used")
    assert used.max() <= one.budget.blocks
    # Room for about 300 tokens of KV per replica: four replicas would pool 1,200, but none holds 500.
    budget = one.budget
    small = hw.with_value(
        "hbm.capacity_bytes", budget.weight_bytes + budget.activation_bytes + 300 * budget.kv_bytes_per_token
    )
    with pytest.raises(TcpcError, match="a request of 500 tokens needs 32 KV blocks"):
        serve(cfg, small, prec, [Request(0, 0.0, 480, 20)], ServeOptions(dp=4))


def test_cli_dp_reports_replicas_and_chips(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    code = main(["serve", MODEL, "--requests", "8", "--rate", "50", "--dp", "2", "--router",
                 "least-outstanding", "--json", str(out)])  # fmt: skip
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["run"]["chips"] == 2 and doc["energy"]["chips"] == 2
    dp = doc["data_parallel"]
    assert dp["replicas"] == 2 and dp["router"] == "least-outstanding" and dp["chips_per_replica"] == 1
    assert sum(r["requests"] for r in dp["per_replica"]) == 8
    assert "2 replicas of 1 chip" in capsys.readouterr().out
    assert np.isfinite(doc["energy"]["joules"])


@pytest.mark.parametrize("flags", [["--dp", "0"], ["--router", "random"]])
def test_bad_dp_flags_exit_2(flags, capsys) -> None:
    assert main(["serve", MODEL, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flags[0] in err
