"""Where work runs on RNGD: its contexts and units (units.py), the activities the timeline is split
into, the pipeline stages of a Tensor Unit pass, the limiter's causes and roofs in RNGD's words, as
one `Sites`."""

from __future__ import annotations

from simulator.target import Activity, Cause, Roof, Sites
from simulator.targets.rngd.units import CONTEXTS, CONTRACTION, DMA, LINK, MAIN, PE_LINK, SUB, UNITS, VECTOR

# What may be under way at an instant (simulator.occupancy), in bit order.
ACTIVITIES = (
    Activity("hbm_move", DMA.name, "a TensorDMA move touching HBM is transferring bytes (past its start-up)",
             moving=True, hbm=True, during="while HBM moves run"),
    Activity("dma_on_chip", DMA.name, "a TensorDMA move that does not touch HBM is transferring bytes",
             moving=True, hbm=False, during="while on-chip DMA moves run", gloss="moves"),
    Activity("dma_startup", DMA.name, "a TensorDMA command is in its fixed start-up latency", moving=False,
             during="during DMA start-up"),
    Activity("contraction", MAIN.name, "a Tensor Unit pass that uses the Contraction Engine runs",
             unit=CONTRACTION.name, during="while the Contraction Engine runs", gloss="passes"),
    Activity("tensor_unit_other", MAIN.name,
             "a Tensor Unit pass without a contraction (Vector Engine work) runs",
             during="while passes without a contraction run", gloss="(passes without a contraction)"),
    Activity("sub", SUB.name, "a command of the sub pipeline runs", during="while the sub pipeline runs",
             gloss="pipeline"),
    Activity("link", LINK.name, "a chip-link transfer (collective) is under way",
             during="while collectives run", gloss="collectives"),
    Activity("pe_link", PE_LINK.name, "a PE-to-PE transfer within a card (collective between its ranks)",
             during="while reductions between a card's PEs run", gloss="reductions between a card's PEs"),
)  # fmt: skip

# Pipeline stages of a Tensor Unit pass, in the order data flows through them (Fetch -> Switch ->
# Collect -> Contraction -> Vector -> Cast -> Transpose -> Commit); the ops of a fused pass keep it.
STAGES = (CONTRACTION.name, VECTOR.name, "cast", "transpose")

SITES = Sites(
    contexts=CONTEXTS,
    units=UNITS,
    activities=ACTIVITIES,
    stages=STAGES,
    # the time a phase takes beyond its roofline that is a resource below its peak, not idle
    rate_causes=(
        Cause("kernel_launch", "kernel launch", "the host's launch overhead"),
        Cause(
            "hbm_below_peak", "HBM moves below its full rate", "HBM moves in flight but below HBM's full rate"
        ),
        Cause(
            "pipeline_stages",
            "pass stages beyond the contraction",
            "Tensor Unit pass time beyond its contraction (fill, drain, Vector, Commit, TRF loads)",
        ),
        Cause(
            "contraction_placement",
            "contraction lanes left idle by placement",
            "contraction cycles beyond peak (lanes or slices the placement leaves idle)",
        ),
        Cause("link_latency", "chip-link latency", "chip-link time beyond its bytes at full bandwidth"),
    ),  # fmt: skip
    idle_cause="gaps",
    compute=CONTRACTION.name,
    idle_during="with nothing under way",
    idle_gloss="nothing under way",
    # a collective or a move is the reason a unit waits before the passes that run beside it are
    idle_order=(
        "link",
        "pe_link",
        "hbm_move",
        "dma_on_chip",
        "dma_startup",
        "contraction",
        "tensor_unit_other",
        "sub",
    ),  # fmt: skip
    roofs=(
        Roof(
            "compute",
            "contraction",
            "Contraction Engine",
            slow="pipeline_stages",
            placed="contraction_placement",
        ),
        Roof("memory", "hbm_move", "HBM", slow="hbm_below_peak"),
        Roof("communication", "link", "chip links", slow="link_latency"),
    ),
)
