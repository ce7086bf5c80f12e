"""`tcpc validate` and its parts: measured-run readers against hostile files, the replay, the
vLLM result format's round trip (serve -> vLLM JSON -> validate gives ratio 1), the CLI end to end,
and `tcpc serve --trace-file` in a closed loop."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.errors import OptionError, RequestFileError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.serve import Request, ServeOptions, serve
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.workload import Workload
from tcp_compiler.validation.measured import read_measured
from tcp_compiler.validation.replay import replay

MODEL = "llama-3.2-1b"
N = 4


def vllm_doc() -> dict:
    """A small, valid vLLM `bench serve --save-result --save-detailed` result."""
    return {
        "backend": "vllm", "model_id": "meta-llama/Llama-3.2-1B", "num_prompts": N, "request_rate": "inf",
        "burstiness": 1.0, "max_concurrency": 2, "duration": 1.0, "completed": N, "failed": 0,
        "total_input_tokens": 64 * N, "total_output_tokens": 8 * N, "output_throughput": 32.0,
        "total_token_throughput": 288.0, "input_lens": [64] * N, "output_lens": [8] * N,
        "ttfts": [0.02] * N, "itls": [[0.01] * 7 for _ in range(N)], "errors": [""] * N,
        "mean_ttft_ms": 20.0, "median_ttft_ms": 20.0, "p99_ttft_ms": 20.0,
    }  # fmt: skip


def write(tmp_path: Path, doc: object, name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def broken(change) -> dict:
    doc = copy.deepcopy(vllm_doc())
    change(doc)
    return doc


def test_a_vllm_result_reads_as_its_figures(tmp_path: Path) -> None:
    run = read_measured(write(tmp_path, vllm_doc()))
    assert run.concurrency == 2 and math.isinf(run.rate) and run.load == "concurrency 2"
    assert run.metrics.ttft.p50 == pytest.approx(0.02)
    assert run.metrics.itl.p99 == pytest.approx(0.01) and run.metrics.tpot.mean == pytest.approx(0.01)
    assert run.metrics.e2e.p50 == pytest.approx(0.02 + 7 * 0.01)
    assert run.metrics.output_tokens_per_s == 32.0  # the file's, measured on its wall clock


HOSTILE = {  # name -> (how the valid result is broken, words the one-line error must hold)
    "not JSON": ("{", "not valid JSON"),
    "an array": ("[1, 2]", "expected a JSON object"),
    "too deep": ("[" * 50 + "]" * 50, "nested deeper"),
    "no ttfts": (lambda d: d.pop("ttfts"), "missing field ttfts"),
    "no itls": (lambda d: d.pop("itls"), "missing field itls"),
    "short output_lens": (lambda d: d["output_lens"].pop(), "output_lens: 3 entries, input_lens has 4"),
    "short itls": (lambda d: d["itls"].pop(), "field itls: expected a list of 4 lists"),
    "negative ttft": (lambda d: d["ttfts"].__setitem__(1, -0.5), "field ttfts[1]: expected 0 to"),
    "NaN ttft": (lambda d: d["ttfts"].__setitem__(2, float("nan")), "field ttfts[2]: expected a number"),
    "huge itl": (lambda d: d["itls"][0].__setitem__(3, 1e300), "field itls[0][3]: expected 0 to"),
    "string ttft": (lambda d: d["ttfts"].__setitem__(0, "0.1"), "field ttfts[0]: expected a number"),
    "bool length": (lambda d: d["input_lens"].__setitem__(0, True), "field input_lens[0]: expected a number"),
    "fractional length": (lambda d: d["output_lens"].__setitem__(0, 2.5), "output_lens[0]: expected an int"),
    "huge length": (lambda d: d["input_lens"].__setitem__(0, 10**30), "field input_lens[0]"),
    "itls not lists": (lambda d: d["itls"].__setitem__(0, 0.1), "field itls[0]: expected a list"),
    "ttfts an object": (lambda d: d.__setitem__("ttfts", {"a": 1}), "field ttfts: expected a list"),
    "zero concurrency": (lambda d: d.__setitem__("max_concurrency", 0), "field max_concurrency: expected 1"),
    "rate a word": (lambda d: d.__setitem__("request_rate", "fast"), "field request_rate: expected a number"),
    "negative throughput": (lambda d: d.__setitem__("output_throughput", -1), "field output_throughput"),
    "every request failed": (lambda d: d.__setitem__("errors", ["timeout"] * N), "no request succeeded"),
    "errors of another length": (lambda d: d.__setitem__("errors", [""]), "errors: expected a list of 4"),
    "no arrays nor totals": (lambda d: [d.pop(k) for k in ("input_lens", "ttfts", "completed")],
                             "missing field completed"),
}  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_vllm_results_are_one_line_errors_naming_the_field(name: str, tmp_path: Path) -> None:
    change, words = HOSTILE[name]
    path = write(tmp_path, change if isinstance(change, str) else broken(change))
    with pytest.raises(RequestFileError) as e:
        read_measured(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path)) and words in message, message


def test_hostile_results_exit_2_with_one_line_and_no_output(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, broken(lambda d: d["ttfts"].__setitem__(1, -1)))
    out = tmp_path / "v.json"
    assert main(["validate", str(path), "--model", MODEL, "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ttfts[1]" in err and not out.exists()


def test_failed_requests_are_left_out_as_vllm_leaves_them(tmp_path: Path) -> None:
    def fail_one(d: dict) -> None:
        d["errors"][0], d["output_lens"][0], d["ttfts"][0], d["itls"][0] = "timeout", 0, 0.0, []

    run = read_measured(write(tmp_path, broken(fail_one)))
    assert len(run.input_tokens) == N - 1 and "1 failed" in run.notes[0]


def test_an_aggregate_result_takes_the_mean_lengths_and_the_files_figures(tmp_path: Path) -> None:
    doc = vllm_doc()
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
        doc.pop(key)
    doc.update(total_input_tokens=4 * 128, total_output_tokens=4 * 4096, median_tpot_ms=25.0, p99_itl_ms=40.0)
    run = read_measured(write(tmp_path, doc))
    assert set(run.input_tokens) == {128} and set(run.output_tokens) == {4096} and len(run.input_tokens) == N
    assert run.metrics.tpot.p50 == 0.025 and run.metrics.itl.p99 == 0.04 and run.metrics.tpot.p90 is None
    assert "mean" in run.notes[0]


TABLE = "input_tokens,output_tokens,ttft_s,tpot_s,arrival_s\n64,8,0.02,0.01,0\n32,1,0.03,0,0.5\n"


@pytest.mark.parametrize(
    "text, words",
    [
        ("input_tokens,output_tokens,ttft_s\n64,8,0.02\n", "header lacks tpot_s"),
        ("input_tokens,output_tokens,ttft_s,tpot_s\n64,8,-1,0.01\n", ":2: field ttft_s: expected 0 to"),
        ("input_tokens,output_tokens,ttft_s,tpot_s\n64,0,0.1,0.01\n", ":2: field output_tokens: expected 1"),
        ("input_tokens,output_tokens,ttft_s,tpot_s\n64,8,0.1\n", ":2: 3 fields, the header has 4"),
        ("input_tokens,output_tokens,ttft_s,tpot_s,latency_s\n64,8,0.1,0.01,0.05\n",
         ":2: field latency_s: expected at least ttft_s"),
        ("input_tokens,output_tokens,ttft_s,tpot_s\n64,8,nan,0.01\n", ":2: field ttft_s: expected a number"),
    ],
)  # fmt: skip
def test_hostile_tables_name_the_line_and_field(text: str, words: str, tmp_path: Path) -> None:
    path = write(tmp_path, text, "run.csv")
    with pytest.raises(RequestFileError, match=None) as e:
        read_measured(path, concurrency=2)
    assert words in str(e.value) and str(e.value).startswith(str(path))


def test_a_jsonl_row_with_a_column_the_first_lacks_is_refused(tmp_path: Path) -> None:
    row = '"input_tokens": 4, "output_tokens": 2, "ttft_s": 0.1, "tpot_s": 0.01'
    rows = ["{" + row + "}", "{" + row + ', "power_w": 150}']
    with pytest.raises(RequestFileError, match=r":2: field power_w given, but not in the first row"):
        read_measured(write(tmp_path, "\n".join(rows), "run.jsonl"), rate=2.0)


def test_a_table_without_arrivals_needs_a_concurrency_or_rate(tmp_path: Path) -> None:
    path = write(tmp_path, "input_tokens,output_tokens,ttft_s,tpot_s\n64,8,0.02,0.01\n", "run.csv")
    with pytest.raises(OptionError, match="give concurrency or rate"):
        read_measured(path)
    assert read_measured(path, concurrency=3).load == "concurrency 3"


def test_a_table_reads_as_its_figures(tmp_path: Path) -> None:
    run = read_measured(write(tmp_path, TABLE, "run.csv"))
    assert run.load == "trace" and list(run.arrival_s) == [0.0, 0.5]
    assert run.metrics.tpot.mean == pytest.approx(0.01)  # the one-token request has no TPOT
    assert run.metrics.e2e.p50 == pytest.approx((0.09 + 0.03) / 2)
    assert run.metrics.output_tokens_per_s == pytest.approx(9 / 0.53)  # first arrival to last end
    assert run.metrics.itl.p50 is None


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def test_token_gaps_sum_to_each_requests_decode_time(setup) -> None:
    cfg, hw, prec = setup
    requests = [Request(i, 0.0, 40 + 10 * i, 3 + 2 * i) for i in range(5)]
    result = serve(cfg, hw, prec, requests, ServeOptions(max_seqs=2), token_gaps=True)
    for seq in result.sequences:
        gaps = np.frombuffer(seq.itl, float)
        assert len(gaps) == seq.request.output_len - 1
        assert gaps.sum() == pytest.approx(seq.finish_s - seq.first_token_s)
    assert not len(serve(cfg, hw, prec, requests).sequences[0].itl)  # recorded only when asked


def test_the_replay_serves_the_same_requests_in_a_closed_loop(setup, tmp_path: Path) -> None:
    cfg, hw, prec = setup
    run = read_measured(write(tmp_path, vllm_doc()))
    done = replay(run, cfg, hw, prec)
    assert done.result.options.concurrency == 2
    assert [s.request.prompt_len for s in done.result.sequences] == [64] * N
    first = sorted(s.first_token_s - s.arrival_s for s in done.result.sequences)
    assert done.metrics.ttft.p50 == pytest.approx(float(np.median(first)))


def test_a_slower_measured_run_gives_ratios_below_one(setup, tmp_path: Path) -> None:
    """The ratio is simulated / measured: a measured TPOT twice the simulated one reads 0.5."""
    cfg, hw, prec = setup
    sim = tmp_path / "sim.json"
    load = ["--requests", "6", "--concurrency", "3", "--prompt-len", "48", "--gen-len", "9"]
    assert main(["serve", MODEL, *load, "--json", str(sim), "--result-format", "vllm"]) == 0
    doc = json.loads(sim.read_text())
    doc["itls"] = [[2 * g for g in gaps] for gaps in doc["itls"]]
    doc["latencies"] = [t + sum(g) for t, g in zip(doc["ttfts"], doc["itls"], strict=True)]
    slow = write(tmp_path, doc, "slow.json")
    out = tmp_path / "v.json"
    assert main(["validate", str(slow), "--model", MODEL, "--json", str(out)]) == 0
    ratios = {f["figure"]: f["ratio"] for f in json.loads(out.read_text())["runs"][0]["figures"]}
    assert ratios["tpot_p50_s"] == pytest.approx(0.5) and ratios["itl_p99_s"] == pytest.approx(0.5)
    assert ratios["ttft_p50_s"] == pytest.approx(1.0)


@pytest.mark.parametrize("load", [["--concurrency", "3"], ["--rate", "40"], ["--rate", "inf"]])
def test_round_trip_serve_vllm_json_validate_gives_ratio_one(load: list[str], tmp_path: Path) -> None:
    sim = tmp_path / "sim.json"
    lengths = ["--requests", "8", "--prompt-len", "uniform:16:96", "--gen-len", "uniform:1:12"]
    assert main(["serve", MODEL, *lengths, *load, "--json", str(sim), "--result-format", "vllm"]) == 0
    doc = json.loads(sim.read_text())
    assert {"input_lens", "output_lens", "ttfts", "itls", "mean_tpot_ms", "p99_itl_ms", "max_concurrency",
            "request_rate", "output_throughput", "ttft_seconds", "per_iteration"} <= set(doc)  # fmt: skip
    out, plots = tmp_path / "v.json", tmp_path / "plots"
    assert main(["validate", str(sim), "--model", MODEL, "--json", str(out), "--plot", str(plots)]) == 0
    report = json.loads(out.read_text())
    ratios = [f["ratio"] for f in report["runs"][0]["figures"] if f["ratio"] is not None]
    assert len(ratios) == 18 and ratios == pytest.approx([1.0] * 18, rel=1e-9)
    assert (plots / "validation.png").stat().st_size > 0


def test_validate_end_to_end_on_a_table(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # the table's labels are not wrapped, whatever the paths' length
    path = write(tmp_path, TABLE, "run.csv")
    other = write(tmp_path, vllm_doc())  # concurrency 2, from the file
    out, plots = tmp_path / "v.json", tmp_path / "plots"
    outputs = ["--json", str(out), "--plot", str(plots)]
    assert main(["validate", str(path), str(other), "--model", MODEL, *outputs]) == 0
    text = capsys.readouterr().out
    assert "TPOT p50" in text and "geometric mean" in text
    report = json.loads(out.read_text())
    assert [r["load"] for r in report["runs"]] == ["concurrency 2", "trace"]  # closed loops first
    assert report["summary"][0]["figure"] == "ttft_mean_s" and report["summary"][0]["runs"] == 2
    assert (plots / "validation.png").exists()


def test_result_format_vllm_needs_json(capsys) -> None:
    assert main(["serve", MODEL, "--requests", "2", "--result-format", "vllm"]) == 2
    assert "--json" in capsys.readouterr().err


def test_a_trace_file_with_a_concurrency_is_a_closed_loop_over_its_lengths(setup, tmp_path: Path) -> None:
    trace = write(tmp_path, "prompt_len,output_len\n40,6\n20,3\n70,5\n30,4\n", "t.csv")
    requests = Workload(trace_file=str(trace), concurrency=2).load()
    assert [(r.prompt_len, r.arrival_s) for r in requests] == [(40, None), (20, None), (70, None), (30, None)]
    cfg, hw, prec = setup
    result = serve(cfg, hw, prec, requests, ServeOptions(concurrency=2))
    lat = latencies(result)
    starts = sorted(s.arrival_s for s in result.sequences)
    assert starts[:2] == [0.0, 0.0] and min(starts[2:]) > 0 and len(lat["e2e"]) == 4
    out = tmp_path / "s.json"
    assert main(["serve", MODEL, "--trace-file", str(trace), "--concurrency", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["run"]["arrivals"] == "closed loop"
    assert main(["serve", MODEL, "--trace-file", str(trace)]) == 2  # open loop: arrival_s needed
    assert main(["serve", MODEL, "--trace-file", str(trace), "--rate", "2"]) == 2
