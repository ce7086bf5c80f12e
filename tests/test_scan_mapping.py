"""Scans on RNGD: the chunk length is chosen under DM capacity and reported; a scan that cannot be
chunked (Mamba-1's per-element decay) runs step by step on the Vector Engine, at least one dependent
chain of element ops per step; a scan and its scan_state are one pass; no scan program beats its
FLOPs at peak or its HBM bytes at peak bandwidth; and chunking pays at prefill lengths."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from ir import F32, Graph, TensorType
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY
from simulator.targets.rngd.mapping.residency import dm_budget
from simulator.targets.rngd.mapping.scan_chunks import F32_BYTES, plan_scans, rewrite_scans
from simulator.targets.rngd.mapping.schedule import schedule
from simulator.targets.rngd.mapping.traits import STEP_CHAIN
from tcp_compiler.pipeline import run
from tcp_compiler.report.text import attention_lines
from tcp_compiler.report.types import AttentionNote
from tests.test_chunked_scan import delta_graph

T = TensorType.of
HW = load_hardware("rngd")


def mamba2(steps: int, heads: int = 64, p: int = 64, n: int = 128, outputs=("y", "h")) -> Graph:
    """One Mamba-2 scan (Codestral-like sizes: 64 heads of 64, state 128, one group)."""
    g = Graph("ssd")
    xs = [
        g.input("x", T(F32, B=1, S=steps, G=1, E=heads, P=p)),
        g.input("dt", T(F32, B=1, S=steps, G=1, E=heads)),
        g.param("A", T(F32, G=1, E=heads)),
        g.input("Bm", T(F32, B=1, S=steps, G=1, N=n)),
        g.input("Cm", T(F32, B=1, S=steps, G=1, N=n)),
        g.input("h0", T(F32, B=1, G=1, E=heads, P=p, N=n)),
    ]
    if "y" in outputs:
        g.add("scan", *xs, name="y", axis="S")
    if "h" in outputs:
        g.add("scan_state", *xs, name="h", axis="S")
    g.set_outputs(*outputs)
    return g


def mamba1(steps: int, d: int = 64, n: int = 16) -> Graph:
    g = Graph("selective")
    xs = [
        g.input("x", T(F32, B=1, S=steps, D=d)),
        g.input("dt", T(F32, B=1, S=steps, D=d)),
        g.param("A", T(F32, D=d, N=n)),
        g.input("Bm", T(F32, B=1, S=steps, N=n)),
        g.input("Cm", T(F32, B=1, S=steps, N=n)),
        g.input("h0", T(F32, B=1, D=d, N=n)),
    ]
    g.add("scan", *xs, name="y", axis="S")
    g.add("scan_state", *xs, name="h", axis="S")
    g.set_outputs("y", "h")
    return g


def cycles(g: Graph) -> float:
    return float(run(schedule(g, HW, DEFAULT_POLICY), HW).end.max())


def test_the_chunk_fits_dm_and_is_reported() -> None:
    g = mamba2(2048)
    notes, chunks = plan_scans(g, HW)
    (note,) = notes
    length, block = chunks["y"]
    assert chunks == {"y": (length, block), "h": (length, block)} and block == 2048  # one block
    assert note["form"] == "chunked" and note["block"] == length and note["tiles"] == 2048 // length
    budget = dm_budget(HW, DEFAULT_POLICY) // DEFAULT_POLICY.scan_share
    mask = 2 * 64 + 1  # the decay mask and the weights per head, and C.B, per pair of positions
    assert F32_BYTES * (length * length * mask + 64 * 64 * 128) <= budget
    assert f"fits DM ({budget:,} B)" in note["reason"]
    # a smaller DM share for the chunk takes a shorter chunk
    tight = dataclasses.replace(DEFAULT_POLICY, scan_share=DEFAULT_POLICY.scan_share * 4)
    _, shorter = plan_scans(g, HW, tight)
    assert shorter["y"][0] < length
    # and when not even the state fits, the scan runs step by step
    tiny = dataclasses.replace(DEFAULT_POLICY, scan_share=DEFAULT_POLICY.scan_share * 64)
    notes, chunks = plan_scans(g, HW, tiny)
    assert chunks == {} and notes[0]["form"] == "sequential" and "exceeds DM" in notes[0]["reason"]


def test_decode_steps_are_not_chunked_and_mamba1_runs_step_by_step() -> None:
    assert plan_scans(mamba2(1), HW) == ([], {})
    # a few steps are quicker one by one than through the chunked form's contractions and masks
    notes, chunks = plan_scans(mamba2(8), HW)
    assert chunks == {} and notes[0]["form"] == "sequential"
    assert "step by step (" in notes[0]["reason"] and "beats chunks of 8" in notes[0]["reason"]
    notes, chunks = plan_scans(mamba1(64), HW)
    assert chunks == {}
    assert [n["form"] for n in notes] == ["sequential"]
    assert "64 steps on the VE" in notes[0]["reason"]


def test_a_step_waits_for_the_previous_one() -> None:
    """A small state cannot fill the VE pipeline: each step costs at least its dependent chain."""
    steps = 1024
    longer = cycles(mamba1(steps, d=4, n=2)) - cycles(mamba1(1, d=4, n=2))
    assert longer >= (steps - 1) * STEP_CHAIN["scan"] * HW.vector.alu_latency


def test_scan_state_rides_in_its_scans_pass() -> None:
    both = mamba1(512, d=1024)
    alone = mamba1(512, d=1024)
    alone.set_outputs("y")
    assert cycles(both) < 1.1 * cycles(alone)


@pytest.mark.parametrize("steps", [1, 256, 2048])
def test_no_scan_program_beats_its_flops_or_bytes_at_peak(steps: int) -> None:
    for g in (mamba2(steps), mamba1(steps)):
        _, chunks = plan_scans(g, HW)
        program = schedule(rewrite_scans(g, chunks), HW, DEFAULT_POLICY)
        seconds = float(run(program, HW).end.max()) / HW.chip.clock_hz
        assert seconds >= int(program.flops.sum()) / HW.flops_per_second("fp8e4m3")
        assert seconds >= int(program.hbm_bytes.sum()) / HW.hbm_peak_bytes_per_second


def test_chunking_pays_at_prefill_lengths() -> None:
    g = mamba2(2048)
    _, chunks = plan_scans(g, HW)
    assert cycles(rewrite_scans(g, chunks)) < 0.7 * cycles(g)


def test_long_prompts_are_chunked_in_blocks_whose_masks_stay_in_dm() -> None:
    """At 16k positions the masks of all chunks together would spill to HBM: the scan is cut into
    blocks (each from the state the one before left) whose per-pair tensors fit an intermediate's
    DM budget, and that beats chunking the whole sequence at once."""
    g = mamba2(16384)
    notes, chunks = plan_scans(g, HW)
    length, block = chunks["y"]
    assert block < 16384 and 16384 % block == 0
    heads = 64
    assert (
        F32_BYTES * block * length * heads
        <= dm_budget(HW, DEFAULT_POLICY)
        < F32_BYTES * 2 * block * length * heads
    )
    assert f"in blocks of {block:,} positions" in notes[0]["reason"]
    whole = rewrite_scans(g, {"y": (length, 16384), "h": (length, 16384)})
    assert cycles(rewrite_scans(g, chunks)) < 0.8 * cycles(whole)


def test_reports_give_the_scans_share_of_each_phase() -> None:
    """The text report sums the Tensor Unit time of the roles a scan became (its own and the
    chunked form's `role.*`) over the phase's time."""
    notes, _ = plan_scans(mamba2(2048), HW)
    assert notes[0]["role"] == "y"
    row = lambda role, share: SimpleNamespace(role=role, tensor_unit_seconds=share)  # noqa: E731
    report = SimpleNamespace(
        prefill=SimpleNamespace(seconds=1.0),
        decode=SimpleNamespace(tpot_seconds_mean=1.0),
        attention=SimpleNamespace(
            prefill=(AttentionNote(**notes[0]), AttentionNote(op="a", form="plain", reason="r"))
        ),
        op_roles=SimpleNamespace(
            prefill=(row("y.cb", 0.25), row("y.seg", 0.125), row("yy", 0.5), row("proj", 0.125)),
            decode=(row("y", 0.0125), row("proj", 0.9)),
        ),
    )
    lines = attention_lines(report)
    scan_line = "prefill scan: chunked, 128 positions per chunk in 1 of 1 layers, 38% of the prefill ("
    assert lines[0].startswith(scan_line)
    assert lines[1].startswith("prefill attention: plain softmax in 1 of 1 layers")
    assert lines[2] == "decode scan: 1.2% of a step"


def test_the_delta_rule_takes_the_faster_of_its_two_forms() -> None:
    """Qwen3-Next's sizes (32 heads, keys and values of 128): the chunked form's transition over the
    key axis runs on the VE chunk after chunk, and stepping through the sequence is faster here."""
    g = delta_graph(2048, batch=1, heads=32, kd=128, vd=128)
    notes, chunks = plan_scans(g, HW)
    assert chunks == {} and [n["form"] for n in notes] == ["sequential"]
    assert "step by step (" in notes[0]["reason"] and "beats chunks of 128" in notes[0]["reason"]
    chunked = rewrite_scans(g, {"y": (128, 2048), "h": (128, 2048)})
    for form in (g, chunked):
        program = schedule(form, HW, DEFAULT_POLICY)
        seconds = float(run(program, HW).end.max()) / HW.chip.clock_hz
        assert seconds >= int(program.flops.sum()) / HW.flops_per_second("fp8e4m3")
        assert seconds >= int(program.hbm_bytes.sum()) / HW.hbm_peak_bytes_per_second
