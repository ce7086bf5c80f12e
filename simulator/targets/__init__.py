"""The hardware targets of this build, one package each; a spec file is its default target's.

Generic code reaches a target through a spec it was given (`target_of`), never by importing a
target's package: the spec's class says which machine family it describes.
"""

from __future__ import annotations

from simulator.energy import EnergyModel
from simulator.errors import HardwareError
from simulator.spec import Spec
from simulator.target import Target
from simulator.targets.rngd import RNGD

DEFAULT_TARGET = RNGD
TARGETS = (RNGD,)


def target_of(spec: Spec) -> Target:
    """The target whose spec class `spec` is an instance of."""
    for target in TARGETS:
        if isinstance(spec, target.spec):
            return target
    raise HardwareError(f"{spec.path}: a {type(spec).__name__} spec is no target's of this build")


def energy_of(spec: Spec) -> EnergyModel:
    """The energy recipe of the spec's target."""
    target = target_of(spec)
    if target.energy is None:
        raise HardwareError(f"{spec.path}: the {target.name} target has no energy model")
    return target.energy
