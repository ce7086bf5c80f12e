"""What a hardware target is: the generic half of the seam between the simulator and one machine.

A target says where work runs (its `Sites`: execution contexts, units, activities, pipeline stages,
the limiter's causes and roofs, in its words) and which spec it is described by (a `Spec` subclass
whose tables declare every value once, simulator.spec). The Program, the engines, the trace and the
limiter read a program's `Sites` and the roles of its contexts (ordered queue, pooled DMA,
collective); they never name a unit or a context of a particular machine. A target also names its
recipe book (placement and scheduling into Programs of its units, which the generic compiler reaches
through tcp_compiler.recipes), and may bring an energy recipe and a die-area model, which the
reports and `tcpc hw show` take from it.

The recipe book is named by its module, not imported: it reads the IR, which the generic simulator
does not, and a spec file can be loaded without the compiler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.energy import EnergyModel
    from simulator.spec import Spec


# The per-command byte counts a unit may be measured by (Unit.moves; simulator.utilisation counts them):
# what the pooled context moves, and what commands send over the chip links.
MOVED = ("dma_bytes", "link_bytes")


@dataclass(frozen=True)
class Context:
    """An execution context of a chip, with the role the engine gives it."""

    name: str
    # True: one in-order queue per chip (a command starts after the previous one of its queue).
    # False: independent DMA descriptors sharing the chip's DMA and HBM bandwidth (a pool).
    ordered: bool
    collective: bool = False  # carries chip-to-chip transfers (a trace keeps it on mirrored chips)
    doc: str = ""


@dataclass(frozen=True)
class Unit:
    """A hardware unit: the context its commands occupy and how its busy time is measured."""

    name: str
    context: str  # a Context's name
    reads: tuple[str, ...]  # spec keys its cost formula reads
    # How busy it was: None -> its busy cycles in the Program; a per-op byte count (an OpTotals
    # field) -> those bytes at the unit's full bandwidth, since moves in flight share it.
    moves: str | None
    doc: str
    bandwidth: Callable[[Any], float] | None = field(default=None, compare=False)  # B/cycle, for `moves`


@dataclass(frozen=True)
class Activity:
    """A kind of work under way at an instant (one bit of simulator.occupancy's states): a command
    of `context` runs; for a pool, `moving` says whether it is past its start-up and `hbm` whether
    it touches HBM; for an ordered context, `unit` (if set) whether that unit is busy in it."""

    name: str
    context: str
    doc: str
    unit: str | None = None  # ordered contexts: this activity when the unit is busy (None: otherwise)
    moving: bool | None = None  # pools: past the start-up (True) or in it (False)
    hbm: bool | None = None  # pools, when moving: touches HBM (True) or not (False)
    # As a limiter cause (the bound resource idle while this runs): the limiter line's words after
    # "<resource> idle" ("while collectives run"), and the report schema's gloss after its name.
    during: str = ""
    gloss: str = ""


@dataclass(frozen=True)
class Cause:
    """A limiter cause that is not idle time: a resource in use below its peak rate, or a fixed
    overhead of the target; its name in the JSON, its words on a limiter line, its schema gloss."""

    name: str
    what: str
    doc: str


@dataclass(frozen=True)
class Roof:
    """A roofline term (tcp_compiler.analysis.roofline: compute, memory, communication) as the
    limiter finds it on the timeline: the activity under way while its resource works, the
    resource's name, and the rate causes its time in use beyond the roofline is split into."""

    resource: str
    activity: str
    name: str  # on a limiter line: "memory-bound (HBM)", "HBM idle while ..."
    slow: str  # a rate cause: time in use beyond the roofline
    # A rate cause for the compute unit's busy time beyond the roofline, which `slow` then leaves
    # out ("": none; only while that busy time reaches the roofline, so neither part is negative).
    placed: str = ""


@dataclass(frozen=True)
class Sites:
    """Where work runs on one target: the one definition contexts, units, activities, pipeline
    stages and limiter causes are all taken from."""

    contexts: tuple[Context, ...]
    units: tuple[Unit, ...]
    activities: tuple[Activity, ...]
    stages: tuple[str, ...]  # pipeline stages of a pass, in the order data flows through them
    rate_causes: tuple[Cause, ...]  # limiter causes that are a resource below its peak rate
    idle_cause: str  # the limiter cause for instants with nothing under way
    compute: str = ""  # the unit whose busy time is the chip's arithmetic (the limiter's compute busy)
    idle_during: str = ""  # `idle_cause` on a limiter line, after "<resource> idle"
    idle_gloss: str = ""  # `idle_cause` in the report schema
    # The activities in the order an idle instant is attributed to them (first match): what makes a
    # unit wait comes before what merely runs beside it. Empty: their bit order.
    idle_order: tuple[str, ...] = ()
    roofs: tuple[Roof, ...] = ()  # the roofline terms' resources (the limiter needs all three)

    def __post_init__(self) -> None:
        names = self.context_names
        assert not self.compute or self.compute in self.unit_names, "compute is not a unit"
        assert len(set(names)) == len(names) and len(set(self.unit_names)) == len(self.unit_names)
        assert all(u.context in names for u in self.units), "a unit on an unknown context"
        assert all(a.context in names for a in self.activities), "an activity on an unknown context"
        assert all(u.moves in (None, *MOVED) for u in self.units), "a Unit.moves without a per-command count"
        assert all((u.moves is None) == (u.bandwidth is None) for u in self.units), "moves need a bandwidth"
        assert sum(not c.ordered for c in self.contexts) <= 1, "at most one pooled (DMA) context"
        assert not self.idle_order or sorted(self.idle_order) == sorted(self.activity_names), "idle_order"
        rates = {c.name for c in self.rate_causes}
        assert all(r.activity in self.activity_names for r in self.roofs), "a roof on an unknown activity"
        assert all({r.slow, r.placed} - {""} <= rates for r in self.roofs), "a roof's cause is no rate cause"
        object.__setattr__(self, "_hash", hash((self.contexts, self.units, self.activities, self.stages)))

    def __hash__(self) -> int:  # looked up per program (simulator.occupancy.plan): hashed once
        return self._hash

    @cached_property
    def context_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.contexts)

    @cached_property
    def unit_names(self) -> tuple[str, ...]:
        return tuple(u.name for u in self.units)

    @cached_property
    def activity_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.activities)

    @property
    def limiter_causes(self) -> tuple[str, ...]:
        """Every cause a limiter line may name: rates below peak, what ran while idle, nothing."""
        return (*(c.name for c in self.rate_causes), *self.activity_names, self.idle_cause)

    @cached_property
    def attribution(self) -> tuple[Activity, ...]:
        """The activities in the order an idle instant is attributed to them (first match)."""
        by_name = {a.name: a for a in self.activities}
        return tuple(by_name[n] for n in self.idle_order) if self.idle_order else self.activities

    def roof(self, resource: str) -> Roof:
        """The roof of a roofline term ("compute", "memory", "communication")."""
        return next(r for r in self.roofs if r.resource == resource)

    @cached_property
    def bits(self) -> dict[str, int]:
        """Each activity's bit in simulator.occupancy's state masks."""
        return {a.name: 1 << i for i, a in enumerate(self.activities)}

    @property
    def states(self) -> int:
        """How many combinations of activities there are (state masks are below this)."""
        return 1 << len(self.activities)

    def context(self, name: str) -> int:
        """A context's index (Program.context values)."""
        return self.context_names.index(name)

    def unit(self, name: str) -> int:
        """A unit's column in Program.busy."""
        return self.unit_names.index(name)

    @cached_property
    def pool(self) -> int:
        """The pooled (DMA) context's index, -1 if the target has none."""
        return next((i for i, c in enumerate(self.contexts) if not c.ordered), -1)

    @cached_property
    def primary(self) -> int:
        """The first ordered context: the pipeline an op's main time is measured on."""
        return next(i for i, c in enumerate(self.contexts) if c.ordered)


@dataclass(frozen=True)
class AreaModel:
    """A target's die-area model as `tcpc hw show` prints it: mm^2 per part (their sum is the
    spec's `area_mm2`), what sizes each part, and the published die it is checked against."""

    parts: Callable[[Any], dict[str, float]]  # spec -> mm^2 per part
    sized_by: Callable[[Any], dict[str, str]]  # spec -> part -> what sizes it
    published_mm2: Callable[[Any], float]  # spec -> the real die's area (a spec value with its source)
    published: str  # whose die that is, and the spec value that holds it


@dataclass(frozen=True)
class Target:
    """A machine family: its spec class (tables of values), its presets, where work runs, the
    module of its recipe book, and (when it has them) its energy recipe and area model."""

    name: str
    spec: type[Spec]
    specs_dir: Path  # bundled presets, loadable by name
    sites: Sites
    recipes: str = ""  # the module of its recipe book (tcp_compiler.recipes.Recipes); "": none
    energy: EnergyModel | None = None
    area: AreaModel | None = None
