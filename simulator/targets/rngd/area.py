"""The die area of an RNGD-class chip, added up part by part from its spec.

Every part is a count the spec already sizes (slices, lanes, MACs per lane per dtype, DM / TRF / VRF
bytes, HBM bandwidth and capacity, link bandwidth) times an area per unit from the spec's `area`
table, so an architect who grows DM or adds lanes sees the area move by the mechanism, not by a
scale factor. The only term no value sizes is `area.fixed_mm2`, itself a spec value with its source.
The real die the sum is checked on is `area.published_die_mm2` (tests/test_area.py), not a part.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simulator.target import AreaModel

if TYPE_CHECKING:
    from simulator.targets.rngd.spec import Hardware

MIB = 1 << 20
KMAC = 1024  # the area table prices MAC arrays per 1024 MACs per cycle


def physical_slices(hw: Hardware) -> int:
    """Slices built on the die: the active ones plus the spares each PE carries for yield."""
    return hw.slices + hw.pes * hw.area.spare_slices_per_pe


def hbm_stacks(hw: Hardware) -> int:
    """HBM stacks (one PHY each) needed to deliver the sustained bandwidth the simulator runs at
    (the peak is only the bound no phase may beat) and to hold the capacity."""
    a = hw.area
    by_rate = hw.hbm_bytes_per_second / a.hbm_stack_bytes_per_s
    by_capacity = hw.hbm.capacity_bytes / a.hbm_stack_capacity_bytes
    return max(1, _whole(by_rate), _whole(by_capacity))


def link_ports(hw: Hardware) -> int:
    """Chip-link ports (PHY + controller) needed for the link bandwidth per direction."""
    return max(1, _whole(hw.system.link_bytes_per_s / hw.area.link_port_bytes_per_s))


def area_parts(hw: Hardware) -> dict[str, float]:
    """mm^2 per part of one chip; their sum is `Hardware.area_mm2`."""
    a, slices = hw.area, physical_slices(hw)
    memory = hw.memory
    sram_per_slice = memory.dm_bytes_per_slice + memory.trf_bytes_per_slice + memory.vrf_bytes_per_slice
    # One multi-precision array per lane serves every dtype (a 64 B packet of any of them): it is as
    # large as its most demanding dtype's rate makes it.
    per_lane = hw.contraction.macs_per_lane_cycle
    lane_macs_mm2 = max(per_lane[d] * a.mac_mm2_per_kmac[d] / KMAC for d in per_lane)
    return {
        "sram": (slices * sram_per_slice / MIB + a.other_sram_mib) * a.sram_mm2_per_mib,
        "mac_arrays": slices * hw.chip.lanes_per_slice * lane_macs_mm2,
        "slice_logic": slices * a.slice_logic_mm2,
        "hbm_phys": hbm_stacks(hw) * a.hbm_phy_mm2,
        "chip_links": link_ports(hw) * a.link_port_mm2,
        "fixed": a.fixed_mm2,
    }


def _whole(units: float) -> int:
    """Whole units covering a need, without a float's last bit adding one (2.0000000001 -> 2)."""
    return math.ceil(units - 1e-9)


def sized_by(hw: Hardware) -> dict[str, str]:
    """What sizes each part of `area_parts`, in words `tcpc hw show` prints beside its mm^2."""
    slices = physical_slices(hw)
    return {
        "sram": f"{slices:,} slices x (DM + TRF + VRF) + {hw.area.other_sram_mib:g} MiB other",
        "mac_arrays": f"{slices:,} slices x {hw.chip.lanes_per_slice} lanes x MACs per lane",
        "slice_logic": f"{slices:,} slices (incl. {hw.area.spare_slices_per_pe} spare per PE)",
        "hbm_phys": f"{hbm_stacks(hw)} HBM stacks (sustained bandwidth, capacity)",
        "chip_links": f"{link_ports(hw)} link ports (link bandwidth)",
        "fixed": "area.fixed_mm2",
    }


def published_die(hw: Hardware) -> float:
    """The real die the model's sum is checked on (a spec value with its source, not a part)."""
    return hw.area.published_die_mm2


AREA = AreaModel(area_parts, sized_by, published_die, "published die (area.published_die_mm2)")
