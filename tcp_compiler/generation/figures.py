"""What a pipelined generation reports per stage: its layers, its chips' HBM use, its work alone."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import Spec
from tcp_compiler.generation.plan import StagePlan
from tcp_compiler.pipeline import run as run_program


@dataclass(frozen=True)
class StageFigures:
    """One pipeline stage: its layers, its chips' HBM use, and its work timed alone."""

    index: int
    first_layer: int
    last_layer: int
    weights_bytes: int
    kv_cache_bytes: int
    prefill_cycles: int  # one micro-batch's prefill on this stage alone
    decode_cycles: int  # the first decode step on this stage alone
    prefill_work: tuple[int, int, int]  # one micro-batch's FLOPs, HBM bytes and link bytes per chip


@dataclass(frozen=True)
class PipelineFigures:
    tp: int
    pp: int
    micro_batches: int
    stages: tuple[StageFigures, ...]

    @property
    def chips(self) -> int:
        return self.tp * self.pp


def stage_figures(plans: list[StagePlan], hw: Spec, prompt_len: int) -> tuple[StageFigures, ...]:
    """Each stage's figures; its prefill and first decode step timed alone on the engine."""
    figures = []
    for plan in plans:
        stage, prefill = plan.decode.options.stage, plan.prefill.program
        assert stage is not None, "stage figures are a pipeline's"
        figures.append(StageFigures(
            stage.index, stage.layers.start, stage.layers.stop - 1, plan.capacity.weights,
            plan.capacity.kv_cache, run_program(prefill, hw).cycles,
            run_program(plan.steps.at(prompt_len + 1), hw).cycles,
            (int(prefill.flops.sum()), int(prefill.hbm_bytes.sum()), int(prefill.link_bytes.sum())),
        ))  # fmt: skip
    return tuple(figures)
