"""The report keeps the model's FLOPs beside what the program executes: equal for plain attention,
fewer executed when online softmax skips the key blocks a causal mask hides."""

from __future__ import annotations

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation


def _prefill(prompt: int):
    cfg = load_model("llama-3.2-1b").config
    sim = simulate_generation(cfg, load_hardware("rngd"), precision("bf16"), 1, prompt, 1)
    return sim, build_report(sim).prefill


def test_plain_attention_executes_the_models_flops() -> None:
    sim, prefill = _prefill(128)
    assert all(a["form"] == "plain" for a in sim.attention)
    assert prefill.flops == prefill.model_flops > 0


def test_online_softmax_skips_masked_blocks() -> None:
    sim, prefill = _prefill(8192)
    assert any(a["form"] != "plain" for a in sim.attention)
    # A causal prompt of many key blocks: about half the score and value work is never done.
    assert prefill.flops < prefill.model_flops
    assert 0 < prefill.model_flops_utilisation < 1
