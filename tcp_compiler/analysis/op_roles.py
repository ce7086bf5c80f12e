"""Op roles: one op across layers (`l0.down` ... `l79.down` are role `down`), summed.

A top-ops list of an 80-layer model is the same op eighty times; grouping by role says which
kind of work the time goes to, how many ops share it, and what one layer's instance costs. The
role of each op comes with it from the graph's metadata (the builder and the passes record it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tcp_compiler.analysis.roofline import Bound
from tcp_compiler.records import Record, doc

Terms = tuple[float, float, float]  # compute, memory and communication seconds at the roofs
Bounder = Callable[..., str]


class OpFigures(Protocol):
    """What op_roles reads of an op (the report's OpRow, per step for decode)."""

    kind: str
    layer: int
    seconds: float
    tensor_unit_seconds: float
    flops: float
    hbm_bytes: float
    dm_bytes: float
    link_bytes: float
    roofline_seconds: float


@dataclass(frozen=True, kw_only=True)
class OpRoleRow(Record):
    """The ops that play one role across layers (`l0.down` ... `l15.down` are role `down`; tile
    indices of online softmax, such as `Sq1024` or `blk3`, read `*`), summed; per step for decode."""

    role: str = doc("the op name without its layer prefix, tile indices as `*`")
    kind: str = doc("as for ops")
    count: int = doc("ops in the role", "ops")
    layers: int = doc("distinct layers they sit in (0 for ops outside the layers)", "layers")
    seconds: float = doc("the sum of the ops' `seconds`", "s")
    seconds_per_layer: float = doc("`seconds` per layer (per op outside the layers)", "s")
    share: float = doc(
        "`seconds` over the phase's time; ops overlap (a prefetch runs beside a pass), so the shares of "
        "all roles can sum to more than 1",
        "0..1",
    )
    tensor_unit_seconds: float = doc("the sum of the ops' Tensor Unit time", "s")
    flops: float = doc("the ops' work", "FLOP")
    hbm_bytes: float = doc("the ops' HBM traffic", "B")
    intensity: float = doc("FLOPs per byte of HBM + DM traffic (on-chip reuse)", "FLOP/B")
    hbm_intensity: float = doc("FLOPs per byte of HBM traffic: the roofline's intensity", "FLOP/B")
    roofline_seconds: float = doc("the sum of the ops' rooflines", "s")
    bound: Bound = doc("as for the phases, for the role's summed time and roofline terms")


def op_roles(
    ops: Sequence[OpFigures], roles: Sequence[str], terms: Sequence[Terms], phase_seconds: float,
    bound: Bounder,
) -> tuple[OpRoleRow, ...]:  # fmt: skip
    """Every role of `ops` (all of a phase's ops; `roles[i]` is the role of `ops[i]`, `terms[i]`
    its compute, memory and communication seconds at the roofs, compute at its own dtype's
    peak), heaviest first; `bound` names the limit from the role's summed terms."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, (op, role) in enumerate(zip(ops, roles, strict=True)):
        groups.setdefault((role, op.kind), []).append(i)
    rows = []
    for (role, kind), indices in groups.items():
        members = [ops[i] for i in indices]
        seconds = sum(o.seconds for o in members)
        flops = sum(o.flops for o in members)
        hbm = sum(o.hbm_bytes for o in members)
        moved = hbm + sum(o.dm_bytes for o in members)
        summed = tuple(sum(terms[i][k] for i in indices) for k in range(3))
        layers = len({o.layer for o in members if o.layer >= 0})
        rows.append(
            OpRoleRow(
                role=role, kind=kind, count=len(members), layers=layers, seconds=seconds,
                seconds_per_layer=seconds / (layers or len(members)),
                share=seconds / phase_seconds if phase_seconds else 0.0,
                tensor_unit_seconds=sum(o.tensor_unit_seconds for o in members), flops=flops, hbm_bytes=hbm,
                intensity=flops / moved if moved else 0.0, hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=sum(o.roofline_seconds for o in members), bound=bound(seconds, *summed),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: (-r.seconds, r.role))
    return tuple(rows)
