"""Names what limits a phase beyond its roofline, from the simulated timeline.

A roofline assumes the bound resource (HBM, the Contraction Engine, the chip links) works at its
peak for the whole phase. The time beyond it is (a) the host's work around the program (kernel
launch, scheduling, input preparation, sampling: tcp_compiler.serve.host) and the runtime's device
costs around it (padding up to static shapes, paged-KV descriptor issue), (b) time the resource is
in use but below its peak rate, and (c) time it is idle; (c) is split by what ran meanwhile,
read from simulator.occupancy's cycles per combination of activities. The parts sum to the
excess (less those under a cycle, which are left out), so "1.52x roofline" comes with what the
other 0.52x is. Which activity means a resource is in use, the order idle time is attributed in,
the rate causes and every cause's words are the target's (its `Sites`: simulator.target), read
from the program's sites; this module names none of a particular machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulator.target import Roof, Sites
from tcp_compiler.records import Record, doc

RESOURCES = ("compute", "memory", "communication")  # the roofline terms, in their order
# The host's parts (tcp_compiler.serve.host.HOST_PARTS) as causes; the launch is the target's own cause.
HOST_CAUSES = {"schedule": "host_schedule", "prepare": "host_prepare", "launch": "kernel_launch",
               "sample": "host_sample"}  # fmt: skip
# The serving runtime's device costs around the programs (tcp_compiler.serve.static_costs) as causes.
RUNTIME_CAUSES = {"padding": "shape_padding", "descriptors": "kv_descriptor_issue"}
_HOST_WHAT = {"host_schedule": "host scheduling", "host_prepare": "host input preparation",
              "host_sample": "host sampling", "shape_padding": "shape padding",
              "kv_descriptor_issue": "KV descriptor issue"}  # fmt: skip


def causes(sites: Sites) -> tuple[str, ...]:
    """Every cause a limiter on `sites` may name: the host's that the target does not declare, then
    the target's."""
    served = (*HOST_CAUSES.values(), *RUNTIME_CAUSES.values())
    return (*(c for c in served if c not in sites.limiter_causes), *sites.limiter_causes)


def cause_doc(sites: Sites) -> tuple[tuple[str, ...], str]:
    """The causes on `sites` and what each means, for the report schema: the target's host-side
    causes, the host's, the rates below peak, then the idle causes in the order they are matched."""
    own = {c.name for c in sites.rate_causes}
    host = [c for c in HOST_CAUSES.values() if c not in own]
    launch = [f"`{c.name}`: {c.doc}" for c in sites.rate_causes if c.name in HOST_CAUSES.values()]
    rates = [f"`{c.name}`: {c.doc}" for c in sites.rate_causes if c.name not in HOST_CAUSES.values()]
    served = ", ".join(f"`{c}`" for c in host) + (
        ": the serving runtime's scheduling, input preparation and sampling on the host (the spec's "
        "[host] table); `shape_padding`: the device time of padding the programs up to the runtime's "
        "static shapes (`--batch-shapes`, `--prefill-shapes`, `--context-shapes`); "
        "`kv_descriptor_issue`: issuing the paged-KV DMA descriptors beyond their transfer "
        "(`dma.issue_cycles`)"
    )
    idle = ", ".join(f"`{a.name}` {a.gloss}".rstrip() for a in sites.attribution)
    meaning = (
        "; ".join((*launch, served, *rates)) + ". The others are time the bound resource is idle, named by "
        f"what runs instead (first match in this order): {idle}; `{sites.idle_cause}`: {sites.idle_gloss}"
    )
    return causes(sites), meaning


@dataclass(frozen=True, kw_only=True)
class LimiterPart(Record):
    """One cause of the time a phase takes beyond its roofline, measured on the simulated timeline."""

    cause: str = doc("a cause of the target's (`causes`)", target=cause_doc)
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
    runtime_seconds: dict[str, float]  # the runtime's device costs around the program (RUNTIME_CAUSES)
    terms: tuple[float, float, float]  # roofline seconds: compute, memory, communication
    state_seconds: np.ndarray  # per combination of the sites' activities (simulator.occupancy)
    compute_busy_seconds: float  # the busy time of the sites' compute unit
    sites: Sites  # where the program ran: its activities, roofs and causes
    cycle_seconds: float  # one clock cycle: parts shorter than it are rounding, and left out


def limiter(phase: PhaseTime) -> Limiter:
    """The phase's excess over its roofline, split into causes measured on its timeline."""
    sites = phase.sites
    resource = RESOURCES[int(np.argmax(phase.terms))]
    roof = sites.roof(resource)
    roofline = max(phase.terms)
    states = phase.state_seconds
    mask = np.arange(len(states))
    bound_bit = sites.bits[roof.activity]
    active = float(states[(mask & bound_bit) != 0].sum())
    parts: dict[str, float] = {HOST_CAUSES[part]: seconds for part, seconds in phase.host_seconds.items()}
    parts |= {RUNTIME_CAUSES[part]: seconds for part, seconds in phase.runtime_seconds.items()}
    busy = phase.compute_busy_seconds
    if roof.placed and busy >= roofline:  # else the busy columns count fewer cycles than the peak implies
        parts[roof.slow] = active - busy
        parts[roof.placed] = busy - roofline
    else:
        parts[roof.slow] = active - roofline
    order = sites.attribution
    idle = {name: 0.0 for name in (*(a.name for a in order), sites.idle_cause)}
    for state in np.flatnonzero((mask & bound_bit) == 0):
        cause = next((a.name for a in order if state & sites.bits[a.name]), sites.idle_cause)
        idle[cause] += float(states[state])
    parts |= idle
    excess = phase.seconds - roofline
    return Limiter(
        resource=resource,
        roofline_ratio=phase.seconds / roofline if roofline else 0.0,
        excess_seconds=excess,
        parts=tuple(
            LimiterPart(
                cause=cause,
                what=describe(cause, roof, sites),
                seconds=seconds,
                share=seconds / excess if excess > 0 else 0.0,
            )  # fmt: skip
            for cause, seconds in sorted(parts.items(), key=lambda kv: -kv[1])
            if seconds >= phase.cycle_seconds
        ),
    )


def describe(cause: str, roof: Roof, sites: Sites) -> str:
    """A cause in words: what was idle (or slow) and what ran instead."""
    fixed = _HOST_WHAT | {c.name: c.what for c in sites.rate_causes}
    during = {a.name: a.during for a in sites.activities} | {sites.idle_cause: sites.idle_during}
    return fixed.get(cause) or f"{roof.name} idle {during[cause]}"


def limiter_line(phase: str, lim: Limiter, sites: Sites, shown: int = 4, least: float = 0.01) -> str:
    """One line: `prefill 1.52x roofline, memory-bound (HBM); the rest: DMA start-up 30%, ...`,
    the `shown` largest parts of at least `least` of the excess; `sites`: where the phase ran."""
    head = (
        f"{phase} {lim.roofline_ratio:.2f}x roofline, {lim.resource}-bound ({sites.roof(lim.resource).name})"
    )
    parts = [p for p in lim.parts if p.share >= least][:shown]
    if lim.excess_seconds <= 0 or not parts:
        return head
    rest = ", ".join(f"{p.what} {_percent(p.share)}" for p in parts)
    return f"{head}; the rest: {rest}"


def _percent(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.005 else "<1%"
