"""A large all-reduce goes in chunks, each after the producer's tile that completes it, so the
link works while the GEMM that produces the partial sums still runs."""

from __future__ import annotations

import numpy as np

from simulator.hardware import load_hardware
from simulator.targets.rngd.sites import SITES
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run


def test_chunks_of_an_all_reduce_overlap_the_gemm_that_produces_it() -> None:
    hw = load_hardware("rngd", 2)
    cfg = load_model("llama-3.1-8b").config
    options = CompileOptions(batch=4, chips=2)
    program = compile_phase(cfg, hw, precision("bf16"), "prefill", 2048, options).program
    timeline = run(program, hw)
    link, main = SITES.context("link"), SITES.context("main")
    chunked = 0
    for index, info in enumerate(program.ops):
        mine = program.op == index
        links = np.flatnonzero(mine & (program.context == link))
        if info.kind != "all_reduce" or len(links) < 2:
            continue
        chunked += 1
        producer = np.flatnonzero((program.op == index - 1) & (program.context == main))
        assert timeline.start[links[0]] < timeline.end[producer[-1]]  # the first chunk leaves early
    assert chunked > 0
