"""Every decode step from DecodeSteps (resize plans, placements batched ahead and skipped while
placed, one vectorised patch) equals the reference: the resized graph scheduled from scratch with
empty placement and recipe caches, one shape at a time. Each range of lengths crosses a change of
the attention einsums' placement (their slice splits) and the 64-length windows placed ahead."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping import placement, schedule
from simulator.targets.rngd.mapping.steps import DecodeSteps, resize_graph
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes
from tests.programs import same_program


def _reference(graph, length: int, hw):
    """The step at `length` without any fast path: caches emptied, the graph resized and scheduled."""
    placement._PLACED.clear()
    schedule._RECIPES.clear()
    return schedule.schedule(resize_graph(graph, graph.meta.kv_sizes(length)), hw)


@pytest.mark.parametrize(
    ("model", "machine", "chips", "lengths"),
    [
        ("llama-3.2-1b", "rngd", 1, range(2030, 2100)),  # dense: placements change at 2049 and 2081
        ("gemma-3-1b", "rngd", 1, range(1890, 1960)),  # sliding and global layers; changes at 1921
        ("llama-3.2-1b", "rngd-2", 2, range(4080, 4120)),  # two chips (all-reduces); changes at 4097
    ],
)
def test_every_fast_step_equals_the_reference(model: str, machine: str, chips: int, lengths: range) -> None:
    hw = load_hardware(machine)
    cfg = load_model(model).config
    graph = run_passes(build_decode(cfg, PRECISIONS["bf16"], 2, lengths[0] - 1, chips=chips).graph)
    steps = DecodeSteps(graph, hw)
    fast = [steps.at(n) for n in lengths]  # all first: the references then empty the caches
    for n, program in zip(lengths, fast, strict=True):
        assert same_program(program, _reference(graph, n, hw)), (model, chips, n)
