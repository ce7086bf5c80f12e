"""Where each axis of an einsum goes on the Tensor Unit, and what that costs.

Axes play one of four roles, seen from the operand held stationary in the TRF:
  K  contracted (in both operands, not the result): Packet (one 64 B packet per lane per cycle),
     the rest over Time, summed in the accumulators;
  N  only in the stationary operand and the result: Lanes (8 stationary rows), then Slices, Time;
  M  only in the streamed operand and the result: Slices, then Time (each streamed packet is
     broadcast to the 8 lanes and reused over N's time steps);
  B  in both operands and the result (batch, heads): Slices, then Time, each with its own
     stationary tile.
Candidates differ in which operand is stationary, how the chip's slices split among N, M and B,
and in how many sequential N passes the stationary rows are swept (each pass streams all of M
again, but holds fewer stationary rows per slice, so more streamed rows share each TRF load);
the cost model keeps the cheapest. Every limit comes from the Hardware (hardware spec).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ir import DType, TensorType
from ir.ops.einsum import parse_equation
from simulator.targets.rngd import units
from simulator.targets.rngd.mapping.lanes import (
    Diverged,
    Lanes,
    any_lane,
    first_difference,
    has_lanes,
    lane_values,
    maximum,
    minimum,
)
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.spec import Hardware
from simulator.targets.rngd.units import COMMIT, CONTRACTION, ceil_div


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
        names = tuple(name for name, _ in self.sizes)
        return {r: list(axes) for r, axes in _roles(self.operands, self.output, names, stationary).items()}

    def size(self, names: list[str]) -> int:
        sizes = dict(self.sizes)
        return math.prod(sizes[n] for n in names)

    @property
    def macs(self) -> int:
        return math.prod(s for _, s in self.sizes)


@lru_cache(maxsize=1024)
def _roles(operands, output, names: tuple[str, ...], stationary: int) -> dict[str, tuple[str, ...]]:
    """Each axis's role with operand `stationary` in the TRF (the einsum's sizes do not matter:
    decode steps ask again for every length)."""
    s, t = set(operands[stationary]), set(operands[1 - stationary])
    out = set(output)
    roles: dict[str, list[str]] = {"K": [], "N": [], "M": [], "B": []}
    for name in names:
        if name in s and name in t:
            roles["B" if name in out else "K"].append(name)
        elif name in s:
            roles["N" if name in out else "K"].append(name)
        else:
            roles["M" if name in out else "K"].append(name)
    return {r: tuple(axes) for r, axes in roles.items()}


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
    n_passes: int  # sequential sweeps over N, each streaming all of M
    compute_cycles: int
    supply_cycles: int
    reload_cycles: int
    commit_cycles: int
    latency: int

    @property
    def cycles(self) -> int:
        return (
            maximum(self.compute_cycles, self.supply_cycles, self.reload_cycles, self.commit_cycles)
            + self.latency
        )

    @property
    def bound(self) -> str:
        terms = {
            CONTRACTION.name: self.compute_cycles,
            "stream fetch": self.supply_cycles,
            "TRF reload": self.reload_cycles,
            COMMIT.name: self.commit_cycles,
        }
        return max(terms, key=terms.get)

    @property
    def slices_used(self) -> int:
        return math.prod(n for _, n in self.slices)

    def clusters(self, hw: Hardware) -> int:
        """Clusters the pass spans: its slices fill one cluster's ring before using the next."""
        return math.ceil(self.slices_used / hw.slices_per_cluster)

    def describe(self, hw: Hardware) -> str:
        roles = dict(self.roles)
        parts = [f"TRF<-op{self.stationary}", f"Cluster={self.clusters(hw)}"]
        for role, n in self.slices:
            if any_lane(n > 1):
                parts.append(f"Slice[{role}:{'.'.join(roles[role])}]={n}")
        parts.append(f"Lane[N]={self.lanes}")
        parts.append(f"Packet[K:{'.'.join(roles['K']) or '-'}]={self.packet}")
        parts.append("Time[" + ", ".join(f"{r}={n}" for r, n in self.time if any_lane(n > 1)) + "]")
        parts.append(f"tiles={self.tiles}")
        if any_lane(self.n_passes > 1):
            parts.append(f"N-passes={self.n_passes}")
        return " ".join(parts)


def _candidates(hw: Hardware, n: int, m: int, b: int, dtype) -> np.ndarray:
    """Every split of the slices among N, B and M (powers of two) with every power-of-two count of
    sequential N passes that leaves each a full lane group per slice, as rows (s_n, s_m, s_b, p),
    in the order of nested loops over s_n, s_b, s_m, p (ties go to the first)."""
    return _candidate_grid(*_grid_args(hw, n, m, b), dtype)


def _grid_args(hw: Hardware, n: int, m: int, b: int) -> tuple[int, int, int, int, int]:
    """What the candidate grid depends on. Only powers of two are compared with n, m and b (with
    power-of-two lanes, p * s_n * lanes is one too), so their largest powers of two below them
    give the same grid: decode steps whose KV length differs share it."""
    lanes = hw.chip.lanes_per_slice
    n = _floor_pow2(n) if lanes & (lanes - 1) == 0 else n
    return hw.slices, lanes, n, _floor_pow2(m), _floor_pow2(b)


def _floor_pow2(x: int) -> int:
    return 1 << (x.bit_length() - 1) if x > 0 else x


@lru_cache(maxsize=4096)
def _candidate_grid(slices: int, lanes: int, n: int, m: int, b: int, dtype=np.int64) -> np.ndarray:
    """The candidates as one masked grid of exponents (no Python loop per candidate)."""
    top = slices.bit_length()
    passes_top = max(1, n // lanes).bit_length()
    e_n, e_b, e_m, e_p = np.meshgrid(
        np.arange(min(slices, n).bit_length()), np.arange(top), np.arange(top), np.arange(passes_top),
        indexing="ij",
    )  # fmt: skip
    s_n, s_b, s_m, p = (np.left_shift(1, e).astype(np.int64) for e in (e_n, e_b, e_m, e_p))
    keep = (
        (s_n * s_b <= slices) & (s_b <= b)
        & (s_n * s_b * s_m <= slices) & (s_m <= m)
        & (p <= np.maximum(1, n // (s_n * lanes)))
    )  # fmt: skip
    grid = np.stack([s_n[keep], s_m[keep], s_b[keep], p[keep]], axis=1).astype(dtype)
    grid.setflags(write=False)
    return grid


def _int_type(shape: EinsumShape):
    """int64 while every product fits; Python ints (exact, slower) for absurdly large einsums."""
    # The largest product is all axes x operand bits (the DM footprint numerator).
    return np.int64 if shape.macs * 2 * 64 < 2**62 else object


_PLACED: dict[tuple[EinsumShape, Hardware, MappingPolicy], Placement] = {}


def place(shape: EinsumShape, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> Placement:
    """The cheapest placement of the einsum on one chip (cached by shape and hw).

    All candidates are costed at once with integer arithmetic; ties go to fewer slices, then to
    the first candidate (operand 0 stationary first, then N, B, M splits in increasing order).
    """
    if has_lanes(size for _, size in shape.sizes):
        return _place_lanes(shape, hw, policy)
    found = _PLACED.get((shape, hw, policy))
    if found is None:
        place_ahead([shape], hw, policy)
        found = _PLACED[(shape, hw, policy)]
    return found


def is_placed(shape: EinsumShape, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> bool:
    """Whether `place` has the shape's placement already (a decode step then places no batch)."""
    return (shape, hw, policy) in _PLACED


def place_ahead(shapes: list[EinsumShape], hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> None:
    """Places the shapes not placed yet, those that differ only in axis sizes with the same
    candidates in one batch of arrays (decode steps place the next lengths' einsums together:
    one numpy pass over all of them costs what one shape does). The same integers as one at a time."""
    todo = [sh for sh in dict.fromkeys(shapes) if (sh, hw, policy) not in _PLACED]
    if len(_PLACED) + len(todo) > 8192:
        _PLACED.clear()
        todo = list(dict.fromkeys(shapes))  # every one asked for is placed on return
    batches: dict[tuple, list[EinsumShape]] = {}
    for sh in todo:
        batches.setdefault(_batch_key(sh, hw), []).append(sh)
    for batch in batches.values():
        for sh, placement in zip(batch, _place_batch(batch, hw, policy), strict=True):
            _PLACED[(sh, hw, policy)] = placement


def _batch_key(shape: EinsumShape, hw: Hardware) -> tuple:
    """Shapes with equal keys have the same roles, dtypes and candidate grids."""
    grids = []
    for stationary in (0, 1):
        roles = shape.roles(stationary)
        grids.append(_grid_args(hw, *(shape.size(roles[r]) for r in "NMB")))
    names = tuple(name for name, _ in shape.sizes)
    return (shape.operands, shape.output, names, shape.dtype, shape.out_dtype, _int_type(shape), *grids)


def _place_batch(shapes: list[EinsumShape], hw: Hardware, policy: MappingPolicy) -> list[Placement]:
    """Placements of shapes alike but for their sizes (equal _batch_key), from one set of arrays."""
    first = shapes[0]
    sizes = {st: np.array([tuple(sh.size(roles[r]) for r in "KNMB") for sh in shapes], _int_type(first))
             for st, roles in ((st, first.roles(st)) for st in (0, 1))}  # fmt: skip
    win = _winners(first, sizes, hw, policy)
    return [
        _placement(sh, hw, policy, int(win.stationary[i]), win.named[win.stationary[i]],
                   tuple(int(v) for v in win.sizes[i]), tuple(int(v) for v in win.split[i]),
                   {k: int(v[i]) for k, v in win.chosen.items()})  # fmt: skip
        for i, sh in enumerate(shapes)
    ]


def _place_lanes(shape: EinsumShape, hw: Hardware, policy: MappingPolicy) -> Placement:
    """The placement of a block of shapes whose sizes are Lanes, as one Placement with Lanes
    fields where the lanes differ, their slice splits included (simulator.targets.rngd.mapping.lanes);
    Diverged when the lanes' candidate grids or stationary operands differ."""
    count = next(len(size) for _, size in shape.sizes if isinstance(size, Lanes))
    axis = {name: lane_values(size, count) for name, size in shape.sizes}
    top = {name: int(values.max()) for name, values in axis.items()}
    dtype = _int_type(replace(shape, sizes=tuple(top.items())))
    if dtype is not np.int64:
        raise Diverged  # sizes beyond int64 products: placed one by one with Python ints
    sizes = {}
    for st in (0, 1):
        roles = shape.roles(st)
        columns = [np.prod([axis[n] for n in roles[r]] or [np.ones(count, dtype)], axis=0, dtype=dtype)
                   for r in "KNMB"]  # fmt: skip
        grids = [_grid_args(hw, *row) for row in zip(*(c.tolist() for c in columns[1:]), strict=True)]
        if grids.count(grids[0]) < count:  # the lanes have different candidates
            raise Diverged(next(k for k, grid in enumerate(grids) if grid != grids[0]))
        sizes[st] = np.stack(columns, axis=1)
    win = _winners(shape, sizes, hw, policy)
    if (win.stationary != win.stationary[0]).any():
        raise Diverged(first_difference(win.stationary))  # the other operand stationary from here
    stationary = int(win.stationary[0])
    return _placement(
        shape, hw, policy, stationary, win.named[stationary], tuple(_lanes_of(c) for c in win.sizes.T),
        tuple(_lanes_of(c) for c in win.split.T), {k: _lanes_of(v) for k, v in win.chosen.items()},
    )  # fmt: skip


def _lanes_of(values: np.ndarray):
    """A Python int when every lane holds it, else Lanes (bools stay bools)."""
    if (values == values[0]).all():
        return values[0].item()
    return Lanes(values)


@dataclass
class _Winners:
    """Per shape of a batch: the winning stationary operand, its role sizes and split, cost terms."""

    stationary: np.ndarray  # [shapes]
    named: dict[int, tuple]  # stationary -> ((role, axis names), ...)
    sizes: np.ndarray  # [shapes, K N M B]
    split: np.ndarray  # [shapes, (s_n, s_m, s_b, passes)]
    chosen: dict[str, np.ndarray]  # cost term -> [shapes]


def _winners(
    first: EinsumShape, sizes: dict[int, np.ndarray], hw: Hardware, policy: MappingPolicy
) -> _Winners:
    """Each shape's cheapest candidate, by place's rule (cycles, then slices, then passes; operand 0
    stationary on ties), from [shapes, candidates] arrays; `sizes[stationary]` holds each shape's
    K, N, M, B sizes with that operand stationary (the shapes share roles and candidate grids)."""
    count = len(sizes[0])
    best = None
    named = {}
    for stationary in (0, 1):
        roles = first.roles(stationary)
        named[stationary] = tuple((r, tuple(roles[r])) for r in "KNMB")
        columns = sizes[stationary].T[:, :, None]  # [K N M B][shape][1]
        # A size the batch shares is one row: the terms that depend on it alone are computed once
        # per candidate, not per shape (decode steps vary one axis), and broadcast as before.
        by_role = tuple(c[:1] if (c == c[0]).all() else c for c in columns)
        splits = _candidates(hw, *(int(v) for v in sizes[stationary][0, 1:]), sizes[stationary].dtype)
        terms = _costs(first, hw, policy, by_role, splits)
        grid = (count, len(splits))
        compute, supply, reload, commit = terms["bounds"]
        cycles = np.broadcast_to(np.maximum(np.maximum(compute, supply), np.maximum(reload, commit))
                                 + terms["latency"], grid)  # fmt: skip
        used = splits[:, :3].prod(axis=1)
        pick = first_best(cycles, used, splits[:, 3])
        rows = np.arange(count)
        key = (cycles[rows, pick], used[pick])
        chosen = {k: _chosen(v, rows, pick) for k, v in terms.items() if k != "bounds"}
        candidate = _Winners(np.full(count, stationary), named, sizes[stationary], splits[pick], chosen)
        if best is None:
            best, best_key = candidate, key
            continue
        better = (key[0] < best_key[0]) | ((key[0] == best_key[0]) & (key[1] < best_key[1]))
        best = _Winners(
            np.where(better, stationary, best.stationary), named,
            np.where(better[:, None], candidate.sizes, best.sizes),
            np.where(better[:, None], candidate.split, best.split),
            {k: np.where(better, v, best.chosen[k]) for k, v in chosen.items()},
        )  # fmt: skip
    return best


def _chosen(term: np.ndarray, rows: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """term[row, pick[row]] per row of a [shapes or 1, candidates or 1] cost term."""
    term = np.asarray(term)
    if term.ndim < 2:
        term = term.reshape((1,) * (2 - term.ndim) + term.shape)
    return term[rows if term.shape[0] > 1 else 0 * rows, pick if term.shape[1] > 1 else 0 * pick]


def first_best(cycles: np.ndarray, slices: np.ndarray, passes: np.ndarray) -> np.ndarray:
    """Per row of `cycles` [shapes, candidates], the first candidate with the least (cycles,
    slices used, passes): what a stable lexsort puts first, found by one argmin of the three
    packed into one int64 when they fit (a lexsort of many rows costs ten times more)."""
    low, high = int(slices.max()).bit_length(), int(passes.max()).bit_length()
    if cycles.dtype == np.int64 and cycles.min() >= 0 and int(cycles.max()) < 1 << (62 - low - high):
        return ((cycles << (low + high)) | (slices << high) | passes).argmin(axis=-1)
    grid = cycles.shape
    return np.lexsort((np.broadcast_to(passes, grid), np.broadcast_to(slices, grid), cycles), axis=-1)[:, 0]


def _costs(shape: EinsumShape, hw: Hardware, policy: MappingPolicy, sizes, splits: np.ndarray) -> dict:
    """The cost terms of every candidate split (arrays over candidates)."""
    k, n, m, b = sizes
    s_n, s_m, s_b, passes = splits[:, 0], splits[:, 1], splits[:, 2], splits[:, 3]
    bits, out_bits = shape.dtype.bits, shape.out_dtype.bits
    # n_s: stationary rows per slice per pass
    n_s, m_s, b_s = ceil_div(ceil_div(n, passes), s_n), ceil_div(m, s_m), ceil_div(b, s_b)
    per_packet = hw.packet_elements(shape.dtype)
    k_packets = ceil_div(k, per_packet)
    lane_groups = ceil_div(n_s, hw.chip.lanes_per_slice)
    trf_budget = hw.memory.trf_bytes_per_slice // policy.trf_share
    compute = units.contraction_cycles(passes, b_s, m_s, lane_groups, k_packets)
    supply = units.switch_cycles(hw, passes, b_s, m_s, k_packets)
    tile_bytes = ceil_div(n_s * k * bits, 8)
    m_tile = np.maximum(1, np.minimum(m_s, hw.contraction.accumulators_per_slice // np.maximum(1, n_s)))
    resident = tile_bytes <= trf_budget
    loads = passes * b_s * np.where(resident, 1, ceil_div(m_s, m_tile))
    reload = units.trf_load_cycles(hw, loads, tile_bytes, resident)
    first_load = units.first_trf_load_cycles(hw, tile_bytes, trf_budget)
    commit = units.commit_cycles(hw, passes * b_s * m_s * n_s, out_bits)
    used = s_n * s_m * s_b
    latency = (
        first_load
        + hw.reducer_latency(shape.dtype)
        + hw.switch.hop_cycles * np.minimum(used, hw.switch.ring_slices)
    )
    # Operands and result spread over the slices in use (a broadcast operand is stored once).
    dm_tile = ceil_div((b * m * k + b * n * k) * bits + b * m * n * out_bits, 8 * used)
    tiles = np.maximum(1, ceil_div(dm_tile, hw.memory.dm_bytes_per_slice // policy.einsum_dm_share))
    return {
        "bounds": (compute, supply, reload, commit),
        "latency": latency,
        "n_s": n_s, "m_s": m_s, "b_s": b_s, "k_packets": k_packets, "lane_groups": lane_groups,
        "m_tile": m_tile, "tile_bytes": tile_bytes, "resident": resident, "dm_tile": dm_tile, "tiles": tiles,
        "compute": compute, "supply": supply, "reload": reload, "commit": commit,
    }  # fmt: skip


def _placement(
    shape: EinsumShape, hw: Hardware, policy: MappingPolicy, stationary, named, sizes, split, t: dict
) -> Placement:
    """The winning candidate as a Placement; `t` holds its cost terms (from _costs)."""
    s_n, s_m, s_b, passes = split
    trf_budget = hw.memory.trf_bytes_per_slice // policy.trf_share
    return Placement(
        stationary=stationary,
        roles=named,
        slices=(("N", s_n), ("M", s_m), ("B", s_b)),
        lanes=minimum(hw.chip.lanes_per_slice, t["n_s"]),
        packet=minimum(hw.packet_elements(shape.dtype), sizes[0]),
        time=(("B", t["b_s"]), ("M", t["m_s"]), ("N", t["lane_groups"] * passes), ("K", t["k_packets"])),
        m_tile=t["m_tile"],
        accumulators=t["m_tile"] * minimum(t["n_s"], hw.contraction.accumulators_per_slice),
        trf_tile_bytes=t["tile_bytes"] if t["resident"] else minimum(t["tile_bytes"], trf_budget),
        trf_resident=bool(t["resident"]),
        dm_tile_bytes=ceil_div(t["dm_tile"], t["tiles"]),
        tiles=t["tiles"],
        n_passes=passes,
        compute_cycles=t["compute"],
        supply_cycles=t["supply"],
        reload_cycles=t["reload"],
        commit_cycles=t["commit"],
        latency=t["latency"],
    )
