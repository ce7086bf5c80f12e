"""Op roles: one op across layers (`l0.down` ... `l79.down` are role `down`), summed.

A top-ops list of an 80-layer model is the same op eighty times; grouping by role says which
kind of work the time goes to, how many ops share it, and what one layer's instance costs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

from tcp_compiler.frontend.builder.core import role_in_layer
from tcp_compiler.report.types import OpRoleRow, OpRow

# A tile index of the online-softmax rewrite (tcp_compiler.passes.online_softmax names a tile's
# values `{axis}{start}` and `blk{j}`): axis names start with a capital, layer prefixes do not.
_TILE = re.compile(r"^(blk|[A-Z][A-Za-z_]*)\d+$")

Roofline = Callable[[float, float, float], tuple[float, float, float]]
Bounder = Callable[..., str]


def role_of(name: str, layer: int) -> str:
    """The op's role in its layer (the builder's naming undone), tile indices read `*`."""
    return _untiled(role_in_layer(name, layer))


@lru_cache(maxsize=1 << 16)
def _untiled(name: str) -> str:
    """The name with tile indices read `*` (every layer repeats its tiles' names)."""
    return ".".join(re.sub(_TILE, lambda m: f"{m[1]}*", part) for part in name.split("."))


def op_roles(
    ops: Sequence[OpRow], phase_seconds: float, roofline: Roofline, bound: Bounder
) -> tuple[OpRoleRow, ...]:
    """Every role of `ops` (all of a phase's ops), heaviest first; `roofline(flops, hbm, link)`
    gives the compute, memory and communication seconds, `bound` names the limit from them."""
    groups: dict[tuple[str, str], list[OpRow]] = {}
    for op in ops:
        groups.setdefault((role_of(op.name, op.layer), op.kind), []).append(op)
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
