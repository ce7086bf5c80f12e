"""A tensor-parallel all-reduce overlapped with the passes that produce and consume it, by cutting
them all along the tokens (software pipelining).

The all-reduce of a prefill's partial sums [B, S, D] is consumed token by token: the residual add,
the norm and the next projections treat each token's row on its own. Cut the all-reduce and the
run of ops after it into C blocks of S / C tokens: the blocks' rings go on the links one after
the other, and block c's passes start as soon as block c's ring is done, so the Tensor Unit
computes block c while the links carry block c + 1 (and a later all-reduce of the run carries
block c while block c + 1 computes). Nothing is free: every block pays its ring's latencies
again, and a block's passes stream their weights again. The blocks are emitted skewed, as a
software pipeline (mapping/schedule.py: _emit_run).

A run starts at an all_reduce whose result has the token axis, or a sequence-parallel stream's
reduce_scatter or all_gather along it (token_tiles.joins_tokens), or at the projection just
before it that produces its partial sums, when that treats tokens independently, and goes on,
within its decoder layer, through the ops that treat tokens independently and keep their results
in DM (a store to HBM, such as a KV cache, ends it): passes of element-wise ops, casts, einsums in
which the tokens are a streamed (M) axis and reductions over other axes, and further such
collectives. C is
the power of two dividing S that the cost estimate `best_chunks` finds fastest (1: no cut).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ir import Graph, TensorType
from simulator.targets.rngd.mapping.fusion import FusedOp
from simulator.targets.rngd.mapping.residency import writes_hbm
from simulator.targets.rngd.mapping.token_tiles import (
    TOKENS,
    fewest_tokens,
    joins_tokens,
    treats_tokens_apart,
)


def token_run(graph: Graph, ops: list[FusedOp], i: int, where: Mapping[str, str]) -> list[FusedOp]:
    """The run of ops starting at ops[i] that can be cut along the tokens, or []: ops[i] is an
    all-reduce of tokens, or the pass just before one that produces what it reduces (the
    projection whose partial sums it adds up); the run goes on through the ops after the
    all-reduce that consume its result token by token, and needs at least one of them."""
    lead = ops[i]
    if not _joins(lead):
        after = ops[i + 1] if i + 1 < len(ops) else None
        if not (after and _joins(after) and after.inputs[0] in lead.outputs
                and after.layer == lead.layer and _separable(graph, lead, where)):  # fmt: skip
            return []
        lead = after
    run = ops[i : lead.index + 1]
    for op in ops[lead.index + 1 :]:
        if op.layer != lead.layer or not _separable(graph, op, where):
            break
        run.append(op)
    return run if len(run) > lead.index + 1 - i else []


def _joins(op: FusedOp) -> bool:
    return op.kind == "collective" and joins_tokens(op.nodes[0])


def _separable(graph: Graph, op: FusedOp, where: Mapping[str, str]) -> bool:
    """Whether each token's results of `op` need only that token's inputs, kept in DM."""
    if op.kind == "pass" and any(writes_hbm(where[v]) for v in op.outputs):
        return False
    return treats_tokens_apart(graph, op)


def chunked(t: TensorType, chunks: int) -> TensorType:
    """`t` with its tokens cut into `chunks` blocks (one block's type)."""
    if TOKENS not in t.names:
        return t
    return t.with_axes(replace(a, size=a.size // chunks) if a.name == TOKENS else a for a in t.axes)


def candidates(graph: Graph, run: list[FusedOp]) -> list[int]:
    """Block counts to try: the powers of two from 2 that divide the run's tokens (the fewest any
    of its values holds: a sequence-parallel stream's share)."""
    tokens = fewest_tokens(graph, run) or 1
    found, c = [], 2
    while c <= tokens and tokens % c == 0:
        found.append(c)
        c *= 2
    return found


def pipelined(link: int, work: int, chunks: int) -> float:
    """The estimated cycles of a run cut into `chunks` blocks, from its (link cycles, Tensor Unit
    cycles) for all blocks: its blocks' transfers and computations in a pipeline take
    max(L, W) + min(L, W) / C (the first block's other part is exposed); C = 1 is L + W."""
    return max(link, work) + min(link, work) / chunks


def best_chunks(options: dict[int, tuple[int, int]]) -> int:
    """The block count with the least estimated time (`pipelined`), from each count's (link
    cycles, Tensor Unit cycles) for the whole run."""
    return min(options, key=lambda c: (pipelined(*options[c], c), c))
