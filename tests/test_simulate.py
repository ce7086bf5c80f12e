"""`tcpc simulate` and its report: physics, determinism, monotonicity, and the documented keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision
from tcp_compiler.report.build import build_report
from tcp_compiler.report.energy import POWER_WINDOWS
from tcp_compiler.report.types import Report
from tcp_compiler.simulate import simulate_generation

CASES = {
    "llama-3.2-1b bf16": ("llama-3.2-1b", "rngd", PRECISIONS["bf16"], 2),
    "qwen3-30b-a3b fp8": ("qwen3-30b-a3b", "rngd", PRECISIONS["fp8"], 1),
    "gemma-3-1b w4": ("gemma-3-1b", "rngd", precision("w4", 64), 1),
    "llama-3.1-8b on 2 chips": ("llama-3.1-8b", "rngd-2", PRECISIONS["bf16"], 4),
    # the non-Llama layer and position variants (issue 7)
    "gpt2 bf16": ("gpt2", "rngd", PRECISIONS["bf16"], 2),
    "opt-1.3b fp8": ("opt-1.3b", "rngd", PRECISIONS["fp8"], 1),
    "bloom-560m bf16": ("bloom-560m", "rngd", PRECISIONS["bf16"], 1),
    "pythia-1.4b on 2 chips": ("pythia-1.4b", "rngd-2", PRECISIONS["bf16"], 2),
    "falcon-7b bf16": ("falcon-7b", "rngd", PRECISIONS["bf16"], 1),
}


def _report(model: str, hw: str, prec, batch: int, prompt: int = 128, gen: int = 6, hardware=None) -> Report:
    sim = simulate_generation(
        load_model(model).config, hardware or load_hardware(hw), prec, batch, prompt, gen
    )
    return build_report(sim, top=None)


REPORTS = {name: _report(*case) for name, case in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_phase_or_op_beats_its_roofline(name: str) -> None:
    r = REPORTS[name]
    assert r.prefill.seconds >= r.prefill.roofline_seconds
    assert r.decode.tpot_seconds_mean >= r.decode.roofline_seconds_mean
    for phase, ops in r.ops.items():
        for op in ops:
            assert op.seconds >= op.roofline_seconds * (1 - 1e-9), (phase, op.name)
    for phase, layers in r.layers.items():
        for layer in layers:
            assert layer.seconds >= layer.roofline_seconds * (1 - 1e-9), (phase, layer.layer)
    prefill_cycles = r.prefill.cycles
    for u in r.units.prefill:  # no unit is busy longer than the phase lasts
        assert u.busy_cycles <= prefill_cycles and 0 <= u.utilisation <= 1, u


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_has_the_documented_keys(name: str) -> None:
    r = REPORTS[name].to_dict()
    for key in ("model", "hardware", "batch", "prompt_len", "gen_len", "prefill", "decode", "ttft_seconds",
                "throughput_tokens_per_s", "units", "ops", "memory"):  # fmt: skip
        assert key in r
    for key in ("cycles", "seconds", "flops", "hbm_bytes", "roofline_seconds", "bound"):
        assert key in r["prefill"]
    decode_keys = ("steps", "tpot_seconds_mean", "tpot_seconds_first", "tpot_seconds_last")
    decode_keys += ("flops_per_step_mean", "hbm_bytes_per_step_mean", "roofline_seconds_mean", "bound")
    for key in decode_keys:
        assert key in r["decode"]
    assert r["decode"]["steps"] == r["gen_len"] - 1
    assert {u["unit"] for u in r["units"]["decode"]} >= {"tensor_dma", "contraction", "vector", "chip_link"}
    assert r["prefill"]["bound"] in ("compute", "memory", "communication", "overhead")
    json.dumps(r)  # plain JSON


def test_same_input_same_cycles() -> None:
    again = _report(*CASES["llama-3.2-1b bf16"])
    assert json.dumps(again.to_dict(), sort_keys=True) == json.dumps(
        REPORTS["llama-3.2-1b bf16"].to_dict(), sort_keys=True
    )


def test_more_hbm_bandwidth_is_never_slower() -> None:
    fast_hw = load_hardware("rngd-2x-hbm")
    for name in ("llama-3.2-1b bf16", "qwen3-30b-a3b fp8"):
        model, hw, prec, batch = CASES[name]
        fast = _report(model, hw, prec, batch, hardware=fast_hw)
        slow = REPORTS[name]
        assert fast.ttft_seconds <= slow.ttft_seconds
        assert fast.decode.tpot_seconds_mean <= slow.decode.tpot_seconds_mean


def test_a_longer_prompt_is_never_faster() -> None:
    model, hw, prec, batch = CASES["llama-3.2-1b bf16"]
    previous = None
    for prompt in (64, 128, 256, 512):
        r = _report(model, hw, prec, batch, prompt=prompt, gen=3)
        if previous is not None:
            assert r.ttft_seconds >= previous.ttft_seconds
            assert r.decode.tpot_seconds_mean >= previous.decode.tpot_seconds_mean
        previous = r


def test_more_chips_never_need_more_weight_bytes_per_chip() -> None:
    cfg = load_model("llama-3.1-8b").config
    weights = []
    for chips in (1, 2, 4, 8):
        sim = simulate_generation(cfg, load_hardware("rngd" if chips == 1 else f"rngd-{chips}"),
                                  PRECISIONS["bf16"], 1, 64, 2)  # fmt: skip
        weights.append(sim.capacity.weights)
    assert weights == sorted(weights, reverse=True) and weights[-1] < weights[0] / 4
    # Every chip holds 1/N of each weight, the embedding and LM head too (vocab-parallel): only the
    # norms (and RoPE tables) are whole on every chip, well under 1 % of the model.
    for chips, per_chip in zip((2, 4, 8), weights[1:], strict=True):
        assert chips * per_chip < 1.01 * weights[0], chips


def test_decode_steps_grow_with_the_kv_cache() -> None:
    r = REPORTS["llama-3.1-8b on 2 chips"]
    assert r.decode.tpot_seconds_last >= r.decode.tpot_seconds_first
    assert any(u.unit == "chip_link" and u.busy_cycles > 0 for u in r.units.decode)


def test_cli_writes_json_markdown_trace_and_plots(tmp_path: Path, capsys) -> None:
    args = ["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "3"]
    args += ["--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md")]
    args += ["--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p")]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "prefill = TTFT" in out and "decode = mean TPOT" in out and "TPOT first" in out
    assert "on rngd (1 chip)," in out and "chip(s)" not in out
    for name in ("r.json", "r.md", "t.json", "p"):  # each output says where it went, on stderr
        assert f"wrote {tmp_path / name} (" in err
    assert "prefill attention: plain softmax in 16 of 16 layers (scores" in " ".join(out.split())
    assert "- prefill attention: plain softmax in 16 of 16 layers" in (tmp_path / "r.md").read_text()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["model"] == "llama-3.2-1b" and report["decode"]["steps"] == 2
    assert (tmp_path / "r.md").read_text().startswith("# llama-3.2-1b on rngd (1 chip)")
    trace = json.loads((tmp_path / "t.json").read_text())
    for event in trace["traceEvents"]:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(event)
    power = [e["args"]["W"] for e in trace["traceEvents"] if e["name"] == "power (W)"]
    assert len(power) == 3 * POWER_WINDOWS  # the prefill and the 2 traced steps, a value per window each
    assert all(report["energy"]["idle_power_w"] < w for w in power) and len(set(power)) > 3
    assert (tmp_path / "p" / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "p" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "p" / "energy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gen-len", "0"], "argument --gen-len: expected an integer from 1 to 1,048,576, got '0'"),
        (["--batch", "0"], "argument --batch: expected an integer from 1 to 65,536, got '0'"),
        (["--hw", "nope"], "nope"),
        (["--chips", "3"], "do not split over 3 chips"),
        (["--chips", "0"], "argument --chips/--tp: expected an integer from 1 to 1,024, got '0'"),
        (["--hw", "rngd", "--prompt-len", "1000000", "--batch", "2"], "bytes of HBM per chip"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args: list[str], expected: str, capsys) -> None:
    assert main(["simulate", "llama-3.2-1b", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and err.count("\n") == 1 and expected in err, err


@pytest.mark.parametrize("gen", [1, 5])
def test_kv_cache_counts_the_positions_written_and_no_more(gen: int) -> None:
    """The cache after a generation holds prompt + gen - 1 positions (the last token is sampled,
    not written back): bytes per token equal the config's 2 x layers x KV heads x head_dim x 2 B."""
    cfg = load_model("llama-3.1-8b").config
    sim = simulate_generation(cfg, load_hardware("rngd"), PRECISIONS["bf16"], 2, 64, gen)
    report = build_report(sim, top=1)
    per_token = 2 * len(cfg.layers) * cfg.kv_heads * cfg.head_dim * 2
    assert per_token == 131_072
    assert report.memory.kv_cache_bytes_per_token == per_token
    assert report.memory.kv_cache_bytes == per_token * 2 * (64 + gen - 1)


def test_chips_alone_means_that_many_chips_of_the_spec(tmp_path: Path) -> None:
    """`--chips 2` on rngd is rngd-2: every figure equal but the hardware's name."""
    reports = []
    for args in (["--chips", "2"], ["--hw", "rngd-2"]):
        out = tmp_path / f"{args[-1]}.json"
        base = ["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "3"]
        assert main([*base, *args, "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text()))
    for r in reports:
        r["hardware"].pop("name")
        r.pop("provenance")  # the command lines differ
    assert reports[0] == reports[1] and reports[0]["hardware"]["chips"] == 2


def test_default_prompt_fits_the_models_positions_and_says_so(capsys) -> None:
    """gpt2 has 1,024 learned positions: the default prompt shrinks so prompt + gen - 1 fit."""
    assert main(["simulate", "gpt2", "--gen-len", "3", "--top", "1"]) == 0
    out, err = capsys.readouterr()
    assert "prompt 1022 (not 2048): gpt2 has 1,024 positions" in err and "prompt 1022, gen 3" in out


@pytest.mark.parametrize(("prompt", "ok"), [(1022, True), (1023, False)])
def test_a_generation_past_the_learned_positions_is_refused(prompt: int, ok: bool, capsys) -> None:
    code = main(["simulate", "gpt2", "--prompt-len", str(prompt), "--gen-len", "3", "--top", "1"])
    assert code == (0 if ok else 2)
    assert ok or "1025 positions exceed its 1024 learned position embeddings" in capsys.readouterr().err


def test_help_lists_the_bundled_models(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "gpt2" in out and "qwen3-30b-a3b" in out and "llama-3.1-70b" in out


def test_the_non_layer_ops_report_their_own_time_not_the_whole_phase() -> None:
    """Embedding + final norm + LM head sit at both ends of a program: layer -1 is their time (the
    union of its ops' intervals), and the decoder layers together cover the rest."""
    config = load_model("llama-3.2-1b").config
    sim = simulate_generation(config, load_hardware("rngd"), PRECISIONS["bf16"], 1, 128, 3)
    report = build_report(sim, top=1)
    launch, dec = report.prefill.launch_seconds, report.decode
    device = (
        ("prefill", report.prefill.seconds - launch - report.prefill.host_seconds),
        ("decode", dec.tpot_seconds_mean - launch - dec.host_seconds),
    )  # the phases less the host's work around their programs
    for phase, total in device:
        layers = dict(report.layers.items())[phase]
        outside = next(row for row in layers if row.layer == -1)
        assert outside.seconds < 0.25 * total, (phase, outside.seconds, total)
        covered = sum(row.seconds for row in layers)
        assert covered >= total * (1 - 1e-9), phase


def test_each_intensity_says_which_bytes_it_divides_by(capsys) -> None:
    """The column beside HBM is FLOPs per HBM byte (8B prefill down-projection: about 2,048)."""
    config = load_model("llama-3.1-8b").config
    sim = simulate_generation(config, load_hardware("rngd"), PRECISIONS["bf16"], 1, 2048, 1)
    report = build_report(sim, top=None)
    down = next(op for op in report.ops.prefill if op.name == "l0.down")
    assert down.hbm_intensity == pytest.approx(down.flops / down.hbm_bytes)
    assert down.intensity == pytest.approx(down.flops / (down.hbm_bytes + down.dm_bytes))
    assert 2000 < down.hbm_intensity < 2100
