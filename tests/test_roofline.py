"""The roofline has one home (tcp_compiler.analysis.roofline): every bound simulate, serve and the
sweeps report is its computation on the same inputs, and serve's model bound reads HBM at its
sustained bandwidth, as the simulator moves bytes (it read the published peak before)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_hardware
from tcp_compiler.analysis.config_floor import head_bytes, matmul_weight_bytes, matmul_weights, phase_bound
from tcp_compiler.analysis.roofline import Roofline, bound
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.serve import ServeOptions, serve, synthetic
from tcp_compiler.serve.metrics import model_bound_cycles
from tcp_compiler.serve.workload import lengths
from tcp_compiler.simulate import simulate_generation
from tcp_compiler.sweep import Point, run_point

ROOT = Path(__file__).parents[1]
HW = load_hardware("rngd")


def _config(layers: int = 2):
    config = load_model("llama-3.2-1b").config
    return dataclasses.replace(config, layers=config.layers[:layers])


def test_the_roofs_are_peak_compute_sustained_hbm_and_the_links() -> None:
    roofline = Roofline.of(HW, "bf16")
    compute, memory, link = roofline.terms(3e12, 5e9, 7e8)
    assert compute == 3e12 / HW.flops_per_second("bf16")
    assert memory == 5e9 / HW.hbm_bytes_per_second
    assert link == 7e8 / HW.system.link_bytes_per_s
    assert Roofline.of(HW, "bf16", "fp8").flops_per_s == HW.flops_per_second("fp8")
    assert Roofline.published_peak(HW, "bf16").hbm_bytes_per_s == HW.hbm_peak_bytes_per_second
    assert bound(1.0, 0.6, 0.2, 0.0) == "compute" and bound(1.0, 0.2, 0.4, 0.0) == "overhead"


@pytest.fixture(scope="module")
def sim():
    return simulate_generation(_config(), HW, precision("bf16"), 2, 64, 3)


def test_every_simulate_bound_is_the_one_roofline(sim) -> None:
    report = build_report(sim)
    roofline = Roofline.of(HW, sim.precision.operand)
    p = sim.prefill.program
    terms = roofline.terms(p.flops.sum(), p.hbm_bytes.sum(), p.link_bytes.sum())
    assert report.prefill.roofline_seconds == max(terms)
    assert report.prefill.bound == bound(report.prefill.seconds, *terms)
    assert report.hardware.hbm_bytes_per_s == HW.hbm_bytes_per_second
    for phase, ops in report.ops.items():
        for op in ops:
            terms = roofline.terms(op.flops, op.hbm_bytes, op.link_bytes)
            assert op.roofline_seconds == max(terms), (phase, op.name)
            assert op.bound == bound(op.seconds, *terms), (phase, op.name)
    steps = report.decode.steps
    link = sim.decode_ops.link_bytes.sum() / steps
    terms = roofline.terms(sim.decode_flops.mean(), sim.decode_hbm.mean(), link)
    assert report.decode.roofline_seconds_mean == max(terms)


def test_the_config_floor_divides_by_the_roofline_at_published_peaks(monkeypatch) -> None:
    """Read at sustained HBM bandwidth instead, the floor's memory term grows by peak / sustained."""
    config, prec = _config(), precision("bf16")
    floor = phase_bound(config, prec, HW, 1, 2, "decode", 64)
    monkeypatch.setattr(Roofline, "published_peak", classmethod(lambda cls, hw, *dtypes: cls.of(hw, *dtypes)))
    sustained = phase_bound(config, prec, HW, 1, 2, "decode", 64)
    ratio = HW.hbm_peak_bytes_per_second / HW.hbm_bytes_per_second
    assert ratio > 1 and sustained.memory_seconds == pytest.approx(floor.memory_seconds * ratio, rel=1e-12)
    assert sustained.compute_seconds == floor.compute_seconds


def test_a_sweep_rows_bounds_are_the_one_roofline() -> None:
    point = Point(model="llama-3.2-1b", hw="rngd", chips=1, batch=2, prompt_len=32, gen_len=2, dtype="bf16")
    row = run_point(point)
    sim = simulate_generation(load_model("llama-3.2-1b").config, HW, precision("bf16"), 2, 32, 2)
    roofline, p = Roofline.of(HW, sim.precision.operand), sim.prefill.program
    terms = roofline.terms(p.flops.sum(), p.hbm_bytes.sum(), p.link_bytes.sum())
    assert row["prefill_bound"] == bound(row["ttft_seconds"], *terms)
    step = roofline.terms(sim.decode_flops.mean(), sim.decode_hbm.mean(), sim.decode_ops.link_bytes.sum())
    assert row["decode_bound"] == bound(row["tpot_seconds_mean"], *step)


def test_serve_bounds_each_iteration_at_sustained_hbm_bandwidth() -> None:
    config, prec = _config(), precision("bf16")
    requests = synthetic(6, lengths("uniform:16:120"), lengths("uniform:2:12"), None, False, 3)
    result = serve(config, HW, prec, requests, ServeOptions())
    it = result.iterations
    tokens = it.array("decodes") + it.array("prefill_tokens")
    flops = 2.0 * matmul_weights(config)[0] / result.chips * tokens
    compute = flops / max(HW.flops_per_second(d) for d in (prec.operand, prec.act))
    # the weights any forward reads (the embedding table only by its rows)
    read = (matmul_weight_bytes(config, prec) + head_bytes(config, prec)) / result.chips
    sustained = np.maximum(compute, read / HW.hbm_bytes_per_second) * HW.chip.clock_hz
    peak = np.maximum(compute, read / HW.hbm_peak_bytes_per_second) * HW.chip.clock_hz
    got = model_bound_cycles(result)
    assert HW.hbm_peak_bytes_per_second > HW.hbm_bytes_per_second  # the two readings differ on rngd
    assert (compute < read / HW.hbm_bytes_per_second).any()  # memory bounds some
    np.testing.assert_allclose(got, sustained, rtol=1e-12)
    assert not np.allclose(got, peak, rtol=1e-6)
    assert (it.array("cycles") >= got).all()


# The rates a roofline divides by; outside the hardware spec and the units' cost formulas, only
# tcp_compiler/analysis/roofline.py may read them.
_RATES = re.compile(
    r"\b(flops_per_second|hbm_bytes_per_second|hbm_peak_bytes_per_second|hbm_peak_bytes_per_cycle|"
    r"hbm_sustained_bytes_per_cycle|link_bytes_per_s|link_bytes_per_cycle|macs_per_cycle)\b"
)
_READERS = {
    "tcp_compiler/analysis/roofline.py",  # the roofline
    "tcp_compiler/cli/hw_cmd.py",  # `tcpc hw show` prints the spec
}


def test_only_the_roofline_reads_the_roofs_in_reports_serve_and_sweeps() -> None:
    """The report and analysis packages, serve's metrics and the sweeps and plots compute no roof."""
    watched = [
        *ROOT.glob("tcp_compiler/report/*.py"), *ROOT.glob("tcp_compiler/analysis/*.py"),
        ROOT / "tcp_compiler/serve/metrics.py", ROOT / "tcp_compiler/serve/plots.py",
        *ROOT.glob("tcp_compiler/sweep/*.py"),
        ROOT / "tcp_compiler/cli/simulate_cmd.py", ROOT / "tcp_compiler/cli/serve_cmd.py",
        ROOT / "tcp_compiler/cli/sweep_cmd.py", ROOT / "simulator/report.py", ROOT / "simulator/plots.py",
    ]  # fmt: skip
    readers = {str(path.relative_to(ROOT)) for path in watched if _RATES.search(path.read_text())}
    assert readers <= _READERS
