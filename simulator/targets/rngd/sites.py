"""Where work runs on RNGD: its contexts and units (units.py), the activities the timeline is split
into, the pipeline stages of a Tensor Unit pass and the limiter's causes, as one `Sites`."""

from __future__ import annotations

from simulator.target import Activity, Sites
from simulator.targets.rngd.units import CONTEXTS, CONTRACTION, DMA, LINK, MAIN, PE_LINK, SUB, UNITS, VECTOR

# What may be under way at an instant (simulator.occupancy), in bit order.
ACTIVITIES = (
    Activity("hbm_move", DMA.name, "a TensorDMA move touching HBM is transferring bytes (past its start-up)",
             moving=True, hbm=True),
    Activity("dma_on_chip", DMA.name, "a TensorDMA move that does not touch HBM is transferring bytes",
             moving=True, hbm=False),
    Activity("dma_startup", DMA.name, "a TensorDMA command is in its fixed start-up latency", moving=False),
    Activity("contraction", MAIN.name, "a Tensor Unit pass that uses the Contraction Engine runs",
             unit=CONTRACTION.name),
    Activity("tensor_unit_other", MAIN.name,
             "a Tensor Unit pass without a contraction (Vector Engine work) runs"),
    Activity("sub", SUB.name, "a command of the sub pipeline runs"),
    Activity("link", LINK.name, "a chip-link transfer (collective) is under way"),
    Activity("pe_link", PE_LINK.name, "a PE-to-PE transfer within a card (collective between its ranks)"),
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
        "kernel_launch",
        "hbm_below_peak",
        "pipeline_stages",
        "contraction_placement",
        "link_latency",
    ),
    idle_cause="gaps",
    compute=CONTRACTION.name,
)
