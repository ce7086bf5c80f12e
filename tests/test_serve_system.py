"""The serving system's costs beyond the chip (issue 24.1): host work per iteration, static-shape
buckets, paged-KV descriptors and prefix caching, in `tcpc serve` and `tcpc simulate` alike."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.build import build_report
from tcp_compiler.report.serve_build import TIME_PARTS, serve_report
from tcp_compiler.serve import Request, ServeOptions, serve
from tcp_compiler.serve.costs import IterationCosts, kv_descriptors
from tcp_compiler.serve.host import host_work
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.options import Buckets, Shapes, ladder, pad
from tcp_compiler.simulate import simulate_generation

MODEL = "llama-3.2-1b"
EXACT = ServeOptions(buckets=Buckets.exact(), shapes=Shapes.exact())


@pytest.fixture(scope="module")
def setup():
    return load_model(MODEL).config, load_hardware("rngd"), precision("bf16")


def _spec(tmp_path: Path, table: str, **values: float) -> Path:
    path = tmp_path / f"{table}.toml"
    rows = "".join(f'{k} = {{ value = {v!r}, source = "assumed: test" }}\n' for k, v in values.items())
    path.write_text(f'extends = "rngd"\n[{table}]\n{rows}')
    return path


def _requests(n: int, prompt: int, gen: int, prefix: int = 0) -> list[Request]:
    return [Request(i, 0.0, prompt, gen, prefix) for i in range(n)]


def _closed(options: ServeOptions, clients: int) -> ServeOptions:
    return dataclasses.replace(options, concurrency=clients)


def test_a_5_ms_kernel_launch_changes_serve_and_simulate(setup, tmp_path: Path) -> None:
    """`system.kernel_launch_s` is paid once per program: a decode-only iteration runs one."""
    cfg, hw, prec = setup
    slow = load_hardware(str(_spec(tmp_path, "system", kernel_launch_s=5e-3)))
    extra = slow.system.kernel_launch_s - hw.system.kernel_launch_s
    reqs = _requests(2, 64, 6)
    base, launched = (latencies(serve(cfg, h, prec, reqs, EXACT))["tpot"] for h in (hw, slow))
    assert launched == pytest.approx(base + extra, rel=1e-9)
    sims = [build_report(simulate_generation(cfg, h, prec, 1, 64, 4)) for h in (hw, slow)]
    assert sims[1].decode.tpot_seconds_mean == pytest.approx(sims[0].decode.tpot_seconds_mean + extra)
    assert sims[1].ttft_seconds == pytest.approx(sims[0].ttft_seconds + extra)


def test_host_work_has_fixed_and_per_sequence_parts(setup) -> None:
    _, hw, _ = setup
    one, many = host_work(hw, 1, 1, 1, 1), host_work(hw, 64, 64, 64, 1)
    h = hw.host
    assert many.schedule - one.schedule == pytest.approx(63 * h.schedule_per_sequence_s)
    assert many.sample - one.sample == pytest.approx(63 * h.sample_per_sequence_s)
    assert many.prepare - one.prepare == pytest.approx(63 * h.prepare_per_token_s)
    assert one.total == pytest.approx(h.schedule_s + h.prepare_s + h.sample_s + one.launch + 0 * h.sample_s
                                      + h.schedule_per_sequence_s + h.prepare_per_token_s
                                      + h.sample_per_sequence_s)  # fmt: skip


def test_host_plus_device_is_at_least_the_device_and_the_parts_sum(setup) -> None:
    cfg, hw, prec = setup
    result = serve(cfg, hw, prec, _requests(6, 100, 12), _closed(ServeOptions(), 3))
    it = result.iterations
    assert (it.array("duration_s") >= it.array("cycles") / hw.chip.clock_hz * (1 - 1e-12)).all()
    host = sum(it.array(c) for c in ("schedule_s", "prepare_s", "launch_s", "sample_s"))
    assert (host > 0).all()
    t = serve_report(result).time
    assert math.fsum(getattr(t, p) for p in TIME_PARTS) == pytest.approx(t.busy_s, rel=1e-9)
    assert t.busy_s == pytest.approx(it.array("duration_s").sum())


def test_overlapping_the_host_hides_scheduling_but_not_the_device(setup) -> None:
    cfg, hw, prec = setup
    reqs = _requests(4, 64, 16)
    serial = serve(cfg, hw, prec, reqs, _closed(EXACT, 4))
    overlap = serve(cfg, hw, prec, reqs, _closed(dataclasses.replace(EXACT, host_overlap=True), 4))
    s, o = (r.iterations for r in (serial, overlap))
    assert o.array("duration_s").sum() < s.array("duration_s").sum()
    assert (o.array("duration_s") >= o.array("cycles") / hw.chip.clock_hz * (1 - 1e-12)).all()
    assert np.allclose(o.array("sample_s"), s.array("sample_s"))  # sampling stays serial
    assert o.array("schedule_s")[1:].sum() < s.array("schedule_s")[1:].sum()


def test_ladders_pad_up_and_bad_ones_are_refused() -> None:
    assert [pad("pow2", x) for x in (1, 3, 64, 65)] == [1, 4, 64, 128]
    assert [pad("none", x) for x in (3, 65)] == [3, 65]
    assert [pad(ladder("64, 256"), x) for x in (10, 64, 65, 300)] == [64, 64, 256, 300]
    for bad in ("", "pow3", "256,64", "0", "1,1"):
        with pytest.raises(ValueError):
            ladder(bad)


def test_static_shapes_cost_at_least_exact_ones_and_report_the_padding(setup) -> None:
    """Prompts of 100 pad to 128 and 3 sequences to 4: the padded work runs, and is reported."""
    cfg, hw, prec = setup
    reqs = _requests(3, 100, 10)
    exact = serve(cfg, hw, prec, reqs, EXACT)
    shaped = serve(cfg, hw, prec, reqs, dataclasses.replace(EXACT, shapes=Shapes()))
    e, s = exact.iterations, shaped.iterations
    assert s.array("cycles").sum() > e.array("cycles").sum()
    assert s.array("duration_s").sum() > e.array("duration_s").sum()
    assert latencies(shaped)["tpot"].mean() >= latencies(exact)["tpot"].mean()
    t = serve_report(shaped).time
    assert t.padded_tokens >= 3 * (128 - 100) and t.padded_kv_tokens > 0 and t.padding_s > 0
    assert serve_report(exact).time.padding_s == 0 and serve_report(exact).time.padded_tokens == 0


def test_descriptors_are_one_per_block_per_layer_for_k_and_v(setup) -> None:
    cfg, hw, prec = setup
    assert kv_descriptors([16, 17, 1], 16, 3) == 2 * 3 * (1 + 2 + 1)
    layers, prompt, gen = len(cfg.layers), 70, 5
    result = serve(cfg, hw, prec, _requests(1, prompt, gen), EXACT)
    counted = result.iterations.array("kv_descriptors")[1:]
    expected = [2 * layers * math.ceil(n / EXACT.block_size) for n in range(prompt + 1, prompt + gen)]
    assert counted.tolist() == expected


def _decode_costs(cfg, hw, prec, block_size: int) -> IterationCosts:
    return IterationCosts(cfg, hw, prec, CompileOptions(), Buckets.exact(), block_size=block_size)


LENGTHS = [200, 131, 77]  # one decode step's caches


def test_smaller_blocks_read_more_descriptors_and_never_cost_less(setup) -> None:
    """Blocks of 64 and 16 tokens (64 and 16 KB of K or V of a layer here) transfer for longer than
    the engines take to issue them: nothing beyond the compiled step; blocks of 1 KB do not."""
    cfg, hw, prec = setup
    pieces = [_decode_costs(cfg, hw, prec, b).decode(LENGTHS) for b in (64, 16, 4, 1)]
    descriptors = [p.descriptors for p in pieces]
    cycles = [p.cost.cycles for p in pieces]
    assert descriptors[0] < descriptors[1] < descriptors[2] < descriptors[3]
    assert cycles[0] <= cycles[1] <= cycles[2] <= cycles[3] and cycles[0] < cycles[3]
    assert pieces[0].descriptor_cycles == pieces[1].descriptor_cycles == 0
    assert pieces[3].descriptor_cycles > 0


def test_issue_grows_linearly_with_descriptors_when_no_transfer_hides_it(setup, tmp_path) -> None:
    """With an issue time no transfer hides, each extra descriptor adds dma.issue_cycles over the
    engines: the same bytes read in blocks of 16 and of 4 tokens differ by exactly that per descriptor."""
    cfg, _, prec = setup
    slow = load_hardware(str(_spec(tmp_path, "dma", issue_cycles=10**6)))
    big, small = (_decode_costs(cfg, slow, prec, b).decode(LENGTHS) for b in (16, 4))
    per_descriptor = slow.dma.issue_cycles / slow.dma.engines
    assert big.descriptor_cycles > 0
    added = small.descriptor_cycles - big.descriptor_cycles
    assert added == pytest.approx((small.descriptors - big.descriptors) * per_descriptor, rel=1e-12)
    assert small.cost.cycles - big.cost.cycles == pytest.approx(added, rel=1e-12)


def test_a_decode_step_costs_at_least_its_compiled_step(setup, tmp_path) -> None:
    """The descriptors only add: the step's cycles are the compiled step's plus their issue, at any
    block size and issue time (the first start-up is the compiled step's own)."""
    cfg, hw, prec = setup
    slow = load_hardware(str(_spec(tmp_path, "dma", issue_cycles=400)))
    for spec in (hw, slow):
        for block in (16, 1):
            costs = _decode_costs(cfg, spec, prec, block)
            piece = costs.decode(LENGTHS)
            step = costs.exact_decode(len(LENGTHS), costs.kv_length(LENGTHS)).cycles
            assert piece.cost.cycles == pytest.approx(step + piece.descriptor_cycles, rel=1e-12)
            assert piece.cost.cycles >= step


def test_where_the_time_goes_shows_the_descriptors_issue(setup, tmp_path) -> None:
    """The issue time is its own part of the iterations' time, and the parts still sum to it."""
    cfg, _, prec = setup
    slow = load_hardware(str(_spec(tmp_path, "dma", issue_cycles=400)))
    result = serve(cfg, slow, prec, _requests(2, 100, 6), EXACT)
    t = serve_report(result).time
    assert t.descriptor_s > 0
    assert sum(getattr(t, part) for part in TIME_PARTS) == pytest.approx(t.busy_s, rel=1e-12)


def test_a_cached_prefix_cuts_ttft_but_not_decode(setup) -> None:
    """One client at a time: every request after the first finds the prefix cached, prefills only
    the rest of its prompt, and decodes over its whole cache as before."""
    cfg, hw, prec = setup
    reqs = _requests(3, 256, 8, prefix=192)
    plain = serve(cfg, hw, prec, reqs, _closed(EXACT, 1))
    cached = serve(cfg, hw, prec, reqs, _closed(dataclasses.replace(EXACT, prefix_cache=True), 1))
    p, c = latencies(plain), latencies(cached)
    assert c["ttft"][0] == pytest.approx(p["ttft"][0])  # the first computes the prefix
    assert (c["ttft"][1:] < p["ttft"][1:]).all()
    first = [
        r.iterations.array("cycles")[np.flatnonzero(r.iterations.array("prefill_tokens"))]
        for r in (plain, cached)
    ]
    assert (first[1][1:] < first[0][1:]).all()  # 64 of 256 tokens computed, over all 256 keys
    assert c["tpot"] == pytest.approx(p["tpot"], rel=1e-12)
    assert cached.iterations.array("prefill_tokens").sum() == 256 + 2 * (256 - 192)
    assert cached.budget.blocks == plain.budget.blocks
    assert cached.iterations.array("kv_blocks_used").max() == plain.iterations.array("kv_blocks_used").max()


def test_serve_flags(tmp_path: Path, capsys) -> None:
    out = tmp_path / "serve.json"
    args = ["serve", MODEL, "--requests", "3", "--prompt-len", "80", "--gen-len", "4", "--rate", "inf",
            "--prefix-cache", "--shared-prefix", "48", "--host-overlap", "--context-shapes", "128,512",
            "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "where the time goes" in " ".join(capsys.readouterr().out.split())
    assert main(["serve", MODEL, "--batch-shapes", "8,4"]) == 2
    assert "--batch-shapes: expected ascending sizes" in capsys.readouterr().err
