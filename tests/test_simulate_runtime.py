"""`tcpc simulate` pays the serving runtime's device costs as `tcpc serve` does (issue 24.1): the
padding up to the static shapes and the paged-KV descriptors' issue, from the same functions
(tcp_compiler.serve.static_costs over serve.costs), with the same flags, defaults and errors.

Tolerance of simulate against serve: serve's static scheduler runs exactly simulate's programs (the
batched prefill at batch x prompt, each decode step at the batch's KV length), both padded up to
the same buckets by the same IterationCosts calls, with the same host work per iteration: they
agree to rounding (1e-9). Serve's continuous scheduler runs the B prompts as one flattened row whose
causal mask spans the row, so its prefill charges attention over all B x P tokens: its TTFT is
above simulate's by that attention (under 5 % at these lengths), while its decode steps are the same
(TPOT to 1e-9)."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.serve import Request, ServeOptions, serve
from tcp_compiler.serve.costs import kv_descriptors
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.options import Shapes
from tcp_compiler.simulate import simulate_generation

MODEL = "llama-3.2-1b"
BATCH, PROMPT, GEN = 3, 100, 6  # 3 sequences pad to 4, prompts of 100 to 128, contexts 101..105 to 128


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def _simulate(setup, shapes: Shapes | None = None, prompt: int = PROMPT, **kw):
    cfg, hw, prec = setup
    return build_report(simulate_generation(cfg, hw, prec, BATCH, prompt, GEN, shapes=shapes, **kw))


def _serve(setup, scheduler: str):
    cfg, hw, prec = setup
    requests = [Request(i, 0.0, PROMPT, GEN) for i in range(BATCH)]  # all sent at once, fixed lengths
    options = dataclasses.replace(ServeOptions(), scheduler=scheduler, concurrency=BATCH)
    return latencies(serve(cfg, hw, prec, requests, options))


@pytest.fixture(scope="module")
def shaped(setup):
    return _simulate(setup)


def test_simulate_and_a_static_serve_of_the_same_batch_agree(setup, shaped) -> None:
    got = _serve(setup, "static")
    assert got["ttft"] == pytest.approx(shaped.ttft_seconds, rel=1e-9)
    assert got["tpot"] == pytest.approx(shaped.decode.tpot_seconds_mean, rel=1e-9)
    assert shaped.prefill.padding_seconds > 0 and shaped.decode.padding_seconds > 0


def test_continuous_serve_differs_only_by_its_flattened_prefill_row(setup, shaped) -> None:
    got = _serve(setup, "continuous")
    assert got["tpot"] == pytest.approx(shaped.decode.tpot_seconds_mean, rel=1e-9)
    assert shaped.ttft_seconds <= got["ttft"].mean() <= 1.05 * shaped.ttft_seconds


def test_exact_shapes_remove_the_padding_and_its_line(setup, shaped, capsys) -> None:
    exact = _simulate(setup, Shapes.exact())
    assert exact.prefill.padding_seconds == 0 and exact.prefill.padded_tokens == 0
    assert exact.decode.padding_seconds == 0 and exact.decode.padded_kv_tokens_per_step == 0
    assert "shape_padding" not in {p.cause for p in exact.prefill.limiter.parts + exact.decode.limiter.parts}
    assert "shape_padding" in {p.cause for p in shaped.prefill.limiter.parts}
    # the padding is time added around the same programs: the programs' cycles do not move
    assert exact.prefill.cycles == shaped.prefill.cycles
    added = shaped.prefill.padding_seconds
    assert shaped.ttft_seconds == pytest.approx(exact.ttft_seconds + added, rel=1e-12)
    assert shaped.prefill.padded_tokens == 4 * 128 - BATCH * PROMPT
    assert shaped.decode.padded_sequences == 1
    assert shaped.decode.padded_kv_tokens_per_step == pytest.approx(
        sum(BATCH * (128 - n) for n in range(PROMPT + 1, PROMPT + GEN)) / (GEN - 1))
    args = ["simulate", MODEL, "--batch", str(BATCH), "--prompt-len", str(PROMPT), "--gen-len", str(GEN)]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("shape padding: prefill") for line in lines)
    assert any(line.startswith("KV descriptor issue:") for line in lines)
    none = ["--batch-shapes", "none", "--prefill-shapes", "none", "--context-shapes", "none"]
    assert main([*args, *none]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("shape padding") for line in lines)
    assert any(line.startswith("KV descriptor issue:") for line in lines)


def test_a_prompt_one_past_a_bucket_edge_pays_the_next_bucket(setup) -> None:
    shapes = Shapes("none", "64,128,256", "none")
    edge, past = (_simulate(setup, shapes, prompt) for prompt in (128, 129))
    assert edge.prefill.padding_seconds == 0 and edge.prefill.padded_tokens == 0
    assert past.prefill.padded_tokens == BATCH * (256 - 129)
    assert past.prefill.padding_seconds > 0
    assert past.ttft_seconds > edge.ttft_seconds + past.prefill.padding_seconds * 0.99


def test_descriptors_are_counted_per_block_and_cost_their_issue_beyond_the_transfer(setup, tmp_path) -> None:
    cfg, hw, prec = setup
    base = simulate_generation(cfg, hw, prec, 1, 70, 4, shapes=Shapes.exact(), block_size=1)
    layers = sum(layer.attends for layer in cfg.layers)
    expected = [kv_descriptors([n], 1, layers) for n in range(71, 74)]
    assert base.runtime.decode_descriptors.tolist() == expected
    # one-token blocks (1 KB of K or V: 8 KV heads x 64 x bf16) issued at 4,000 cycles each: the issue
    # outlasts the transfer, and shows
    slow_spec = tmp_path / "slow.toml"
    slow_spec.write_text('extends = "rngd"\n[dma]\n'
                         'issue_cycles = { value = 4000, source = "assumed: test" }\n')
    slow = load_hardware(str(slow_spec))
    costly = simulate_generation(cfg, slow, prec, 1, 70, 4, shapes=Shapes.exact(), block_size=1)
    report = build_report(costly)
    assert report.decode.descriptor_seconds > 0
    assert "kv_descriptor_issue" in {p.cause for p in report.decode.limiter.parts}
    clock = slow.chip.clock_hz
    step = costly.decode_cycles / clock + costly.runtime.decode_descriptor_cycles / clock
    assert report.decode.tpot_seconds_mean > float(step.mean())  # the host's work besides


@pytest.mark.parametrize(
    "flag,value",
    [("--batch-shapes", "8,4"), ("--prefill-shapes", "pow3"), ("--context-shapes", "0"),
     ("--context-shapes", "1,1"), ("--batch-shapes", ""), ("--block-size", "0"), ("--block-size", "x"),
     ("--block-size", "5000")],
)  # fmt: skip
def test_bad_runtime_flags_get_serve_s_one_line_error(flag: str, value: str, capsys) -> None:
    assert main(["serve", MODEL, flag, value]) == 2
    served = capsys.readouterr().err.strip().splitlines()
    assert main(["simulate", MODEL, flag, value]) == 2
    simulated = capsys.readouterr().err.strip().splitlines()
    assert len(simulated) == 1 and "Traceback" not in simulated[0]
    assert flag in simulated[0]
    assert simulated[0].replace("tcpc simulate", "tcpc serve") == served[-1]
