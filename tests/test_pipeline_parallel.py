"""Pipeline parallelism on the engine (`--pp`): stages, micro-batches, the report and the CLI.

Numerics (TP x PP logits equal one chip) are in tests/oracle/test_pipeline_parallel.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_hardware
from simulator.program import ProgramBlock
from simulator.targets.rngd.mapping.stage_chain import Block, chain, in_turn
from simulator.targets.rngd.mapping.steps import DecodeSteps
from tcp_compiler.analysis.config_floor import phase_bound
from tcp_compiler.cli import main
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.generation.decode import step_blocks
from tcp_compiler.generation.plan import lower_decode, stage_options
from tcp_compiler.pipeline import CompileOptions, compile_phase, run_block
from tcp_compiler.pipeline import run as run_program
from tcp_compiler.report.build import build_report
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import ServeOptions, serve
from tcp_compiler.serve.costs import IterationCosts
from tcp_compiler.serve.metrics import model_bound_cycles
from tcp_compiler.serve.options import Buckets, Shapes
from tcp_compiler.serve.workload import Request, lengths, synthetic
from tcp_compiler.simulate import simulate_generation
from tcp_compiler.sweep import Point, grid, options_of, point_hash, run_point

MODEL = load_model("llama-3.2-1b").config  # 16 layers
BF16 = PRECISIONS["bf16"]


def _sim(tp: int, pp: int, batch: int = 4, micro_batches: int | None = None, gen: int = 4):
    hw = load_hardware("rngd", tp * pp)
    return simulate_generation(MODEL, hw, BF16, batch, 256, gen, tp, pp=pp, micro_batches=micro_batches)


def test_stages_split_the_layers_evenly_earlier_stages_taking_the_extra() -> None:
    stages = pipeline_stages(load_model("llama-3.1-8b").config, 3)  # 32 layers
    assert [len(s.layers) for s in stages] == [11, 11, 10]
    assert [s.layers.start for s in stages] == [0, 11, 22] and stages[-1].layers.stop == 32
    with pytest.raises(OptionError, match="^llama-3.2-1b: pp 17 exceeds its 16 layers"):
        pipeline_stages(MODEL, 17)


def test_one_block_chain_is_the_program_itself() -> None:
    hw = load_hardware("rngd")
    program = compile_phase(MODEL, hw, BF16, "prefill", 64, CompileOptions()).program
    joined = chain([program], [Block(0, None)], [None])
    assert run_program(joined, hw).cycles == run_program(program, hw).cycles
    assert (joined.dep_idx == program.dep_idx).all() and (joined.dep_ptr == program.dep_ptr).all()


def test_a_pipelined_generation_is_deterministic() -> None:
    a, b = _sim(1, 2), _sim(1, 2)
    assert a.prefill.cycles == b.prefill.cycles and (a.decode_cycles == b.decode_cycles).all()


@pytest.mark.parametrize(("tp", "pp", "batch"), [(1, 2, 1), (1, 4, 4), (2, 2, 4)])
def test_no_pipelined_phase_beats_its_bounds(tp: int, pp: int, batch: int) -> None:
    """Physics: no faster than the config-only floor over all tp x pp chips; and each stage
    works through every micro-batch, and a micro-batch through every stage, one after another."""
    sim = _sim(tp, pp, batch)
    hw, pipe = sim.hardware, sim.pipeline
    assert pipe is not None and pipe.micro_batches == min(batch, pp)
    floor = phase_bound(MODEL, BF16, hw, tp, batch, "prefill", 256, pp).seconds * hw.chip.clock_hz
    assert sim.prefill.cycles >= floor
    slowest = max(s.prefill_cycles for s in pipe.stages)
    assert sim.prefill.cycles >= pipe.micro_batches * slowest
    # a micro-batch's pass through the stages: each stage's share of the work is at least its
    # main-context time; the stages of one micro-batch do not overlap beyond weight prefetch
    assert sim.prefill.cycles >= 0.95 * sum(s.prefill_cycles for s in pipe.stages)
    for t, cycles in enumerate(sim.decode_cycles):
        floor = phase_bound(MODEL, BF16, hw, tp, batch, "decode", 256 + t + 1, pp).seconds * hw.chip.clock_hz
        assert cycles >= floor
    assert sim.decode_cycles[0] >= 0.95 * sum(s.decode_cycles for s in pipe.stages)


def test_micro_batches_fill_the_pipeline() -> None:
    """Two micro-batches keep both stages busy part of the time: a shorter prefill than one batch
    through the stages in turn (same work), and close to the (m + pp - 1) / m GPipe schedule."""
    one, two = _sim(1, 2, 8, micro_batches=1), _sim(1, 2, 8, micro_batches=2)
    assert two.prefill.cycles < 0.85 * one.prefill.cycles
    per_micro_batch = max(s.prefill_cycles for s in two.pipeline.stages)
    assert two.prefill.cycles <= 1.1 * 3 * per_micro_batch


def test_pipeline_parallel_is_slower_per_token_than_tensor_parallel_at_batch_1() -> None:
    """At batch 1 a decode step passes the stages in turn, so PP 2 reads its weights at one chip's
    bandwidth at a time while TP 2 reads them at two: the tradeoff users compare."""
    assert _sim(1, 2, 1).decode_cycles.mean() > 1.5 * _sim(2, 1, 1).decode_cycles.mean()


def test_report_shows_every_stage_and_the_chips_in_all() -> None:
    report = build_report(_sim(2, 2, 4))
    assert report.hardware.chips == 4
    pipe = report.pipeline
    assert pipe is not None and (pipe.tp, pipe.pp, pipe.micro_batches) == (2, 2, 2)
    layers = [i for s in pipe.stages for i in range(s.first_layer, s.last_layer + 1)]
    assert layers == list(range(16))
    assert all(0 < s.prefill_busy_share <= 1.0 and 0 < s.decode_busy_share <= 1.0 for s in pipe.stages)
    assert pipe.link_bytes_per_step == 4 * MODEL.hidden * 2  # one bf16 hidden state per sequence
    assert all(0 <= u.utilisation <= 1.0 for u in report.units.prefill)
    assert report.prefill.model_flops_utilisation <= 1.0
    assert report.prefill.limiter is None and report.decode.limiter is None  # the stage table explains
    assert build_report(_sim(2, 1, 4)).pipeline is None


def test_cli_tp_pp_writes_the_pipeline(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    args = ["simulate", "llama-3.2-1b", "--tp", "2", "--pp", "2", "--prompt-len", "128", "--gen-len", "3"]
    assert main([*args, "--json", str(out), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "pipeline: 2 stages x 2 chips" in text
    assert json.loads(out.read_text())["pipeline"]["pp"] == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--pp", "0"], "--pp"),
        (["--pp", "17"], "exceeds its 16 layers"),
        (["--micro-batches", "2"], "give --pp too"),
        (["--pp", "2", "--batch", "4", "--micro-batches", "3"], "must divide the batch"),
    ],
)
def test_bad_pipeline_arguments_are_one_line_exit_2(args: list[str], expected: str, capsys) -> None:
    assert main(["simulate", "llama-3.2-1b", "--prompt-len", "32", "--gen-len", "2", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err and "Traceback" not in err


def test_serving_one_request_on_stages_matches_simulate() -> None:
    """One request over 2 stages: the server times each iteration's stage programs joined, as tcpc
    simulate does (the second stage's first weights stream in during the first stage's work), so
    with exact shapes every iteration takes simulate's cycles (the paged-KV descriptors' issue hides
    under their transfer in both stages); the host's work adds to each."""
    hw, prompt, gen = load_hardware("rngd", 2), 96, 8
    request = [Request(0, 0.0, prompt, gen)]
    exact = ServeOptions(buckets=Buckets.exact(), shapes=Shapes.exact())
    result = serve(MODEL, hw, BF16, request, exact, CompileOptions(chips=1), pp=2)
    sim = simulate_generation(MODEL, hw, BF16, 1, prompt, gen, 1, pp=2)
    it = result.iterations
    cycles = it.array("cycles")
    assert cycles.tolist() == pytest.approx([sim.prefill.cycles, *sim.decode_cycles], rel=1e-12)
    assert (it.array("descriptor_s") == 0).all()
    host = sum(it.array(part) for part in ("schedule_s", "prepare_s", "launch_s", "sample_s"))
    assert it.array("duration_s") == pytest.approx(hw.seconds(cycles) + host, rel=1e-12)
    assert result.chips == 2
    assert (cycles >= model_bound_cycles(result)).all()


def test_a_stage_holds_an_iteration_between_its_joined_programs_handoffs() -> None:
    """The cost of a piece keeps when each stage hands it on: the first stage's send ends before
    the last stage does, which ends with the joined program."""
    hw = load_hardware("rngd", 2)
    costs = IterationCosts(MODEL, hw, BF16, CompileOptions(chips=1), Buckets.exact(), pp=2)
    for cost in (costs.exact_decode(2, 64), costs.exact_prefill(1, 64)):
        first, last = cost.handoffs
        assert 0 < first < last == cost.cycles


class _Halves:
    """A stage template whose blocks split in two (so the stages' blocks end at different lengths)."""

    def __init__(self, template: DecodeSteps) -> None:
        self.template, self.graph = template, template.graph

    def blocks(self, lengths: range):
        for block in self.template.blocks(lengths):
            for lanes in np.array_split(np.arange(len(block)), 2):
                if len(lanes):
                    yield ProgramBlock(block.base, block.rows, block.values[lanes], block.busy[lanes])


def test_decode_blocks_through_the_stages_give_each_step_s_joined_program() -> None:
    """Stage blocks of different splits joined: each step times as its stage programs chained."""
    hw = load_hardware("rngd", 2)
    options = stage_options(MODEL, CompileOptions(chips=1, batch=2), 2)
    graphs = [lower_decode(MODEL, hw, BF16, o, 40).graph for o in options]
    lengths = range(41, 47)
    joined = list(step_blocks([DecodeSteps(graphs[0], hw), _Halves(DecodeSteps(graphs[1], hw))], lengths, hw))
    assert [len(b) for b in joined] == [3, 3]
    apart = [DecodeSteps(g, hw) for g in graphs]
    for block, first in zip(joined, (41, 44), strict=True):
        timeline = run_block(block, hw)
        for k in range(len(block)):
            program = chain([t.at(first + k) for t in apart], in_turn(2), [g.meta.received for g in graphs])
            assert timeline.row(k).cycles == run_program(program, hw).cycles
            assert block.sums("flops")[k] == program.flops.sum()


@pytest.mark.parametrize("pp", [1, 2])
def test_cli_traces_the_decode_steps_asked_for_with_or_without_pp(pp: int, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    args = ["simulate", "llama-3.2-1b", "--pp", str(pp), "--prompt-len", "32", "--gen-len", "6"]
    assert main([*args, "--trace", str(trace), "--trace-steps", "4"]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    phases = [e["name"] for e in events if e.get("cat") == "phase"]
    assert phases == ["prefill", "decode 0", "decode 1", "decode 2", "decode 3"]


def test_virtual_engines_keep_both_stages_busy() -> None:
    """With 2 stages the server runs 2 virtual engines: their iterations overlap (one per stage),
    so the run is shorter than its iterations back to back and faster than one engine would be,
    yet never faster than the config-only bound over both chips allows."""
    hw = load_hardware("rngd", 2)
    requests = synthetic(24, lengths("64"), lengths("24"), None, True, 0)
    closed = ServeOptions(concurrency=8)
    result = serve(MODEL, hw, BF16, requests, closed, CompileOptions(chips=1), pp=2)
    report = serve_report(result)
    spans = result.iterations.array("duration_s")
    assert report.duration_s < 0.8 * spans.sum()
    cycles, bound = result.iterations.array("cycles"), model_bound_cycles(result)
    assert (cycles >= bound).all()
    tokens = result.iterations.array("decodes") + result.iterations.array("prefill_tokens")
    assert report.throughput_total_tokens_per_s <= tokens.sum() / hw.seconds(bound.sum())


def test_sweep_rows_carry_pp_and_keep_one_stage_hashes() -> None:
    one, two = grid(["llama-3.2-1b"], ["rngd"], [1], [2], [64], [3], ["bf16"], [1, 2])
    assert (one.pp, two.pp) == (1, 2)
    assert "pp" not in options_of(one) and options_of(two)["pp"] == 2
    alone = Point(model="llama-3.2-1b", hw="rngd", chips=1, batch=2, prompt_len=64, gen_len=3, dtype="bf16")
    assert point_hash(one) == point_hash(alone)
    row = run_point(two)
    assert row["status"] == "ok" and row["pp"] == 2 and row["ttft_seconds"] > 0
