"""Names what limits a phase beyond its roofline, from the simulated timeline.

A roofline assumes the bound resource (HBM, the Contraction Engine, the chip links) works at its
peak for the whole phase. The time beyond it is (a) the host's work around the program (kernel
launch, scheduling, input preparation, sampling: tcp_compiler.serve.host), (b) time the resource is
in use but below its peak rate, and (c) time it is idle; (c) is split by what ran meanwhile,
read from simulator.occupancy's cycles per combination of activities. The parts sum to the
excess (less those under a cycle, which are left out), so "1.52x roofline" comes with what the
other 0.52x is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulator.targets import DEFAULT_TARGET
from tcp_compiler.records import Record, doc

SITES = DEFAULT_TARGET.sites  # the report schema names the build's target's causes
ACTIVITIES, BIT = SITES.activity_names, SITES.bits  # its activities (simulator.occupancy)
RESOURCES = ("compute", "memory", "communication")  # the roofline terms, in their order
_ACTIVE = {"compute": "contraction", "memory": "hbm_move", "communication": "link"}
_UNIT = {"compute": "Contraction Engine", "memory": "HBM", "communication": "chip links"}
# What runs while the bound resource is idle, in the order an instant is attributed (first match):
# a collective or a move is the reason a unit waits before the passes that run beside it are.
_IDLE_ORDER = (
    "link", "pe_link", "hbm_move", "dma_on_chip", "dma_startup", "contraction", "tensor_unit_other", "sub",
)
_WHILE = {
    "link": "while collectives run",
    "pe_link": "while reductions between a card's PEs run",
    "hbm_move": "while HBM moves run",
    "dma_on_chip": "while on-chip DMA moves run",
    "dma_startup": "during DMA start-up",
    "contraction": "while the Contraction Engine runs",
    "tensor_unit_other": "while passes without a contraction run",
    "sub": "while the sub pipeline runs",
    "gaps": "with nothing under way",
}
assert set(_IDLE_ORDER) == set(ACTIVITIES), "every activity has its place in the order"
# The host's parts (tcp_compiler.serve.host.HOST_PARTS) as causes; the launch is the target's own cause.
HOST_CAUSES = {"schedule": "host_schedule", "prepare": "host_prepare", "launch": "kernel_launch",
               "sample": "host_sample"}  # fmt: skip
CAUSES = (*(c for c in HOST_CAUSES.values() if c not in SITES.limiter_causes), *SITES.limiter_causes)


@dataclass(frozen=True, kw_only=True)
class LimiterPart(Record):
    """One cause of the time a phase takes beyond its roofline, measured on the simulated timeline."""

    cause: Literal[CAUSES] = doc(
        "`kernel_launch`: the host's launch overhead; `host_schedule`, `host_prepare`, `host_sample`: "
        "the serving runtime's scheduling, input preparation and sampling on the host (the spec's "
        "[host] table); `hbm_below_peak`: HBM moves in flight but below "
        "HBM's full rate; `pipeline_stages`: Tensor Unit pass time beyond its contraction (fill, drain, "
        "Vector, Commit, TRF loads); `contraction_placement`: contraction cycles beyond peak (lanes or "
        "slices the placement leaves idle); `link_latency`: chip-link time beyond its bytes at full "
        "bandwidth. The others are time the bound resource is idle, named by what runs instead (first "
        "match in this order): `link` collectives, `pe_link` reductions between a card's PEs, "
        "`hbm_move`, `dma_on_chip` moves, `dma_startup`, "
        "`contraction` passes, `tensor_unit_other` (passes without a contraction), `sub` pipeline; "
        "`gaps`: nothing under way"
    )
    what: str = doc("the cause in words, as the terminal and Markdown reports print it")
    seconds: float = doc("time it accounts for (per step for decode)", "s")
    share: float = doc("`seconds` over the phase's time beyond its roofline", "0..1")


@dataclass(frozen=True, kw_only=True)
class Limiter(Record):
    """What a phase's time beyond its roofline is made of: the bound resource's idle time, split by
    what ran instead, plus the time it ran below its peak rate and the kernel launch; computed from
    the simulated timeline (which activities were under way at each cycle), so the parts sum to
    `excess_seconds`."""

    resource: Literal["compute", "memory", "communication"] = doc(
        "the largest roofline term: the resource that bounds the phase (the Contraction Engine, HBM, the "
        "chip links), even when the phase's `bound` is `overhead`"
    )
    roofline_ratio: float = doc("the phase's time over its roofline", "x")
    excess_seconds: float = doc("the phase's time minus its roofline (per step for decode)", "s")
    parts: tuple[LimiterPart, ...] = doc("the causes, largest first; causes under one cycle are left out")



@dataclass(frozen=True)
class PhaseTime:
    """One program run (the prefill, or the mean decode step) as the limiter needs it."""

    seconds: float  # the phase's time, the host's work included
    host_seconds: dict[str, float]  # the host's parts (tcp_compiler.serve.host.HostWork.as_dict)
    terms: tuple[float, float, float]  # roofline seconds: compute, memory, communication
    state_seconds: np.ndarray  # per combination of activities (simulator.occupancy.STATES)
    contraction_busy_seconds: float  # the Contraction Engine's busy time
    cycle_seconds: float  # one clock cycle: parts shorter than it are rounding, and left out


def limiter(phase: PhaseTime) -> Limiter:
    """The phase's excess over its roofline, split into causes measured on its timeline."""
    resource = RESOURCES[int(np.argmax(phase.terms))]
    roofline = max(phase.terms)
    states = phase.state_seconds
    mask = np.arange(len(states))
    bound_bit = BIT[_ACTIVE[resource]]
    active = float(states[(mask & bound_bit) != 0].sum())
    parts: dict[str, float] = {HOST_CAUSES[part]: seconds for part, seconds in phase.host_seconds.items()}
    if resource == "memory":
        parts["hbm_below_peak"] = active - roofline
    elif resource == "communication":
        parts["link_latency"] = active - roofline
    elif phase.contraction_busy_seconds >= roofline:
        parts["pipeline_stages"] = active - phase.contraction_busy_seconds
        parts["contraction_placement"] = phase.contraction_busy_seconds - roofline
    else:  # the busy columns count fewer cycles than the peak implies: one part, not a negative one
        parts["pipeline_stages"] = active - roofline
    idle = {name: 0.0 for name in (*_IDLE_ORDER, "gaps")}
    for state in np.flatnonzero((mask & bound_bit) == 0):
        cause = next((a for a in _IDLE_ORDER if state & BIT[a]), "gaps")
        idle[cause] += float(states[state])
    parts |= idle
    excess = phase.seconds - roofline
    return Limiter(
        resource=resource,
        roofline_ratio=phase.seconds / roofline if roofline else 0.0,
        excess_seconds=excess,
        parts=tuple(
            LimiterPart(cause=cause, what=describe(cause, resource), seconds=seconds,
                        share=seconds / excess if excess > 0 else 0.0)  # fmt: skip
            for cause, seconds in sorted(parts.items(), key=lambda kv: -kv[1])
            if seconds >= phase.cycle_seconds
        ),
    )


def describe(cause: str, resource: str) -> str:
    """A cause in words: what was idle (or slow) and what ran instead."""
    unit = _UNIT[resource]
    fixed = {
        "kernel_launch": "kernel launch",
        "host_schedule": "host scheduling",
        "host_prepare": "host input preparation",
        "host_sample": "host sampling",
        "hbm_below_peak": "HBM moves below its full rate",
        "pipeline_stages": "pass stages beyond the contraction",
        "contraction_placement": "contraction lanes left idle by placement",
        "link_latency": "chip-link latency",
    }
    return fixed.get(cause) or f"{unit} idle {_WHILE[cause]}"


def limiter_line(phase: str, lim: Limiter, shown: int = 4, least: float = 0.01) -> str:
    """One line: `prefill 1.52x roofline, memory-bound (HBM); the rest: DMA start-up 30%, ...`,
    the `shown` largest parts of at least `least` of the excess."""
    head = f"{phase} {lim.roofline_ratio:.2f}x roofline, {lim.resource}-bound ({_UNIT[lim.resource]})"
    parts = [p for p in lim.parts if p.share >= least][:shown]
    if lim.excess_seconds <= 0 or not parts:
        return head
    rest = ", ".join(f"{p.what} {_percent(p.share)}" for p in parts)
    return f"{head}; the rest: {rest}"


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.005 else "<1%"
