"""A large all-reduce goes in pieces, each after the producer's work that completes it (chunks of
one all-reduce op, or one all-reduce per token tile when the run is token-tiled), so the link works
while the GEMM that produces the partial sums still runs; so does a sequence-parallel prefill's
reduce-scatter, and the GEMM reading an all-gathered input starts on the first pieces."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.sites import SITES
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_an_all_reduce_overlaps_the_gemm_that_produces_it(sequence_parallel: bool) -> None:
    hw = load_hardware("rngd", 2)
    cfg = load_model("llama-3.1-8b").config
    options = CompileOptions(batch=4, chips=2, sequence_parallel=sequence_parallel)
    program = compile_phase(cfg, hw, precision("bf16"), "prefill", 2048, options).program
    join = "reduce_scatter" if sequence_parallel else "all_reduce"
    timeline = run(program, hw)
    link, main = SITES.context("link"), SITES.context("main")
    first_link: dict[str, float] = {}  # producer's name -> its join's first link step
    gemm_end: dict[str, float] = defaultdict(float)  # producer's name -> its last compute step
    gathered_end: dict[str, float] = {}  # all-gathered norm -> its last link step
    gemm_start: dict[str, float] = defaultdict(lambda: np.inf)  # op -> its first compute step
    for index, info in enumerate(program.ops):
        mine = program.op == index
        if info.kind == "all_gather" and info.layer >= 0:
            links = np.flatnonzero(mine & (program.context == link))
            producer = info.name.split(".gathered")[0]
            gathered_end[producer] = max(gathered_end.get(producer, 0.0), timeline.end[links].max())
        if info.kind == join:
            links = np.flatnonzero(mine & (program.context == link))
            producer = info.name.split(".sum")[0]
            if len(links):
                first_link[producer] = min(first_link.get(producer, np.inf), timeline.start[links].min())
        else:
            steps = np.flatnonzero(mine & (program.context == main))
            if len(steps):
                gemm_end[info.name] = max(gemm_end[info.name], timeline.end[steps].max())
                gemm_start[info.name] = min(gemm_start[info.name], timeline.start[steps].min())
    reduced = [name for name in first_link if name.endswith((".o", ".down"))]
    assert len(reduced) == 2 * len(cfg.layers)  # attention's o and the MLP's down, every layer
    assert all(first_link[name] < gemm_end[name] for name in reduced)  # the first piece leaves early
    assert len(gathered_end) == (2 * len(cfg.layers) if sequence_parallel else 0)
    for i in range(len(cfg.layers)):  # q and gate start on the first gathered pieces
        for norm, gemm in (("attn_norm", "q"), ("mlp_norm", "gate")):
            if sequence_parallel:
                assert gemm_start[f"l{i}.{gemm}"] < gathered_end[f"l{i}.{norm}"], (i, gemm)
