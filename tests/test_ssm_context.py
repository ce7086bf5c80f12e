"""Issue 29 point 4: a pure Mamba model's decode step costs the same at any context (its cache is
a fixed state per sequence) while a transformer's grows with the KV cache it reads, and neither
phase of the Mamba model beats the config-only floor (its memory floor counts the state read and
written per step)."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.serve.options import Shapes
from tcp_compiler.simulate import simulate_generation

SHORT, LONG = 128, 4096


def _report(name: str, prompt_len: int, batch: int = 1, shapes: Shapes | None = None):
    cfg = load_model(name).config
    hw, prec = load_hardware("rngd"), precision("bf16")
    sim = simulate_generation(cfg, hw, prec, batch, prompt_len, 3, shapes=shapes)
    return build_report(sim)


@pytest.fixture(scope="module")
def mamba():
    return {n: _report("mamba-130m", n) for n in (SHORT, LONG)}


def test_mamba_decode_does_not_grow_with_the_context_while_a_transformers_does(mamba) -> None:
    # GPT-2 (124M, 1,024 positions), 16 sequences: at 1,000 tokens their KV cache (590 MB) outweighs
    # the weights; each step reads it whole, so it takes at least the extra bytes at peak HBM longer
    # (exact shapes: the runtime's context buckets would read both caches padded to a power of two)
    gpt2 = {n: _report("gpt2", n, 16, Shapes.exact()) for n in (SHORT, 1000)}
    extra = gpt2[1000].memory.kv_cache_bytes - gpt2[SHORT].memory.kv_cache_bytes
    longer = gpt2[1000].decode.tpot_seconds_mean - gpt2[SHORT].decode.tpot_seconds_mean
    assert mamba[LONG].decode.tpot_seconds_mean == mamba[SHORT].decode.tpot_seconds_mean
    assert mamba[LONG].memory.kv_cache_bytes == mamba[SHORT].memory.kv_cache_bytes
    assert longer >= extra / gpt2[SHORT].hardware.hbm_bytes_per_s > 0


def test_mamba_state_is_counted_per_sequence(mamba) -> None:
    cfg = load_model("mamba-130m").config
    per_layer = cfg.ssm.inner * cfg.ssm.state + cfg.ssm.inner * (cfg.ssm.conv_kernel - 1)
    memory = mamba[SHORT].memory
    assert memory.state_bytes_per_sequence == len(cfg.layers) * per_layer * 2  # bf16
    assert memory.kv_cache_bytes == memory.state_bytes_per_sequence
    assert memory.kv_cache_bytes_per_token == 0


@pytest.mark.parametrize("prompt_len", [SHORT, LONG])
def test_no_mamba_phase_beats_the_config_floor(mamba, prompt_len: int) -> None:
    report = mamba[prompt_len]
    assert report.prefill.seconds >= report.prefill.config_bound_seconds
    assert report.decode.tpot_seconds_mean >= report.decode.config_bound_seconds_mean


def test_no_phase_of_a_tensor_parallel_mamba2_beats_the_config_floor() -> None:
    """Mamba-Codestral-7B over 2 chips: its out_proj all-reduces are the floor's link term."""
    cfg = load_model("mamba-codestral-7b-v0.1").config
    sim = simulate_generation(cfg, load_hardware("rngd-2"), precision("bf16"), 1, 256, 3)
    report = build_report(sim)
    assert report.memory.state_bytes_per_sequence == cfg.state_elements() * 2 // 2  # bf16, half per chip
    assert report.prefill.seconds >= report.prefill.config_bound_seconds
    assert report.decode.tpot_seconds_mean >= report.decode.config_bound_seconds_mean


def test_kv_dtype_is_the_dtype_the_state_is_kept_in() -> None:
    """--kv-dtype fp8 keeps the state and window in fp8: half the bf16 bytes, in the graph, the
    report and the floor's traffic."""
    cfg, hw = load_model("mamba-130m").config, load_hardware("rngd")
    bf16, fp8 = (build_report(simulate_generation(cfg, hw, precision("bf16", kv_dtype=kv), 1, 64, 2))
                 for kv in ("bf16", "fp8"))  # fmt: skip
    assert fp8.memory.state_bytes_per_sequence * 2 == bf16.memory.state_bytes_per_sequence
    assert fp8.memory.kv_cache_bytes * 2 == bf16.memory.kv_cache_bytes
    assert fp8.decode.tpot_seconds_mean >= fp8.decode.config_bound_seconds_mean
