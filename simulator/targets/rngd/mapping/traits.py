"""What the mapping needs to know about each IR op kind, in one table every mapping step queries.

Ops are grouped once (as tinygrad's GroupOp does): where an op's work runs (a Tensor Unit pass, a
TensorDMA move, the chip links, or nowhere), which pipeline stage of a pass it uses, whether it ends
its pass (a reduction), and whether it is a value already in memory, a view or an immediate. Every
registered op kind must belong to a group: adding an op to ir/ makes this module fail at import
until its traits are said.
"""

from __future__ import annotations

from dataclasses import dataclass

from ir.ops import REGISTRY
from ir.ops.elementwise import BINARY, UNARY
from simulator.targets.rngd.sites import SITES

# Pipeline stages of a Tensor Unit pass, in the order data flows through them (the target's).
STAGES = SITES.stages
CONTRACTION_STAGE, VECTOR_STAGE, CAST_STAGE, TRANSPOSE_STAGE = STAGES

MEMORY = frozenset({"input", "param"})  # values that live in HBM before the program starts
IMMEDIATE = frozenset({"const"})  # scalars carried in the command, no memory
VIEW = frozenset({"reshape"})  # the same bytes under new axes
# TensorDMA moves (dispatch: the token rows of the routed slots, ordered by expert)
DMA = frozenset({"gather", "scatter", "concat", "slice", "dispatch"})
# chip-link transfers: within a tensor-parallel group, and send from one pipeline stage to the next
COLLECTIVE = frozenset({"all_reduce", "reduce_scatter", "all_gather", "send"})
# Vector Engine work that ends its pass (bincount: slots per expert; combine: sum over each token's slots)
REDUCTION = frozenset({"reduce", "topk", "bincount", "combine"})
# Recurrences along a sequence (ir/ops/scan.py): each step reads the state the previous step wrote,
# so a scan run as one op is Vector Engine work that ends its pass (the chunked form the
# chunked_scan pass makes puts its contractions on the Contraction Engine instead).
RECURRENCE = frozenset({"scan", "scan_state", "delta_scan", "delta_scan_state", "recurrence"})
# The element ops on each state element that one step must finish before the next step's can start
# (the rest, such as exp(dt*A) or dt*x*B, do not read the state and run ahead in the pipeline):
# h = a*h + u is a multiply and an add; the delta rule scales by the decay, forms k.h (a multiply
# and an add), subtracts it from v, scales by beta and adds the rank-one update.
STEP_CHAIN = {"scan": 2, "scan_state": 2, "recurrence": 2, "delta_scan": 6, "delta_scan_state": 6}
# grouped_einsum: one einsum per expert's rows, on the Contraction Engine like einsum
STAGE_OF = {
    "einsum": CONTRACTION_STAGE,
    "grouped_einsum": CONTRACTION_STAGE,
    "cast": CAST_STAGE,
    "transpose": TRANSPOSE_STAGE,
}
# conv1d: K multiply-adds per element along the sequence, Vector Engine work; xielu: an activation
# with two trainable scalars (decomposed before mapping, like GELU)
VECTOR = frozenset(UNARY) | frozenset(BINARY) | REDUCTION | RECURRENCE | {"where", "iota", "conv1d", "xielu"}
ELEMENTWISE = frozenset(UNARY) | frozenset(BINARY) | {"cast"}  # may transform weights as they are fetched


@dataclass(frozen=True)
class OpTraits:
    work: str  # "pass" (Tensor Unit), "dma" (TensorDMA), "collective" (chip links), "free" (no work)
    stage: str | None = None  # the pass's pipeline stage (STAGES) for work == "pass"
    ends_pass: bool = False  # a reduction: readers of its result run in the next pass
    in_memory: bool = False  # an input or param: in HBM from the start
    weight: bool = False  # a param: a weight, fixed for the program's life
    immediate: bool = False  # a scalar constant, carried in the command
    view: bool = False  # a reshape: its root's bytes
    elementwise: bool = False  # element-wise, so it can transform weights on the fly
    step_chain: int = 0  # a recurrence: element ops per step that depend on the previous step


def _traits(kind: str) -> OpTraits:
    elementwise = kind in ELEMENTWISE
    if kind in MEMORY | IMMEDIATE | VIEW:
        memory = kind in MEMORY
        return OpTraits(
            "free", in_memory=memory, weight=kind == "param", immediate=kind in IMMEDIATE, view=kind in VIEW
        )
    if kind in DMA:
        return OpTraits("dma")
    if kind in COLLECTIVE:
        return OpTraits("collective")
    if kind in STAGE_OF:
        return OpTraits("pass", STAGE_OF[kind], elementwise=elementwise)
    if kind in VECTOR:
        ends = kind in REDUCTION | RECURRENCE
        chain = STEP_CHAIN.get(kind, 0)
        return OpTraits("pass", VECTOR_STAGE, ends_pass=ends, elementwise=elementwise, step_chain=chain)
    raise TypeError(f"op kind '{kind}' has no mapping traits: add it to a group in {__name__}")


TRAITS: dict[str, OpTraits] = {kind: _traits(kind) for kind in REGISTRY}


def traits(kind: str) -> OpTraits:
    return TRAITS[kind]
