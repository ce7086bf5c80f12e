"""The config floor's fast paths give the same floats, to the bit, as the floor's definition: the
original per-call `phase_bound` (kept here as the reference), on every bundled model, several
precisions, chip counts, pipeline depths, batches and lengths; and the report's decode mean is the
same sum, in the same order, as one `phase_bound` per step."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.analysis.config_floor import (
    PhaseBound,
    _attended,
    _attention_flops,
    _head_operand,
    _indexers,
    _kept,
    _weights_by_operand,
    decode_bound_seconds,
    head_bytes,
    kv_elements_per_token,
    matmul_weight_bytes,
    phase_bound,
    visible_keys,
)
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import precision


def _reference(cfg, precision, hw, chips, batch, phase, length, pp=1) -> PhaseBound:
    """phase_bound as it was written before its length-independent parts were hoisted out."""
    queries = length if phase == "prefill" else 1
    tokens = batch * queries
    # Each operand at its own dtype's peak: projections, the head, attention (in the KV dtype).
    flops = {d: 2.0 * n * tokens for d, n in _weights_by_operand(cfg, precision).items()}
    head = _head_operand(cfg, precision)
    flops[head] = flops.get(head, 0.0) + 2.0 * cfg.hidden * cfg.vocab * batch
    # Mamba layers have no KV; DeciLM skips or replaces some layers' attention
    attending = [layer for layer in cfg.layers if layer.attends]
    # a layer's keys: its window's or chunk's, or under sparse attention at most index_topk per query
    attention = sum(_attention_flops(cfg, _attended(cfg, w), batch, queries, length) for w in attending)
    flops[precision.kv] = flops.get(precision.kv, 0.0) + attention
    weight_bytes = matmul_weight_bytes(cfg, precision) + head_bytes(cfg, precision)
    kv_bytes = sum(batch * _kept(_attended(cfg, layer), length) * _kv_token(cfg, layer, precision)
                   for layer in attending)  # fmt: skip
    indexers, per_key, key_bytes = _indexers(cfg, precision, batch)
    if indexers:  # sparse attention's indexers score every key a query sees and read their key cache
        flops[precision.kv] += indexers * per_key * visible_keys(None, length - queries, queries)
        kv_bytes += indexers * batch * length * key_bytes
    if cfg.ssm is not None:  # every Mamba layer's state: written by prefill, read and written by decode
        kv_bytes += (1 if phase == "prefill" else 2) * batch * cfg.state_elements() * precision.kv.bits / 8
    kv_split = 1 if cfg.mla is not None else chips
    link_bytes = 0.0
    hidden = tokens * cfg.hidden * precision.collective.bits / 8
    if chips > 1:
        # one all-reduce per parallel block, else one per mixer a layer runs (its attention, unless
        # DeciLM skips or replaces it, or a recurrent mixer's out_proj) and one per MLP it keeps
        # (pure Mamba blocks and Nemotron-H's mixer blocks have none), two more for a Zamba2 layer's
        # shared block (its attention and its MLP)
        once = cfg.residual.block == "parallel"
        kept = [(layer.mixer != "attention" or layer.attention == "standard") + (layer.ffn == "standard")
                + 2 * (layer.shared is not None) for layer in cfg.layers]  # fmt: skip
        reduces = len(cfg.layers) if once else sum(kept)
        link_bytes = reduces / pp * 2 * (chips - 1) / chips * hidden
    link_bytes += hidden if pp > 1 else 0.0
    everywhere = chips * pp
    return PhaseBound(
        compute_seconds=sum(f / everywhere / hw.flops_per_second(d.name) for d, f in flops.items()),
        memory_seconds=(weight_bytes / everywhere + kv_bytes / kv_split / pp) / hw.hbm_peak_bytes_per_second,
        link_seconds=link_bytes / hw.system.link_bytes_per_s,
    )


def _kv_token(cfg, layer, precision) -> float:
    return kv_elements_per_token(cfg, layer) * precision.kv.bits / 8


def _bits(b: PhaseBound) -> tuple[str, ...]:
    return (b.compute_seconds.hex(), b.memory_seconds.hex(), b.link_seconds.hex(), b.seconds.hex())


HW = load_hardware("rngd")
LENGTHS = [1, 2, 3, 7, 64, 65, 511, 4095, 4096, 4097, 8192, 131_073]


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "w4", "mxfp4"])
@pytest.mark.parametrize("name", bundled_models())
def test_phase_bound_is_the_reference_to_the_bit(name: str, dtype: str) -> None:
    cfg, p = load_model(name).config, precision(dtype)
    for chips, pp, batch in [(1, 1, 1), (2, 1, 3), (4, 2, 1), (8, 4, 16), (3, 3, 5)]:
        for phase in ("prefill", "decode"):
            for n in LENGTHS:
                want = _reference(cfg, p, HW, chips, batch, phase, n, pp)
                assert _bits(phase_bound(cfg, p, HW, chips, batch, phase, n, pp)) == _bits(want)
        lengths = range(2040, 2100)
        got = decode_bound_seconds(cfg, p, HW, chips, batch, lengths, pp)
        want = [_reference(cfg, p, HW, chips, batch, "decode", n, pp).seconds for n in lengths]
        assert [x.hex() for x in got] == [x.hex() for x in want]


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-1b", "gpt-oss-20b", "deepseek-v3"])
def test_report_decode_mean_is_the_per_step_mean(name: str) -> None:
    """The report's mean (tcp_compiler.report.build._decode_config_bound) over 2,048 steps, as the
    report computed it before: one phase_bound per step, plus the launch, summed in step order."""
    from types import SimpleNamespace

    from tcp_compiler.report.build import _decode_config_bound

    cfg, p = load_model(name).config, precision("bf16")
    for chips, pp, batch, prompt in [(1, 1, 1, 2048), (4, 2, 8, 100)]:
        sim = SimpleNamespace(config=cfg, precision=p, hardware=HW, chips=chips, batch=batch, stages=pp,
                              prompt_len=prompt)  # fmt: skip
        steps = 2048
        launch = HW.system.kernel_launch_s
        want = sum(
            _reference(cfg, p, HW, chips, batch, "decode", prompt + t + 1, pp).seconds + launch
            for t in range(steps)
        ) / steps
        assert _decode_config_bound(sim, steps).hex() == want.hex()
