"""Energy and power as physics: one account with time, sums that agree, idle as the floor, the
per-action maxima as the ceiling, fp8 cheaper per token than bf16, the DVFS laws, and energy values
recovered from simulated runs' power (simulator.energy, simulator.calibration)."""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import numpy as np
import pytest

from simulator.calibration import Observed, fit
from simulator.energy import Work, dvfs_voltage, peak_watts, phase_energy, throttled_clock
from simulator.errors import HardwareError
from simulator.hardware import load_hardware
from simulator.targets.rngd.energy import ENERGY, peak_rates
from simulator.targets.rngd.sites import SITES
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.build import build_report
from tcp_compiler.report.energy import POWER_WINDOWS, capped_hardware, mac_dtype, op_joules, phases, run_power
from tcp_compiler.simulate import Simulation, simulate_generation

HW = load_hardware("rngd")


@cache
def _sim(dtype: str = "bf16", batch: int = 2) -> Simulation:
    """Two layers of Llama-3.2-1B: a 128-token prompt, 3 generated tokens."""
    config = load_model("llama-3.2-1b").config
    config = dataclasses.replace(config, layers=config.layers[:2])
    return simulate_generation(config, HW, PRECISIONS[dtype], batch, 128, 3)


def _seconds(sim: Simulation) -> tuple[float, float]:
    """The phases' seconds as the report has them (the host's work around each program included)."""
    report = build_report(sim)
    return report.prefill.seconds, float(report.decode.seconds_total)


def test_a_phase_is_the_sum_of_its_units_and_of_its_ops() -> None:
    sim = _sim()
    prefill, decode = phases(sim, *_seconds(sim))
    pairs = ((prefill, sim.prefill_ops, sim.prefill.program), (decode, sim.decode_ops, None))
    for phase, totals, program in pairs:
        assert phase.dynamic_joules == pytest.approx(sum(phase.by_home.values()), rel=1e-12)
        assert phase.dynamic_joules == pytest.approx(float(op_joules(sim, totals).sum()), rel=1e-12)
        if program is not None:  # the program's command sums, independently of the op totals
            direct = ENERGY.dynamic_joules(sim.hardware, Work.of_program(program), mac_dtype(sim))
            assert phase.dynamic_joules == pytest.approx(direct, rel=1e-12)
    report = build_report(sim)
    assert sum(o.joules for o in report.ops.prefill) == pytest.approx(prefill.dynamic_joules, rel=1e-9)
    layers = sum(layer.joules for layer in report.layers.prefill)
    assert layers == pytest.approx(prefill.dynamic_joules, rel=1e-9)
    steps = len(sim.decode_cycles)
    assert report.energy.decode_joules_per_step == pytest.approx(decode.joules / steps)
    assert report.energy.prefill_joules == pytest.approx(prefill.joules)


def test_no_activity_costs_idle_power_times_time() -> None:
    zero = np.zeros(1)
    nothing = Work(zero, zero, zero, zero, zero, np.zeros((1, len(SITES.units))))
    phase = phase_energy(ENERGY, HW, nothing, "bf16", seconds=2.5, running_seconds=0.0, mirrored=1, chips=4)
    assert phase.dynamic_joules == 0.0
    assert phase.joules == pytest.approx(4 * 2.5 * HW.power.idle_w)
    assert phase.average_power_w == pytest.approx(HW.power.idle_w)


def test_power_lies_between_idle_and_the_per_action_maxima() -> None:
    point = ENERGY.point(HW)
    ceiling = point.running_power_w + sum(peak_watts(ENERGY, HW, "bf16", peak_rates(HW, "bf16")).values())
    for sim in (_sim(), _sim(batch=16)):
        for phase in phases(sim, *_seconds(sim)):
            assert point.idle_power_w <= phase.average_power_w <= ceiling


def test_the_maxima_at_peak_compute_agree_with_the_tdp() -> None:
    """Compute-bound work at peak (every unit but HBM, the DMA pool and the links): near the 150 W TDP."""
    watts = peak_watts(ENERGY, HW, "bf16", peak_rates(HW, "bf16"))
    compute = sum(w for name, w in watts.items() if name not in ("hbm", "dma", "link"))
    assert 0.8 * HW.chip.tdp_w <= ENERGY.point(HW).running_power_w + compute <= 1.1 * HW.chip.tdp_w


def test_fp8_spends_less_energy_per_token_than_bf16() -> None:
    bf16, fp8 = build_report(_sim("bf16")).energy, build_report(_sim("fp8")).energy
    assert fp8.prefill.joules_per_token < bf16.prefill.joules_per_token
    assert fp8.decode.joules_per_token < bf16.decode.joules_per_token
    assert fp8.tokens_per_joule > bf16.tokens_per_joule


def test_dynamic_energy_scales_with_voltage_squared_on_chip_only() -> None:
    sim, dtype = _sim(), "bf16"
    work = Work.of_totals(sim.prefill_ops)
    low = HW.with_value("operating_point.voltage_v", 0.6)
    at, lowered = ENERGY.joules(HW, work, dtype), ENERGY.joules(low, work, dtype)
    for action in ENERGY.actions:
        scale = (0.6 / 0.75) ** 2 if action.on_chip else 1.0
        assert np.sum(lowered[action.name]) == pytest.approx(np.sum(at[action.name]) * scale)
    # the running baseline goes with V^2 f, leakage with V
    slow = low.with_value("chip.clock_hz", 0.5e9)
    p, q = ENERGY.point(HW), ENERGY.point(slow)
    leak = p.leakage_w * 0.6 / 0.75
    expected = p.idle_w - p.leakage_w + leak + p.active_baseline_w * (0.6 / 0.75) ** 2 * 0.5
    assert q.running_power_w == pytest.approx(expected)


def test_time_scales_with_the_clock() -> None:
    fast = _sim()
    slow = HW.with_value("chip.clock_hz", 0.5e9)
    half = simulate_generation(fast.config, slow, PRECISIONS["bf16"], 2, 128, 3)
    assert half.prefill.cycles == fast.prefill.cycles  # rates are per cycle: the same cycles
    prefill = build_report(fast).prefill
    host = prefill.launch_seconds + prefill.host_seconds  # the host's, not the clock's
    assert _seconds(half)[0] - host == pytest.approx(2 * (_seconds(fast)[0] - host))


def test_dvfs_voltage_and_the_throttled_clock() -> None:
    point = ENERGY.point(HW)
    assert dvfs_voltage(point, 1e9) == pytest.approx(0.75)
    assert dvfs_voltage(point, 0.8e9) == pytest.approx(0.6)
    assert dvfs_voltage(point, 0.1e9) == HW.operating_point.min_voltage_v
    cycles, on, off = 1e8, 10.0, 2.0  # 0.1 s at 1 GHz: 120 W of actions + the running power
    assert throttled_clock(point, on, off, cycles, 1e4) == 1e9  # within the cap: unchanged
    f = throttled_clock(point, on, off, cycles, 100.0)
    assert f < 1e9
    v = dvfs_voltage(point, f)
    at = dataclasses.replace(point, clock_hz=f, voltage_v=v)
    power = at.running_power_w + (on * (v / 0.75) ** 2 + off) / (cycles / f)
    assert power == pytest.approx(100.0, rel=1e-6)
    floor = point.idle_w - point.leakage_w * (1 - 0.55 / 0.75)  # idle at the lowest voltage
    assert throttled_clock(point, on, off, cycles, floor + 0.5) is not None
    assert throttled_clock(point, on, off, cycles, floor - 0.5) is None


def test_power_cap_lowers_clock_and_voltage_until_within_it() -> None:
    sim = _sim(batch=16)
    # while the programs run (the host's work between them draws no chip power of the run's)
    hottest = max(p.dynamic_joules / p.running_seconds + ENERGY.point(HW).running_power_w
                  for p in phases(sim, 0.0, 0.0))  # fmt: skip
    assert capped_hardware(sim, hottest + 10) is sim.hardware
    capped = capped_hardware(sim, hottest - 10)
    assert capped.chip.clock_hz < sim.hardware.chip.clock_hz
    assert capped.operating_point.voltage_v < sim.hardware.operating_point.voltage_v
    again = simulate_generation(sim.config, capped, sim.precision, 16, 128, 3)
    running = [p.dynamic_joules / p.running_seconds + ENERGY.point(capped).running_power_w
               for p in phases(again, 0.0, 0.0)]  # fmt: skip
    assert max(running) <= hottest - 10 + 0.5


def _runs(spec) -> list[Observed]:
    """Each phase of a few simulated runs, its average power while its programs run modelled from
    its activity (which no energy value changes) and measured as `spec` gives it."""
    runs = []
    for dtype, batch in (("bf16", 1), ("bf16", 16), ("fp8", 4)):
        sim = _sim(dtype, batch)
        for name, totals, running in (
            ("prefill", sim.prefill_ops, sim.prefill.cycles / 1e9),
            ("decode", sim.decode_ops, float(sim.decode_cycles.sum()) / 1e9),
        ):
            work, mac = Work.of_totals(totals), mac_dtype(sim)

            def power(at, work=work, mac=mac, running=running) -> np.ndarray:
                return np.array([phase_energy(ENERGY, at, work, mac, running, running, 1, 1).average_power_w])

            runs.append(Observed(f"{dtype} batch {batch} {name}", power(spec), power))
    return runs


def test_calibration_recovers_energy_values_from_measured_power() -> None:
    truth = {"energy.switch_pj_per_flit": 25.0, "energy.dma_pj_per_byte": 5.0,
             "power.active_baseline_w": 18.0}  # fmt: skip
    actual = HW.with_values(truth)
    fitted = fit(HW, list(truth), _runs(actual), "derived: fitted to simulated runs")
    for address, v in truth.items():
        assert fitted.values[address] == pytest.approx(v, rel=1e-4)
        assert fitted.spec.value(address) == pytest.approx(v, rel=1e-4)
        assert "fitted" in fitted.spec.sources[address]
    assert max(abs(e).max() for e in fitted.errors) < 1e-6


def test_calibration_refuses_values_the_runs_cannot_tell_apart() -> None:
    runs = _runs(HW)
    with pytest.raises(HardwareError, match="at least as many measured figures"):
        fit(HW, ["energy.switch_pj_per_flit", "power.idle_w"], runs[:1], "derived: fitted")
    # one chip: no run moves link bytes
    with pytest.raises(HardwareError, match="cannot tell energy.link_pj_per_byte apart"):
        fit(HW, ["power.idle_w", "energy.link_pj_per_byte"], runs, "derived: fitted")


def test_the_power_track_is_a_value_per_window_adding_up_to_the_run_s_energy() -> None:
    sim = _sim()
    run = sim.prefill
    track = run_power(sim, run.program, run.timeline)
    (watts,) = track.watts.values()  # one chip
    assert len(watts) == POWER_WINDOWS and len(track.edges) == POWER_WINDOWS + 1
    assert len(set(np.round(watts, 6))) > 1 and watts.max() > watts.mean()  # over time, not one value
    assert abs(track.edges[-1] - run.cycles) <= 1  # the timeline's end (the run's cycles: whole ones)
    seconds = track.edges[-1] / HW.chip.clock_hz
    whole = phase_energy(ENERGY, HW, Work.of_program(run.program), mac_dtype(sim), seconds, seconds, 1, 1)
    window_seconds = np.diff(track.edges) / HW.chip.clock_hz
    assert float(watts @ window_seconds) == pytest.approx(whole.joules, rel=1e-9)
    assert watts.min() >= ENERGY.point(HW).running_power_w


def test_serve_power_cap_keeps_every_iteration_within_it_and_takes_longer(tmp_path) -> None:
    base = ["serve", "llama-3.2-1b", "--requests", "8", "--concurrency", "4", "--json"]
    assert main([*base, str(tmp_path / "free.json")]) == 0
    free = json.loads((tmp_path / "free.json").read_text())
    cap = free["energy"]["peak_power_w"] - 20
    assert main([*base, str(tmp_path / "capped.json"), "--power-cap", repr(cap)]) == 0
    capped = json.loads((tmp_path / "capped.json").read_text())
    assert max(capped["per_iteration"]["power_w"]) <= cap * (1 + 1e-9)
    assert capped["energy"]["power_cap_w"] == pytest.approx(cap)
    assert capped["energy"]["clock_hz"] < HW.chip.clock_hz and "clock_hz" not in free["energy"]
    assert capped["duration_s"] > free["duration_s"]
    assert capped["per_iteration"]["cycles"] == free["per_iteration"]["cycles"]  # the same work, slower
