"""A tensor-parallel all-reduce overlaps the passes that consume it (issue 24.5): a prefill's run
from an all-reduce through its layer's token-separable passes is cut along the tokens and emitted
as a software pipeline, so the links carry one block while the Tensor Unit computes another. A
sequence-parallel prefill's reduce-scatters and all-gathers go likewise."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd import SITES
from simulator.targets.rngd.mapping.token_chunks import best_chunks
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run

LINK, MAIN = SITES.context("link"), SITES.context("main")


JOINS = ("all_reduce", "reduce_scatter")


@pytest.fixture(scope="module", params=[False, True], ids=["all-reduce", "sequence-parallel"])
def prefill(request):
    hw = load_hardware("rngd", 2)
    cfg = load_model("llama-3.1-8b").config
    options = CompileOptions(batch=1, chips=2, sequence_parallel=request.param)
    program = compile_phase(cfg, hw, precision("fp8"), "prefill", 2048, options).program
    return hw, program, run(program, hw)


def _layer_run(program, layer: int) -> np.ndarray:
    """The commands of the layer's ops from its attention output's join (all-reduce or
    reduce-scatter) on."""
    ops = [k for k, op in enumerate(program.ops) if op.layer == layer]
    first = next(k for k in ops if program.ops[k].kind in JOINS)
    return np.flatnonzero(np.isin(program.op, [k for k in ops if k >= first]))


def test_the_all_reduces_go_in_blocks_of_tokens(prefill) -> None:
    _, program, _ = prefill
    commands = _layer_run(program, 5)
    names = [program.ops[program.op[c]].name for c in commands if program.context[c] == LINK]
    # o's and down's joins (and the MLP input's all-gather between them), each in blocks
    joins = 3 if any(program.ops[program.op[c]].kind == "all_gather" for c in commands) else 2
    assert len(names) > joins and len(set(names)) == joins
    assert names.count(names[0]) == names.count(names[-1])


def test_the_first_block_leaves_before_the_projection_has_done_every_block(prefill) -> None:
    _, program, timeline = prefill
    ops = [k for k, op in enumerate(program.ops) if op.layer == 5]
    first = next(k for k in ops if program.ops[k].kind in JOINS)
    producer = [k for k in ops if program.ops[k].name == program.ops[first - 1].name]
    assert len(producer) > 1  # the o projection runs in blocks too
    mains = np.flatnonzero(np.isin(program.op, producer) & (program.context == MAIN))
    links = np.flatnonzero((program.op == first) & (program.context == LINK))
    assert timeline.start[links[0]] < timeline.end[mains].max()


def test_a_collective_and_the_passes_it_feeds_take_at_least_the_longer_of_the_two(prefill) -> None:
    """Overlap hides the shorter of the links' and the Tensor Unit's work, never more: the run
    takes at least each one's busy time, and less than both end to end."""
    _, program, timeline = prefill
    for layer in (1, 5, 30):
        commands = _layer_run(program, layer)
        span = timeline.end[commands].max() - timeline.start[commands].min()
        busy = timeline.end[commands] - timeline.start[commands]
        link = busy[program.context[commands] == LINK].sum()
        main = busy[program.context[commands] == MAIN].sum()
        assert span >= max(link, main) - 1e-6
        assert span < link + main  # they overlapped


def test_no_prefill_beats_its_flops_at_peak_or_its_link_bytes_at_full_bandwidth(prefill) -> None:
    hw, program, timeline = prefill
    assert timeline.cycles >= program.flops.sum() / (2 * hw.macs_per_cycle("fp8"))
    assert timeline.cycles >= program.link_bytes.sum() / hw.link_bytes_per_cycle


def test_the_block_count_is_the_fastest_estimate() -> None:
    # links 1000, Tensor Unit 800: one block serialises (1800); 4 blocks pay more latency (1200)
    # but hide all but a quarter of the shorter side: 1200 + 800 / 4 = 1400 beats 2 blocks' 1460
    options = {1: (1000, 800), 2: (1060, 800), 4: (1200, 800), 8: (1600, 800)}
    assert best_chunks(options) == 4
    assert best_chunks({1: (1000, 800), 2: (3000, 800)}) == 1
