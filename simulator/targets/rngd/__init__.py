"""FuriosaAI RNGD (a Tensor Contraction Processor): the one target of this build.

Everything RNGD-specific is in this package: the spec tables (spec.py), the units with their cost
formulas and the execution contexts (units.py), the activities the timeline is split into and the
pipeline stages of a Tensor Unit pass (sites.py), the energy recipe (energy.py), the die-area model
(area.py), and the recipe book (placement, tiling, scheduling onto these units) the Target names.
"""

from __future__ import annotations

from pathlib import Path

from simulator.target import Target
from simulator.targets.rngd.area import AREA
from simulator.targets.rngd.energy import ENERGY
from simulator.targets.rngd.sites import SITES
from simulator.targets.rngd.spec import Hardware

RNGD = Target(
    "rngd", Hardware, Path(__file__).parents[2] / "specs", SITES,
    recipes="simulator.targets.rngd.mapping.book", energy=ENERGY, area=AREA,
)  # fmt: skip
