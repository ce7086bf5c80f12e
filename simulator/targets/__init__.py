"""The hardware targets of this build, one package each; a spec file is its default target's."""

from __future__ import annotations

from simulator.targets.rngd import RNGD

DEFAULT_TARGET = RNGD
