"""The area model: parts sized by the spec's values, adding up to RNGD's published die."""

from __future__ import annotations

import json

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.area import MIB, area_parts, hbm_stacks, physical_slices
from tcp_compiler.cli import main

# The model's parts are mostly assumed values: it claims no more than this against the real die.
AREA_MODEL_UNCERTAINTY = 0.15


@pytest.fixture(scope="module")
def rngd():
    return load_hardware("rngd")


def test_default_spec_adds_up_to_the_published_die(rngd):
    parts = area_parts(rngd)
    assert rngd.area_mm2 == pytest.approx(sum(parts.values()))
    die = rngd.area.published_die_mm2
    assert rngd.sources["area.published_die_mm2"].startswith("published:")
    assert abs(rngd.area_mm2 - die) <= AREA_MODEL_UNCERTAINTY * die
    # every part is sized by a mechanism; the fixed rest is one declared value, not the difference
    assert parts["fixed"] == rngd.area.fixed_mm2
    assert parts["fixed"] < 0.5 * rngd.area_mm2


def test_every_area_value_says_where_it_comes_from(rngd):
    keys = [k for k in rngd.leaf_keys() if k.startswith("area.")]
    assert len(keys) >= 10
    assert all(rngd.sources[k].split(":")[0] in ("published", "derived", "assumed") for k in keys)


def test_dm_size_moves_sram_area_by_its_density(rngd):
    bigger = rngd.with_value("memory.dm_bytes_per_slice", 2 * rngd.memory.dm_bytes_per_slice)
    grown = physical_slices(rngd) * rngd.memory.dm_bytes_per_slice / MIB * rngd.area.sram_mm2_per_mib
    assert bigger.area_mm2 - rngd.area_mm2 == pytest.approx(grown)
    assert area_parts(bigger)["mac_arrays"] == area_parts(rngd)["mac_arrays"]


def test_lanes_and_mac_rates_move_the_mac_arrays(rngd):
    more_lanes = rngd.with_value("chip.lanes_per_slice", 16)
    assert area_parts(more_lanes)["mac_arrays"] == pytest.approx(2 * area_parts(rngd)["mac_arrays"])
    # one array serves every dtype: doubling bf16's rate doubles it, fp8 at the same width does not
    wider_bf16 = rngd.with_value("contraction.macs_per_lane_cycle.bf16", 64)
    assert area_parts(wider_bf16)["mac_arrays"] == pytest.approx(2 * area_parts(rngd)["mac_arrays"])
    more_i4 = rngd.with_value("contraction.macs_per_lane_cycle.i4", 256)
    assert area_parts(more_i4)["mac_arrays"] == area_parts(rngd)["mac_arrays"]


def test_hbm_bandwidth_beyond_the_stacks_adds_phys(rngd):
    assert hbm_stacks(rngd) == 2
    faster = rngd.with_values({"hbm.peak_bytes_per_cycle": 3000, "hbm.sustained_bytes_per_cycle": 2880})
    assert hbm_stacks(faster) == 4
    assert hbm_stacks(rngd.with_value("hbm.peak_bytes_per_cycle", 3000)) == 2  # a bound, not a rate
    assert faster.area_mm2 - rngd.area_mm2 == pytest.approx(2 * rngd.area.hbm_phy_mm2)
    # HBM is rated per chip cycle: a slower clock needs no fewer stacks here, a faster one more
    assert rngd.with_value("chip.clock_hz", 0.9e9).area_mm2 == rngd.area_mm2
    assert hbm_stacks(rngd.with_value("chip.clock_hz", 1.2e9)) == 3


def test_hw_show_lists_the_area(capsys):
    assert main(["hw", "show", "rngd", "--json"]) == 0
    derived = json.loads(capsys.readouterr().out)["derived"]["per_chip"]
    assert derived["area_mm2"] == pytest.approx(sum(derived["area_parts_mm2"].values()))
    assert main(["hw", "show", "rngd"]) == 0
    out = capsys.readouterr().out
    assert "die area per chip" in out and "published die (area.published_die_mm2): 653 mm^2" in out
    assert "area.published_die_mm2" in out
