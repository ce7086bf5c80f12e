"""A prefill stores the KV cache it produces: the program's HBM writes include every cache byte."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.sites import SITES
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase


@pytest.mark.parametrize(("model", "prompt"), [("llama-3.2-1b", 64), ("gemma-3-1b", 64)])
def test_prefill_writes_its_kv_cache_to_hbm(model: str, prompt: int) -> None:
    hw = load_hardware("rngd")
    config = load_model(model).config
    compiled = compile_phase(config, hw, precision("bf16"), "prefill", prompt, CompileOptions())
    graph, program = compiled.graph, compiled.program
    kv_bytes = sum(graph[name].type.nbytes for name in graph.meta.kv_outputs)
    weight_bytes = sum(graph[name].type.nbytes for name in compiled.weight_names if name in graph)
    dma = program.context == SITES.context("dma")
    assert kv_bytes > 0
    # Every byte read from HBM is counted once per side; weights are read, the cache is written.
    assert program.hbm_bytes[dma].sum() >= weight_bytes + kv_bytes
