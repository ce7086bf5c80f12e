"""Where each axis of an einsum goes on the Tensor Unit, and what that costs.

Axes play one of four roles, seen from the operand held stationary in the TRF:
  K  contracted (in both operands, not the result): Packet (one 64 B packet per lane per cycle),
     the rest over Time, summed in the accumulators;
  N  only in the stationary operand and the result: Lanes (8 stationary rows), then Slices, Time;
  M  only in the streamed operand and the result: Slices, then Time (each streamed packet is
     broadcast to the 8 lanes and reused over N's time steps);
  B  in both operands and the result (batch, heads): Slices, then Time, each with its own
     stationary tile.
Candidates differ in which operand is stationary and how the chip's slices split among N, M
and B; the cost model keeps the cheapest. Every limit comes from the Machine (hardware spec).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ir import DType, TensorType
from ir.ops.einsum import parse_equation
from tcp_compiler.mapping.machine import Machine


@dataclass(frozen=True)
class EinsumShape:
    """What placement depends on: axis sizes and roles, operand and result dtypes (cache key)."""

    operands: tuple[tuple[str, ...], tuple[str, ...]]
    output: tuple[str, ...]
    sizes: tuple[tuple[str, int], ...]
    dtype: DType
    out_dtype: DType

    @staticmethod
    def of(eq: str, operand_types: tuple[TensorType, TensorType], out: TensorType) -> EinsumShape:
        inputs, output = parse_equation(eq)
        sizes = {a.name: a.size for t in operand_types for a in t.axes}
        return EinsumShape(
            (tuple(inputs[0]), tuple(inputs[1])),
            tuple(output),
            tuple(sorted(sizes.items())),
            operand_types[0].dtype,
            out.dtype,
        )

    def roles(self, stationary: int) -> dict[str, list[str]]:
        s, t = set(self.operands[stationary]), set(self.operands[1 - stationary])
        out = set(self.output)
        roles: dict[str, list[str]] = {"K": [], "N": [], "M": [], "B": []}
        for name, _ in self.sizes:
            if name in s and name in t:
                roles["B" if name in out else "K"].append(name)
            elif name in s:
                roles["N" if name in out else "K"].append(name)
            else:
                roles["M" if name in out else "K"].append(name)
        return roles

    def size(self, names: list[str]) -> int:
        sizes = dict(self.sizes)
        return math.prod(sizes[n] for n in names)

    @property
    def macs(self) -> int:
        return math.prod(s for _, s in self.sizes)


@dataclass(frozen=True)
class Placement:
    stationary: int  # operand index held in the TRF
    roles: tuple[tuple[str, tuple[str, ...]], ...]  # role -> axis names
    slices: tuple[tuple[str, int], ...]  # role -> slices it spans (product <= slices per chip)
    lanes: int  # N elements side by side on the lanes (<= lanes per slice)
    packet: int  # K elements per packet (<= packet bytes / operand bytes)
    time: tuple[tuple[str, int], ...]  # role -> time steps per slice
    m_tile: int  # streamed rows whose outputs the accumulators hold while K is swept
    accumulators: int  # accumulator cells in use per slice
    trf_tile_bytes: int  # stationary bytes per slice for one batch element
    trf_resident: bool  # the stationary tile stays in the TRF across M tiles
    dm_tile_bytes: int  # DM bytes per slice per tile (operands + result)
    tiles: int  # outer tiles the pass is cut into so one fits half of each slice's DM
    compute_cycles: int
    supply_cycles: int
    reload_cycles: int
    commit_cycles: int
    latency: int

    @property
    def cycles(self) -> int:
        return (
            max(self.compute_cycles, self.supply_cycles, self.reload_cycles, self.commit_cycles)
            + self.latency
        )

    @property
    def bound(self) -> str:
        terms = {
            "contraction": self.compute_cycles,
            "stream fetch": self.supply_cycles,
            "TRF reload": self.reload_cycles,
            "commit": self.commit_cycles,
        }
        return max(terms, key=terms.get)

    @property
    def slices_used(self) -> int:
        return math.prod(n for _, n in self.slices)

    def clusters(self, machine: Machine) -> int:
        """Clusters the pass spans: its slices fill one cluster's ring before using the next."""
        return math.ceil(self.slices_used / machine.slices_per_cluster)

    def describe(self, machine: Machine) -> str:
        roles = dict(self.roles)
        parts = [f"TRF<-op{self.stationary}", f"Cluster={self.clusters(machine)}"]
        for role, n in self.slices:
            if n > 1:
                parts.append(f"Slice[{role}:{'.'.join(roles[role])}]={n}")
        parts.append(f"Lane[N]={self.lanes}")
        parts.append(f"Packet[K:{'.'.join(roles['K']) or '-'}]={self.packet}")
        parts.append("Time[" + ", ".join(f"{r}={n}" for r, n in self.time if n > 1) + "]")
        parts.append(f"tiles={self.tiles}")
        return " ".join(parts)


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


@lru_cache(maxsize=4096)
def place(shape: EinsumShape, machine: Machine) -> Placement:
    """The cheapest placement of the einsum on one chip (cached by shape and machine)."""
    best: Placement | None = None
    for stationary in (0, 1):
        roles = shape.roles(stationary)
        k, n, m, b = (shape.size(roles[r]) for r in "KNMB")
        for s_n in _powers_of_two(min(machine.slices, n)):
            for s_b in _powers_of_two(min(machine.slices // s_n, b)):
                for s_m in _powers_of_two(min(machine.slices // (s_n * s_b), m)):
                    p = _evaluate(shape, machine, stationary, roles, (k, n, m, b), (s_n, s_m, s_b))
                    if best is None or (p.cycles, p.slices_used) < (best.cycles, best.slices_used):
                        best = p
    assert best is not None
    return best


def _evaluate(shape, machine: Machine, stationary, roles, sizes, split) -> Placement:
    k, n, m, b = sizes
    s_n, s_m, s_b = split
    ebytes = shape.dtype.bits / 8
    out_bytes = shape.out_dtype.bits / 8
    n_s, m_s, b_s = math.ceil(n / s_n), math.ceil(m / s_m), math.ceil(b / s_b)
    per_packet = machine.packet_elements(shape.dtype)
    packet = min(per_packet, k)
    k_packets = math.ceil(k / per_packet)
    lanes = min(machine.lanes, n_s)
    lane_groups = math.ceil(n_s / machine.lanes)
    # One cycle: one streamed packet (K elements of one M row) against 8 stationary rows.
    compute = b_s * m_s * lane_groups * k_packets
    # Fetch delivers `stream_supply_bytes` per cycle; each streamed packet serves lane_groups cycles.
    supply = math.ceil(b_s * m_s * k_packets * machine.packet_bytes / machine.stream_supply_bytes)
    tile_bytes = math.ceil(n_s * k * ebytes)
    m_tile = max(1, min(m_s, machine.accumulators // max(1, n_s)))
    resident = tile_bytes <= machine.trf_bytes_per_slice // 2  # half-file mode: load the next while using one
    loads = b_s * (1 if resident else math.ceil(m_s / m_tile))
    reload = math.ceil(loads * tile_bytes / machine.fetch_sub) if loads > 1 or not resident else 0
    first_load = math.ceil(min(tile_bytes, machine.trf_bytes_per_slice // 2) / machine.fetch_sub)
    commit = math.ceil(b_s * m_s * n_s * out_bytes / machine.commit_main)
    latency = (
        first_load
        + machine.latency(shape.dtype)
        + machine.hop_cycles * min(s_n * s_b * s_m, machine.ring_slices)  # switch broadcast fill
    )
    # Operands and result spread over the slices in use (a broadcast operand is stored once).
    used = s_n * s_m * s_b
    dm_tile = math.ceil(((b * m * k + b * n * k) * ebytes + b * m * n * out_bytes) / used)
    tiles = max(1, math.ceil(dm_tile / (machine.dm_bytes_per_slice // 2)))
    return Placement(
        stationary=stationary,
        roles=tuple((r, tuple(roles[r])) for r in "KNMB"),
        slices=(("N", s_n), ("M", s_m), ("B", s_b)),
        lanes=lanes,
        packet=packet,
        time=(("B", b_s), ("M", m_s), ("N", lane_groups), ("K", k_packets)),
        m_tile=m_tile,
        accumulators=m_tile * min(n_s, machine.accumulators),
        trf_tile_bytes=min(tile_bytes, machine.trf_bytes_per_slice // 2) if not resident else tile_bytes,
        trf_resident=resident,
        dm_tile_bytes=math.ceil(dm_tile / tiles),
        tiles=tiles,
        compute_cycles=compute,
        supply_cycles=supply,
        reload_cycles=reload,
        commit_cycles=commit,
        latency=latency,
    )
