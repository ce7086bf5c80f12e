"""From a graph to a Program: fuse, place, tile, and emit commands with their dependencies.

Per pass: its HBM inputs stream in tile by tile on the TensorDMA context (double buffered: the
load of tile t waits until the pass two tiles back has finished, so two tiles are in flight),
the Tensor Unit runs each tile on the main context, and results that live in HBM are stored
back. Weights therefore prefetch during the previous pass's compute, and a decode step is
bounded by how fast HBM delivers its weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir import Graph, analyze
from ir.analysis import node_cost
from simulator.program import OpInfo, Program, ProgramBuilder
from tcp_compiler.errors import TcpcError
from tcp_compiler.mapping.fusion import FusedOp, fuse
from tcp_compiler.mapping.machine import Machine
from tcp_compiler.mapping.placement import EinsumShape, Placement, place
from tcp_compiler.mapping.residency import HBM, residency

# A pass's HBM inputs stream in tiles of DM / TILE_DIVISOR bytes (16 MiB on RNGD): large enough
# that DMA start-ups cost a few per cent, small enough that the tiles in flight use a fraction of DM.
TILE_DIVISOR = 16
MAX_TILES = 16


@dataclass
class _State:
    builder: ProgramBuilder
    done: dict[str, int]  # value -> the command after which it is in memory
    mains: list[int]  # every main-context command so far, in order


def schedule(graph: Graph, machine: Machine, chip: int = 0) -> Program:
    """The Program of one chip running `graph` (an SPMD graph's collectives use the links)."""
    state = _State(ProgramBuilder(), {}, [])
    where = residency(graph, machine)
    for op in fuse(graph):
        if op.kind == "dma":
            _dma(graph, op, machine, where, state, chip)
        elif op.kind == "collective":
            _collective(graph, op, machine, state, chip)
        else:
            _pass(graph, op, machine, where, state, chip)
    return state.builder.build()


def _deps(op: FusedOp, state: _State) -> list[int]:
    return [state.done[v] for v in op.inputs if v in state.done]


def _hbm_traffic(graph: Graph, op: FusedOp, where: dict[str, str]) -> tuple[int, int, int]:
    """(HBM bytes in, HBM bytes out, DM bytes in + out) of a pass."""
    hbm_in = sum(graph[v].type.nbytes for v in op.inputs if where.get(v) == HBM and graph[v].kind != "const")
    dm_in = sum(graph[v].type.nbytes for v in op.inputs if where.get(v) != HBM and graph[v].kind != "const")
    hbm_out = sum(graph[v].type.nbytes for v in op.outputs if where[v] == HBM)
    dm_out = sum(graph[v].type.nbytes for v in op.outputs if where[v] != HBM)
    return hbm_in, hbm_out, dm_in + dm_out


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _transfer(
    b: ProgramBuilder, index: int, nbytes: int, machine: Machine, hbm_sides: int, deps, chip: int
) -> int:
    """One TensorDMA move of `nbytes`; `hbm_sides`: how many of its ends (source, destination) are
    in HBM. Uncontended it runs at the DMA engines' aggregate rate after its start-up; the
    simulator shares DMA and HBM bandwidth among the moves in flight."""
    rate = machine.dma_bytes_per_cycle
    if hbm_sides:  # HBM serves each end it holds: a move can go no faster than that
        rate = min(rate, machine.hbm_bytes_per_cycle / hbm_sides)
    cycles = machine.dma_startup + math.ceil(nbytes / rate)
    return b.command(
        "dma", index, cycles, deps, latency=machine.dma_startup, moved=nbytes, chip=chip,
        hbm_bytes=nbytes * hbm_sides, dm_bytes=nbytes * (2 - hbm_sides), busy={"tensor_dma": cycles},
    )  # fmt: skip


def _vector_cycles(graph: Graph, op: FusedOp, machine: Machine, slices: int) -> tuple[int, int]:
    """(throughput cycles, latency) of the pass's element-wise and reduction work on the VE."""
    vector = [n for n in op.nodes if n.kind != "einsum"]
    if not vector:
        return 0, 0
    elements = max(
        max(graph[o].type.numel for o in n.operands) if n.operands else n.type.numel for n in vector
    )
    ways = machine.float_ways if any(n.type.dtype.is_float for n in vector) else machine.int_ways
    throughput = math.ceil(elements / (slices * ways))
    latency = machine.alu_latency * len(vector)
    if any(n.kind in ("reduce", "topk") for n in vector):
        latency += machine.reduce_hop_cycles * min(slices, machine.ring_slices)
    return throughput, latency


def _pass(graph: Graph, op: FusedOp, machine: Machine, where, state: _State, chip: int) -> None:
    b = state.builder
    flops = sum(node_cost(graph, n).flops for n in op.nodes)
    hbm_in, hbm_out, dm_bytes = _hbm_traffic(graph, op, where)
    placement: Placement | None = None
    einsum = op.contraction
    if einsum is not None:
        operands = tuple(graph[o].type for o in einsum.operands)
        placement = place(EinsumShape.of(einsum.attrs["eq"], operands, einsum.type), machine)
        slices = placement.slices_used
        compute, latency = placement.cycles - placement.latency, placement.latency
    else:
        slices, compute, latency = machine.slices, 0, 0
    vector, vector_latency = _vector_cycles(graph, op, machine, slices)
    fetch = math.ceil(dm_bytes / (slices * machine.fetch_main))
    main_cycles = max(compute, vector, fetch, 1) + latency + vector_latency
    tiles = max(
        placement.tiles if placement else 1,
        min(MAX_TILES, math.ceil(hbm_in / (machine.dm_bytes // TILE_DIVISOR))),
    )
    where_placed = placement.describe(machine) if placement else ""
    info = OpInfo(op.name, "pass", op.layer, tuple(n.name for n in op.nodes), where_placed)
    index = b.op(info)
    deps = _deps(op, state)
    last = None
    for f, lin, lout, dm, cyc in zip(
        _split(flops, tiles),
        _split(hbm_in, tiles),
        _split(hbm_out, tiles),
        _split(dm_bytes, tiles),
        _split(main_cycles, tiles),
        strict=True,
    ):
        load = None
        if lin:
            gate = state.mains[-2] if len(state.mains) >= 2 else None  # two tiles in flight
            load_deps = [gate] + [state.done[v] for v in op.inputs if v in state.done and where.get(v) == HBM]
            load = _transfer(b, index, lin, machine, 1, load_deps, chip)
        busy = {"fetch": math.ceil(cyc * fetch / main_cycles) if main_cycles else 0, "commit": 0}
        if placement is not None:
            busy["contraction"] = math.ceil(placement.compute_cycles / tiles)
            busy["reducer"] = busy["contraction"]
            busy["switch"] = math.ceil(placement.supply_cycles / tiles)
            busy["commit"] = math.ceil(placement.commit_cycles / tiles)
            busy["trf_load"] = math.ceil(placement.reload_cycles / tiles)
        busy["vector"] = math.ceil(vector / tiles)
        # Tiles run in order on the main context; a tile's result store does not hold up the next.
        main = b.command("main", index, cyc, [load, *deps], chip=chip, flops=f, dm_bytes=dm, busy=busy)
        state.mains.append(main)
        last = main
        last = _transfer(b, index, lout, machine, 1, [main], chip) if lout else main
    for v in op.outputs:
        state.done[v] = last


def _dma(graph: Graph, op: FusedOp, machine: Machine, where, state: _State, chip: int) -> None:
    (node,) = op.nodes
    cost = node_cost(graph, node)
    moved = cost.bytes_written  # TensorDMA moves what it writes; it reads the same bytes
    index = state.builder.op(OpInfo(op.name, node.kind, op.layer, (node.name,)))
    sides = _hbm_sides(node.name, op, where)
    cmd = _transfer(state.builder, index, moved, machine, sides, _deps(op, state), chip)
    state.done[node.name] = cmd


def _hbm_sides(name: str, op: FusedOp, where) -> int:
    """How many ends of a move are in HBM: the source (any input) and the destination."""
    return int(any(where.get(v) == HBM for v in op.inputs)) + int(where[name] == HBM)


def _collective(graph: Graph, op: FusedOp, machine: Machine, state: _State, chip: int) -> None:
    (node,) = op.nodes
    chips = node.attrs["chips"]
    if chips > machine.chips:
        raise TcpcError(f"%{node.name} spans {chips} chips but hardware '{machine.name}' has {machine.chips}")
    cost = node_cost(graph, node)
    index = state.builder.op(OpInfo(op.name, node.kind, op.layer, (node.name,)))
    link = machine.link_latency_cycles + math.ceil(cost.link_bytes / machine.link_bytes_per_cycle)
    send = state.builder.command(
        "link", index, link, _deps(op, state), chip=chip, link_bytes=cost.link_bytes, busy={"chip_link": link}
    )
    last = send
    if cost.flops:
        vector = math.ceil(node.type.numel / (machine.slices * machine.float_ways))
        last = state.builder.command(
            "main",
            index,
            vector,
            [send],
            chip=chip,
            flops=cost.flops,
            dm_bytes=cost.bytes,
            busy={"vector": vector},
        )
        state.mains.append(last)
    state.done[node.name] = last


def program_flops(program: Program) -> int:
    return int(program.flops.sum())


def graph_flops(graph: Graph) -> int:
    return analyze(graph).total.flops
