"""Op roles: one op across layers (`l0.down` ... `l79.down` are role `down`), summed.

A top-ops list of an 80-layer model is the same op eighty times; grouping by role says which
kind of work the time goes to, how many ops share it, and what one layer's instance costs. The
role of each op comes with it from the graph's metadata (the builder and the passes record it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tcp_compiler.report.types import OpRoleRow, OpRow

Roofline = Callable[[float, float, float], tuple[float, float, float]]
Bounder = Callable[..., str]


def op_roles(
    ops: Sequence[OpRow], roles: Sequence[str], phase_seconds: float, roofline: Roofline, bound: Bounder
) -> tuple[OpRoleRow, ...]:
    """Every role of `ops` (all of a phase's ops; `roles[i]` is the role of `ops[i]`), heaviest
    first; `roofline(flops, hbm, link)` gives the compute, memory and communication seconds,
    `bound` names the limit from them."""
    groups: dict[tuple[str, str], list[OpRow]] = {}
    for op, role in zip(ops, roles, strict=True):
        groups.setdefault((role, op.kind), []).append(op)
    rows = []
    for (role, kind), members in groups.items():
        seconds = sum(o.seconds for o in members)
        flops = sum(o.flops for o in members)
        hbm = sum(o.hbm_bytes for o in members)
        moved = hbm + sum(o.dm_bytes for o in members)
        terms = roofline(flops, hbm, sum(o.link_bytes for o in members))
        layers = len({o.layer for o in members if o.layer >= 0})
        rows.append(
            OpRoleRow(
                role=role, kind=kind, count=len(members), layers=layers, seconds=seconds,
                seconds_per_layer=seconds / (layers or len(members)),
                share=seconds / phase_seconds if phase_seconds else 0.0,
                tensor_unit_seconds=sum(o.tensor_unit_seconds for o in members), flops=flops, hbm_bytes=hbm,
                intensity=flops / moved if moved else 0.0, hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=sum(o.roofline_seconds for o in members), bound=bound(seconds, *terms),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: (-r.seconds, r.role))
    return tuple(rows)
