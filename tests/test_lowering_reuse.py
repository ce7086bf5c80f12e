"""A warm worker reuses the spec-free lowering across spec changes and gets what a cold one gets."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping import schedule
from tcp_compiler import pipeline
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation

CONFIG = load_model("llama-3.2-1b").config
BASE = load_hardware("rngd")
PROMPT = 512


def _costed(hw):
    sim = simulate_generation(CONFIG, hw, precision("bf16"), 1, PROMPT, 4)
    return sim, build_report(sim, top=3).to_dict()


def _cold(hw):
    pipeline._FRONTS.clear()
    schedule._RECIPES.clear()
    schedule._PLANS.clear()
    return _costed(hw)


CHANGES = {
    "hbm bandwidth": ("hbm.sustained_bytes_per_cycle", 700.0),
    "clock": ("chip.clock_hz", 1.3e9),
    "latency": ("dma.startup_cycles", 900),
    "dm size": ("memory.dm_bytes_per_slice", 65536),
    "switch hop": ("switch.hop_cycles", 9),  # a latency the pass plans read (placement)
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_warm_after_a_spec_change_equals_cold(change: str) -> None:
    address, new = CHANGES[change]
    changed = BASE.with_value(address, new)
    _cold(BASE)  # warm the caches on the base spec
    fronts = dict(pipeline._FRONTS)
    warm_sim, warm = _costed(changed)
    assert dict(pipeline._FRONTS).keys() == fronts.keys()  # the lowering was reused, not redone
    cold_sim, cold = _cold(changed)
    assert warm_sim.prefill.cycles == cold_sim.prefill.cycles
    assert list(warm_sim.decode_cycles) == list(cold_sim.decode_cycles)
    assert warm == cold


def test_a_smaller_dm_changes_what_the_spec_dependent_steps_decide() -> None:
    """The DM case above is a real test of staleness: the attention form depends on DM size."""
    small = BASE.with_value(*CHANGES["dm size"])
    forms = {n["form"] for n in _cold(BASE)[0].attention}, {n["form"] for n in _costed(small)[0].attention}
    assert forms == ({"plain"}, {"online"})


@pytest.mark.parametrize("change", ["hbm bandwidth", "clock", "latency"])
def test_a_rate_change_reuses_every_pass_plan(change: str) -> None:
    """Bandwidths, clocks and DMA latencies re-time the moves; placement and tiling are kept."""
    _cold(BASE)
    plans = set(schedule._PLANS)
    _costed(BASE.with_value(*CHANGES[change]))
    assert set(schedule._PLANS) == plans
