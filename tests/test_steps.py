"""Decode steps from one compiled template equal steps compiled from scratch, at every length."""

from __future__ import annotations

import pytest

from ir import print_graph
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.schedule import schedule
from simulator.targets.rngd.mapping.steps import DecodeSteps, resize_graph
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes
from tests.programs import same_program

MACHINE = load_hardware("rngd")


def _step(cfg, past: int, chips: int = 1):
    return run_passes(build_decode(cfg, PRECISIONS["bf16"], 2, past, chips=chips).graph)


# bloom: ALiBi's bias spans the keys; pythia: partial RoPE and a parallel block
@pytest.mark.parametrize(
    "model", ["llama-3.2-1b", "gemma-3-1b", "qwen3-30b-a3b", "bloom-560m", "pythia-1.4b"]
)
def test_patched_steps_equal_fresh_schedules(model: str) -> None:
    cfg = load_model(model).config
    steps = DecodeSteps(_step(cfg, 40), MACHINE)
    for past in (40, 41, 300, 4999, 20000):  # 20000: the KV reads need more tiles
        assert same_program(steps.at(past + 1), schedule(_step(cfg, past), MACHINE)), (model, past)


@pytest.mark.parametrize("model", ["llama-3.2-1b", "bloom-560m", "gpt2"])
def test_resized_graph_is_the_graph_built_at_that_length(model: str) -> None:
    cfg = load_model(model).config
    assert print_graph(resize_graph(_step(cfg, 40), {"P": 91, "Sk": 91})) == print_graph(_step(cfg, 90))


def test_sharded_decode_steps_too() -> None:
    cfg = load_model("llama-3.1-8b").config
    machine = load_hardware("rngd-4")
    steps = DecodeSteps(_step(cfg, 64, chips=4), machine)
    assert same_program(steps.at(700), schedule(_step(cfg, 699, chips=4), machine))
