"""FuriosaAI RNGD (a Tensor Contraction Processor): the one target of this build.

Everything RNGD-specific on the simulator side is in this package: the spec tables (spec.py), the
units with their cost formulas and the execution contexts (units.py), and here the activities the
timeline is split into and the pipeline stages of a Tensor Unit pass. tcp_compiler/mapping is the
recipe book for this target (placement, tiling, scheduling onto these units).
"""

from __future__ import annotations

from pathlib import Path

from simulator.target import Activity, Sites, Target
from simulator.targets.rngd.spec import Hardware
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
)

RNGD = Target("rngd", Hardware, Path(__file__).parents[2] / "specs", SITES)
