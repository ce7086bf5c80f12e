"""Compiling repeating layers once and copying them (the fast path) gives exactly the program,
capacity and attention plan of compiling every layer (the reference path)."""

from __future__ import annotations

import numpy as np
import pytest

from ir import Graph, TensorType
from ir.dtypes import F32
from simulator.hardware import load_hardware
from simulator.program import COLUMNS, Program
from simulator.targets.rngd.mapping.layer_period import layer_period
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.frontend.stages import Stage
from tcp_compiler.pipeline import CompileOptions, compile_phase

# (model, hardware, dtype, batch, length, phase): dense, online-softmax tiles, sliding-window
# layers mixed with global ones (period 6; period 2 with tiles whose masks the first layer of each
# kind slices), attention sinks, MoE, two chips (collectives), and decode steps.
CASES = [
    ("llama-3.2-1b", "rngd", "bf16", 1, 2048, "prefill"),
    ("gemma-2-2b", "rngd", "bf16", 1, 4096, "prefill"),
    ("gpt-oss-20b", "rngd-2", "fp8", 1, 256, "prefill"),
    ("llama-3.2-1b", "rngd", "bf16", 1, 300, "decode"),
    ("gemma-3-1b", "rngd", "bf16", 1, 1024, "prefill"),
    ("gemma-3-1b", "rngd", "bf16", 1, 1024, "decode"),
    ("qwen3-30b-a3b", "rngd-2", "fp8", 1, 64, "prefill"),
    ("qwen3-30b-a3b", "rngd-2", "fp8", 1, 64, "decode"),
    ("llama-3.1-8b", "rngd-2", "bf16", 2, 128, "prefill"),
    ("llama-3.1-8b", "rngd-2", "bf16", 2, 128, "decode"),
]


def assert_same_program(fast: Program, reference: Program) -> None:
    assert len(fast) == len(reference)
    for name in [c for c, _ in COLUMNS] + ["busy", "dep_ptr", "dep_idx"]:
        assert np.array_equal(getattr(fast, name), getattr(reference, name)), name
    assert fast.ops == reference.ops


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(map(str, c)))
def test_copied_layers_compile_to_the_reference_program(case):
    model, hw_name, dtype, batch, length, phase = case
    hw, cfg, prec = load_hardware(hw_name), load_model(model).config, precision(dtype)
    options = CompileOptions(batch=batch)
    fast = compile_phase(cfg, hw, prec, phase, length, options)
    reference = compile_phase(cfg, hw, prec, phase, length, options, replicate=False)
    assert fast.period is not None, "the fast path was not taken"
    assert reference.period is None
    assert_same_program(fast.program, reference.program)
    assert fast.capacity == reference.capacity
    assert fast.attention == reference.attention
    assert fast.model_flops == reference.model_flops


def test_a_pipeline_stage_whose_layers_start_past_zero_too():
    hw, cfg, prec = load_hardware("rngd-2"), load_model("llama-3.1-8b").config, precision("bf16")
    options = CompileOptions(chips=1, stage=Stage(1, 2, range(16, 32)))
    fast = compile_phase(cfg, hw, prec, "prefill", 256, options)
    assert fast.period is not None and fast.period.base == 16
    reference = compile_phase(cfg, hw, prec, "prefill", 256, options, replicate=False)
    assert_same_program(fast.program, reference.program)


def _stack(kinds: str) -> Graph:
    """A toy residual stack: one layer per letter, `a` an add and `m` a mul of the running value."""
    g = Graph("toy")
    t = TensorType.of(F32, D=8)
    x = g.input("x", t)
    for i, kind in enumerate(kinds):
        w = g.param(f"w{i}", t)
        x = g.add("add" if kind == "a" else "mul", x, w, name=f"l{i}.out")
    g.set_outputs(x)
    g.meta.layers = {n.name: int(n.name[1:].split(".")[0]) if n.name.startswith("l") else -1 for n in g.nodes}
    return g


def test_the_period_is_found_from_the_graph_structure():
    period = layer_period(_stack("am" * 6))
    assert period is not None and period.period == 2
    # Every left-out layer copies a kept one of its own kind; the last layer is kept as it is.
    assert all(period.source(j) % 2 == j % 2 for j in range(period.layers))
    assert period.source(period.layers - 1) == period.layers - 1


def test_layers_that_do_not_repeat_are_all_compiled():
    assert layer_period(_stack("amaammaaamma")) is None  # no period leaves out enough layers
    assert layer_period(_stack("aaa")) is None  # too few layers to leave any out
