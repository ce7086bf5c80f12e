"""HBM capacity (issue 30 point 9): one accounting of weights, KV cache and activations, monotone
in batch and prompt; a refusal states its figures and what would fit, each way out tried through
the same accounting; `--prefill-chunk` makes a large batch's prefill fit, never faster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.errors import CapacityError, OptionError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.generation.fit import Asked, ways_out
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation
from tcp_compiler.spec_settings import with_settings

MODEL = "llama-3.2-1b"
SMALL_HBM = 4_000_000_000  # a what-if chip on which llama-3.2-1b's weights (2.5 GB) fit with little beside
PARTS = ("weights", "kv_cache", "activations", "needed")


def small_chip():
    return with_settings(load_hardware("rngd"), [("hbm.capacity_bytes", SMALL_HBM)])


@pytest.mark.parametrize("model", ["llama-3.2-1b", "gemma-3-1b", "gpt2"])
def test_what_a_generation_needs_grows_with_batch_and_prompt(model: str) -> None:
    config, hw, bf16 = load_model(model).config, load_hardware("rngd"), precision("bf16")

    def need(batch: int, prompt: int):
        return Asked(config, hw, bf16, batch, prompt, prompt + 8, 1).need()

    for prompt in (128, 512):
        needs = [need(b, prompt) for b in (1, 16, 64, 128)]
        for part in PARTS:
            got = [getattr(n, part) for n in needs]
            assert got == sorted(got), (prompt, part, got)
        assert needs[-1].needed > needs[0].needed
    for batch in (1, 64):
        needs = [need(batch, p) for p in (64, 256, 768)]  # gpt2 has 1,024 positions
        assert [n.needed for n in needs] == sorted(n.needed for n in needs)


def _refusal(batch: int, prompt: int = 512, **given) -> CapacityError:
    with pytest.raises(CapacityError) as caught:
        simulate_generation(load_model(MODEL).config, small_chip(), precision("bf16"), batch, prompt, 2, 1, 0,
                            advise=True, **given)  # fmt: skip
    return caught.value


def test_a_larger_batch_is_never_said_to_need_less() -> None:
    """At batch 128 the KV cache alone passes the chip: its refusal still counts the activations."""
    smaller, larger = _refusal(64).values, _refusal(128).values
    assert larger["weights"] + larger["kv_cache"] > SMALL_HBM > smaller["weights"] + smaller["kv_cache"]
    assert larger["needed"] >= smaller["needed"] > SMALL_HBM
    for part in ("kv_cache", "activations"):
        assert larger[part] > smaller[part]
    assert larger["batch_fits"] == smaller["batch_fits"] < 64  # the same largest batch, whoever asks
    assert smaller["needed"] == sum(smaller[p] for p in ("weights", "kv_cache", "activations"))


def test_each_way_out_offered_fits_and_none_left_out_would() -> None:
    asked = Asked(load_model(MODEL).config, small_chip(), precision("bf16"), 32, 512, 513, 1)
    assert not asked.fits()
    found = ways_out(asked)
    assert {"batch", "prefill_chunk", "tp"} <= set(found)
    assert replace(asked, batch=found["batch"]).fits() and not replace(asked, batch=found["batch"] + 1).fits()
    assert replace(asked, prefill_batch=found["prefill_chunk"] // 512).fits()
    assert replace(asked, tp=found["tp"]).fits() and not replace(asked, tp=found["tp"] // 2).fits()
    fp8_kv = replace(asked, precision=replace(asked.precision, kv=KV_DTYPES["fp8"]))
    assert ("kv_dtype" in found) == fp8_kv.fits()


def test_the_cli_states_the_figures_and_the_ways_out_as_flags(capsys) -> None:
    args = ["simulate", MODEL, "--batch", "32", "--prompt-len", "512", "--gen-len", "2",
            "--set", f"hbm.capacity_bytes={SMALL_HBM}"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "needs at least" in err and "KV cache" in err and "activations" in err
    assert "'rngd' has 4,000,000,000" in err
    assert "it fits with --batch " in err and "--prefill-chunk " in err and "--tp " in err


def test_a_prefill_chunk_fits_a_refused_run() -> None:
    chunk = ways_out(Asked(load_model(MODEL).config, small_chip(), precision("bf16"), 32, 512, 513, 1))
    sim = simulate_generation(load_model(MODEL).config, small_chip(), precision("bf16"), 32, 512, 2, 1, 0,
                              prefill_chunk=chunk["prefill_chunk"])  # fmt: skip
    report = build_report(sim, top=1)
    assert report.memory.free_bytes >= 0
    assert report.prefill.chunks == 32 * 512 // chunk["prefill_chunk"]


def test_a_chunked_prefill_does_the_same_work_and_is_never_faster() -> None:
    config, hw, bf16 = load_model(MODEL).config, load_hardware("rngd"), precision("bf16")
    whole = build_report(simulate_generation(config, hw, bf16, 8, 128, 2, 1, 0), top=1)
    chunked = build_report(simulate_generation(config, hw, bf16, 8, 128, 2, 1, 0, prefill_chunk=256), top=1)
    assert chunked.prefill.chunks == 4 and whole.prefill.chunks is None
    # the same tokens: the model's math but what each program computes once (the position table)
    assert chunked.prefill.model_flops == pytest.approx(whole.prefill.model_flops, rel=1e-6)
    assert chunked.prefill.cycles >= whole.prefill.cycles and chunked.ttft_seconds >= whole.ttft_seconds
    assert chunked.memory.activations_bytes <= whole.memory.activations_bytes


def test_a_chunk_shorter_than_a_prompt_is_refused_by_name(capsys) -> None:
    with pytest.raises(OptionError, match="prefill_chunk 64 is shorter than the prompt"):
        _refusal(8, 128, prefill_chunk=64)
    assert main(["simulate", MODEL, "--prompt-len", "128", "--gen-len", "2", "--prefill-chunk", "64"]) == 2
    assert "--prefill-chunk 64 is shorter than the prompt (--prompt-len 128)" in capsys.readouterr().err
