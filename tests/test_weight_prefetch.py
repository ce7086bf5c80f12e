"""Weights have their own double buffer: a GEMM's weight loads do not wait for the passes without
weights (norms, attention, collectives) before it, only for the weight tile two back."""

from __future__ import annotations

import numpy as np

from simulator.hardware import load_hardware
from simulator.targets.rngd.sites import SITES
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run


def test_the_next_gemms_weights_stream_in_during_the_all_reduce() -> None:
    hw = load_hardware("rngd", 2)
    cfg = load_model("llama-3.2-1b").config
    program = compile_phase(cfg, hw, precision("bf16"), "decode", 512, CompileOptions(chips=2)).program
    timeline = run(program, hw)
    link, dma = SITES.context("link"), SITES.context("dma")
    busy_links = np.flatnonzero(program.context == link)
    overlapped = 0
    for i in busy_links:
        moving = (program.context == dma) & (program.hbm_bytes > 0)
        overlap = np.minimum(timeline.end, timeline.end[i]) - np.maximum(timeline.start, timeline.start[i])
        overlapped += bool(np.any(moving & (overlap > 0)))
    assert overlapped >= len(busy_links) // 2  # most all-reduces hide some weight streaming
