"""`tcpc serve`: the serving loop against tcpc simulate, physics and its schedulers' promises."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import IterationCosts, Request, ServeOptions, serve, synthetic
from tcp_compiler.serve.costs import grid_points
from tcp_compiler.serve.metrics import latencies, model_bound_cycles
from tcp_compiler.serve.options import Buckets, Shapes
from tcp_compiler.serve.workload import lengths
from tcp_compiler.simulate import simulate_generation

MODEL = "llama-3.2-1b"


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def _requests(n: int = 12, seed: int = 1) -> list[Request]:
    return synthetic(n, lengths("uniform:16:200"), lengths("uniform:2:40"), None, False, seed)


def test_one_request_equals_tcpc_simulate(setup) -> None:
    """Exact grids and shapes: the prefill is simulate's prefill and each decode its step at the same
    KV length: its paged-KV descriptors' issue hides under their transfer (16-token blocks of 1 KB
    per position), and their start-ups overlap as the engine's DMA pool overlaps them; the host's
    work is simulate's report's."""
    cfg, hw, prec = setup
    prompt, gen = 96, 12
    options = ServeOptions(buckets=Buckets.exact(), shapes=Shapes.exact())
    result = serve(cfg, hw, prec, [Request(0, 0.0, prompt, gen)], options)
    sim = simulate_generation(cfg, hw, prec, 1, prompt, gen, shapes=Shapes.exact())
    report = build_report(sim)
    lat = latencies(result)
    assert lat["ttft"][0] == pytest.approx(report.ttft_seconds, rel=1e-12)
    assert np.allclose(result.iterations.array("cycles")[1:], sim.decode_cycles, rtol=1e-12)
    assert (result.iterations.array("descriptor_s") == 0).all()
    assert lat["tpot"][0] == pytest.approx(report.decode.tpot_seconds_mean, rel=1e-12)


def test_no_iteration_beats_the_models_bound(setup) -> None:
    cfg, hw, prec = setup
    for name in ("static", "continuous", "chunked"):
        result = serve(cfg, hw, prec, _requests(), ServeOptions(scheduler=name))
        cycles, bound = result.iterations.array("cycles"), model_bound_cycles(result)
        assert (cycles >= bound).all(), name
        tokens = result.iterations.array("decodes") + result.iterations.array("prefill_tokens")
        # No more tokens per second than the bound allows, even with every iteration at its bound.
        ceiling = tokens.sum() / hw.seconds(bound.sum())
        made = serve_report(result)
        assert made.throughput_total_tokens_per_s <= ceiling


def test_no_moe_iteration_beats_the_models_bound() -> None:
    """A MoE floor reads the top-k experts of each layer (every token may pick the same ones), not
    all of them: charged every expert, qwen3-30b-a3b's "bound" was 3.5x its own simulated time."""
    cfg, hw, prec = load_model("qwen3-30b-a3b").config, load_hardware("rngd"), precision("fp8")
    result = serve(cfg, hw, prec, _requests(6), ServeOptions())
    cycles, bound = result.iterations.array("cycles"), model_bound_cycles(result)
    assert (cycles >= bound).all()
    assert serve_report(result).model_bound_ratio >= 1.0


def test_engine_work_is_never_faster_than_peak(setup) -> None:
    """Each iteration's cycles cover its own FLOPs at peak and its HBM bytes at peak bandwidth."""
    cfg, hw, prec = setup
    result = serve(cfg, hw, prec, _requests(), ServeOptions(buckets=Buckets.exact()))
    it = result.iterations
    flops_floor = it.array("flops") / (2 * max(hw.macs_per_cycle(d) for d in ("bf16", "fp8")))
    bytes_floor = it.array("hbm_bytes") / hw.hbm.peak_bytes_per_cycle
    assert (it.array("cycles") >= np.maximum(flops_floor, bytes_floor)).all()


def test_continuous_batching_is_never_slower_than_static(setup) -> None:
    cfg, hw, prec = setup
    requests = _requests(16, seed=3)
    out = {
        name: serve_report(serve(cfg, hw, prec, requests, ServeOptions(scheduler=name, max_seqs=8)))
        for name in ("static", "continuous", "chunked")
    }
    static = out["static"].throughput_output_tokens_per_s
    assert out["continuous"].throughput_output_tokens_per_s >= static
    assert out["chunked"].throughput_output_tokens_per_s >= static


def test_same_input_same_numbers(setup) -> None:
    cfg, hw, prec = setup
    runs = [serve_report(serve(cfg, hw, prec, _requests(), ServeOptions())).to_dict() for _ in range(2)]
    runs[0].pop("cost_cache"), runs[1].pop("cost_cache")
    assert runs[0] == runs[1]


def test_chunked_iterations_keep_the_token_budget(setup) -> None:
    cfg, hw, prec = setup
    result = serve(cfg, hw, prec, _requests(16), ServeOptions(scheduler="chunked", max_batch_tokens=64))
    it = result.iterations
    assert (it.array("decodes") + it.array("prefill_tokens") <= 64).all()
    assert ((it.array("decodes") > 0) & (it.array("prefill_tokens") > 0)).any()  # decodes mix with chunks
    assert len(result.sequences) == 16 and all(s.done for s in result.sequences)


def test_a_full_cache_preempts_by_recompute_and_still_finishes(setup) -> None:
    cfg, hw, prec = setup
    base = serve(cfg, hw, prec, _requests(1), ServeOptions())
    # Room for about 300 tokens of KV beside the weights: 12 requests of up to 240 tokens contend.
    small = hw.with_value(
        "hbm.capacity_bytes",
        base.budget.weight_bytes + base.budget.activation_bytes + 300 * base.budget.kv_bytes_per_token,
    )
    for name in ("continuous", "chunked"):
        result = serve(cfg, small, prec, _requests(), ServeOptions(scheduler=name))
        assert result.preemptions > 0
        assert (result.iterations.array("kv_blocks_used") <= result.budget.blocks).all()
        assert all(s.generated == s.request.output_len for s in result.sequences)


def test_closed_loop_keeps_at_most_c_requests_in_flight(setup) -> None:
    cfg, hw, prec = setup
    requests = synthetic(10, lengths("32"), lengths("8"), None, True, 0)
    result = serve(cfg, hw, prec, requests, ServeOptions(concurrency=3))
    assert max(result.iterations.array("decodes")) <= 3
    arrivals = sorted(s.arrival_s for s in result.sequences)
    assert arrivals[:3] == [0.0] * 3 and arrivals[3] > 0


def test_paged_attention_is_never_slower_than_padded(setup) -> None:
    cfg, hw, prec = setup
    requests = _requests()
    paged, padded = (
        serve_report(serve(cfg, hw, prec, requests, ServeOptions(attention=a, buckets=Buckets.exact())))
        for a in ("paged", "padded")
    )
    assert paged.duration_s <= padded.duration_s


def test_interpolated_costs_lie_between_their_grid_points(setup) -> None:
    cfg, hw, prec = setup
    costs = IterationCosts(cfg, hw, prec, _options(), Buckets(kv=32, batch=4, tokens=64))
    low, high = costs.exact_decode(4, 64).cycles, costs.exact_decode(4, 96).cycles
    assert low < costs.decode_at(4, 80).cycles < high
    assert costs.decode_at(4, 64).cycles == low
    assert grid_points(80, 32) == (64, 96) and grid_points(5, 32) == (4, 8) and grid_points(7, 1) == (7, 7)


def _options():
    from tcp_compiler.pipeline import CompileOptions

    return CompileOptions()


def test_lengths_and_arrivals_are_seeded() -> None:
    a = synthetic(50, lengths("uniform:10:20"), lengths("normal:30:5"), 2.0, False, 7)
    b = synthetic(50, lengths("uniform:10:20"), lengths("normal:30:5"), 2.0, False, 7)
    assert a == b
    assert all(10 <= r.prompt_len <= 20 and r.output_len >= 1 for r in a)
    assert all(x.arrival_s < y.arrival_s for x, y in zip(a, a[1:], strict=False))
    for bad in ("0", "uniform:5:2", "gauss:1:2", "normal:x:1", ""):
        with pytest.raises(ValueError):
            lengths(bad)


HEAD = "arrival_s,prompt_len,output_len\n"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("r.jsonl", '{"arrival_s": 0, "prompt_len": 8, "output_len": 4}\n{"arrival_s": 1, "prompt_len": 8}\n',
         "r.jsonl:2: missing field output_len"),
        ("r.jsonl", '{"arrival_s": -1, "prompt_len": 8, "output_len": 4}\n', "r.jsonl:1: field arrival_s"),
        ("r.jsonl", '{"arrival_s": 0, "prompt_len": 2.5, "output_len": 4}\n', "r.jsonl:1: field prompt_len"),
        ("r.jsonl", "[1, 2]\n", "r.jsonl:1: expected a JSON object"),
        ("r.csv", "arrival_s,prompt_len,output_len\n0,8,4\n0.5,eight,4\n", "r.csv:3: field prompt_len"),
        ("r.csv", "arrival_s,prompt_len\n0,8\n", "r.csv:1: header lacks output_len"),
        ("r.csv", "arrival_s,prompt_len,output_len\n0,8\n", "r.csv:2: 2 fields"),
        # nesting, cell size, numbers too long or out of range, fractions, open quotes, absurd times
        ("r.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "r.jsonl:1: not valid JSON: nested deeper"),
        ("r.jsonl", '{"arrival_s": {"a": [0]}, "prompt_len": 8, "output_len": 4}\n', "r.jsonl:1: not valid"),
        ("r.csv", "arrival_s,prompt_len,output_len\n0," + "1" * 200_000 + ",4\n", "r.csv:2: not valid CSV"),
        ("r.csv", "arrival_s,prompt_len,output_len\n0," + "9" * 5000 + ",4\n", "r.csv:2: field prompt_len"),
        ("r.csv", "arrival_s,prompt_len,output_len\n" + "1" * 400 + ".5,8,4\n", "r.csv:2: field arrival_s"),
        ("r.jsonl", '{"arrival_s": 0, "prompt_len": ' + "9" * 400 + ', "output_len": 4}\n', "prompt_len"),
        ("r.jsonl", '{"arrival_s": 0, "prompt_len": 1e30, "output_len": 4}\n', "prompt_len: expected 1 to"),
        ("r.csv", HEAD + "0,8.5,4\n", "r.csv:2: field prompt_len: expected an integer"),
        ("r.csv", 'arrival_s,prompt_len,output_len\n0,"8,4\n1,8,4\n', "r.csv:2: not valid CSV"),
        ("r.csv", HEAD + "1e300,8,4\n", "arrival_s: expected 0 to 1,000,000 seconds"),
        ("r.jsonl", '{"arrival_s": NaN, "prompt_len": 8, "output_len": 4}\n', "r.jsonl:1: field arrival_s"),
    ],
)  # fmt: skip
def test_bad_request_files_are_one_line_errors(tmp_path, capsys, name, text, message) -> None:
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out.json"
    assert main(["serve", MODEL, "--trace-file", str(path), "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_a_rate_too_low_to_end_is_refused(capsys) -> None:
    assert main(["serve", MODEL, "--rate", "1e-300", "--requests", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--rate 1e-300: 4 requests would arrive over" in err


def test_requests_too_long_are_refused_before_any_lowering(tmp_path, capsys, monkeypatch) -> None:
    """Past the model's positions, or past the KV cache beside the weights: one line, before the
    prefill (whose lowering at a million tokens took minutes) is lowered."""
    import tcp_compiler.serve.server as server

    def no_prefill(*args, **kwargs):
        raise AssertionError("the prefill was lowered")

    monkeypatch.setattr(server, "lower", no_prefill)
    trace = tmp_path / "r.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_len": 1000000, "output_len": 4}\n')
    assert main(["serve", MODEL, "--trace-file", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "passes llama-3.2-1b's 131,072 positions (max_position_embeddings)" in err
    config = json.loads(load_model("llama-3.1-8b").source.read_text())
    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({**config, "max_position_embeddings": 1 << 21}))
    assert main(["serve", str(wide), "--trace-file", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a request of 1,000,004 tokens needs 62,501 KV blocks" in err


@pytest.mark.parametrize(
    "argv",
    [["--rate", "0"], ["--rate", "fast"], ["--prompt-len", "uniform:9:3"], ["--slo-ttft", "-1"],
     ["--rate", "2", "--concurrency", "4"], ["--scheduler", "fifo"], ["--block-size", "0"]],
)  # fmt: skip
def test_bad_flags_exit_2_with_one_line(capsys, argv) -> None:
    assert main(["serve", MODEL, *argv]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_writes_the_documented_json(tmp_path, capsys) -> None:
    trace = tmp_path / "requests.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,40,6\n0.001,20,3\n0.002,70,5\n")
    out = tmp_path / "serve.json"
    code = main(["serve", MODEL, "--trace-file", str(trace), "--json", str(out), "--slo-ttft", "1",
                 "--slo-tpot", "0.5", "--plot", str(tmp_path / "plots")])  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    for key in ("throughput_output_tokens_per_s", "throughput_total_tokens_per_s", "requests_completed",
                "goodput", "kv_blocks_over_time", "preemptions", "per_iteration"):  # fmt: skip
        assert key in report
    for key in ("ttft_seconds", "tpot_seconds", "e2e_seconds"):
        assert set(report[key]) >= {"mean", "p50", "p90", "p99"}
    assert report["requests_completed"] == 3 and report["goodput"]["fraction"] == 1.0
    assert sum(report["per_iteration"]["prefill_tokens"]) == 40 + 20 + 70
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "kv_occupancy.png", "latency_cdf.png", "power.png", "throughput.png"
    ]  # fmt: skip
    assert "output tokens/s" in capsys.readouterr().out


def test_plots_show_kv_blocks_and_batch_in_absolute_units_and_split_the_throughput(setup) -> None:
    """KV occupancy in blocks (GB on the right) above the batch on its own axis; throughput as a
    prefill panel and a decode panel whose areas are the tokens of each."""
    from tcp_compiler.serve.plots import kv_figure, throughput_figure

    cfg, hw, prec = setup
    result = serve(cfg, hw, prec, _requests(), ServeOptions())
    kv, batch = kv_figure(result, "t").axes[:2]
    assert "blocks" in kv.get_ylabel() and batch.get_ylabel() == "sequences per iteration"
    used = result.iterations.array("kv_blocks_used")
    assert list(kv.get_lines()[0].get_ydata()) == list(used)  # blocks themselves, not a fraction
    decodes = result.iterations.array("decodes")
    assert max(line.get_ydata().max() for line in batch.get_lines()) == decodes.max()
    assert any(a.get_ylabel() == "GB per chip" for a in kv_figure(result, "t").axes[0].child_axes)
    prefill, decode = throughput_figure(result, "t").axes
    assert "prefill" in prefill.get_ylabel() and "decode" in decode.get_ylabel()
    for ax, column in ((prefill, "prefill_tokens"), (decode, "decodes")):
        assert f"{int(result.iterations.array(column).sum()):,} tokens" in ax.get_title()
