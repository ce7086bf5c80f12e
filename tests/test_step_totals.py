"""Op totals summed over decode steps as integers equal adding every step's op_totals, exactly:
within one structure, across a template recompile, and once totals near 2^53."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator import step_totals
from simulator.hardware import load_hardware
from simulator.report import op_totals
from simulator.step_totals import StepTotals
from simulator.targets.rngd.mapping.steps import DecodeSteps
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes
from tcp_compiler.pipeline import run

MACHINE = load_hardware("rngd")
# Consecutive lengths, then a jump to lengths whose KV reads need more tiles (a recompile).
LENGTHS = [41, 42, 43, 44, 300, 301, 20001, 20002]


@pytest.fixture(scope="module")
def steps():
    cfg = load_model("llama-3.2-1b").config
    template = DecodeSteps(run_passes(build_decode(cfg, PRECISIONS["bf16"], 2, 40).graph), MACHINE)
    out = []
    for length in LENGTHS:
        program = template.at(length)
        out.append((program, run(program, MACHINE)))
    assert len({len(p) for p, _ in out}) > 1, "the lengths should change the program's structure"
    return out


def _assert_equal(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name


def _reference(steps):
    totals = None
    for program, timeline in steps:
        step = op_totals(program, timeline)
        totals = step if totals is None else totals + step
    return totals


def test_summed_as_integers_equal_adding_every_step(steps):
    summed = StepTotals()
    for program, timeline in steps:
        summed.add(program, timeline)
    _assert_equal(summed.totals(), _reference(steps))


def test_totals_near_2_53_are_added_step_by_step(steps, monkeypatch):
    monkeypatch.setattr(step_totals, "_EXACT", 3 * int(steps[0][0].flops.sum()))
    summed = StepTotals()
    for program, timeline in steps:
        summed.add(program, timeline)
    assert summed._one_by_one is not None, "the bound should have been reached"
    _assert_equal(summed.totals(), _reference(steps))
