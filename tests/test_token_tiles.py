"""Activations tiled along the tokens (simulator/targets/rngd/mapping/token_tiles.py): a run of
token-separable ops holds the intermediates that do not fit DM whole a token tile at a time, in the
fewest tiles that fit and only where that moves fewer bytes than spilling; every tile re-reads the
run's weights; a value too large for any tile spills as before; runs that spilled nothing keep
their cycles (tests/test_golden_cycles.py holds those)."""

from __future__ import annotations

import functools

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.fusion import fuse
from simulator.targets.rngd.mapping.residency import HBM, _whole_at, dm_budget, residency_at, token_tiling
from simulator.targets.rngd.mapping.token_tiles import TOKENS
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.analysis.config_floor import phase_bound
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, lower
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation

RNGD = load_hardware("rngd")
CONFIG = load_model("llama-3.1-8b").config


def _rank(pe: int) -> tuple[Hardware, int]:
    return RNGD.with_value("system.pe_partitions", pe).ranks(1)


@functools.cache
def _lowered(pe: int, batch: int, prompt: int, sequence_parallel: bool = True):
    hw, ranks = _rank(pe)
    options = CompileOptions(batch=batch, chips=ranks, sequence_parallel=sequence_parallel)
    low = lower(CONFIG, hw, precision("bf16"), "prefill", prompt, options, replicate=True)
    return low, hw


# Every token of the residual stream on every rank (batch 8 x 512: its [B, S, D] values exceed a
# rank's DM), or each rank's 1/8 of it and every token only of what the all-gathers give (2048).
@pytest.mark.parametrize(("prompt", "split"), [(512, False), (2048, True)])
def test_eight_ranks_hold_each_tiled_value_a_tile_at_a_time_under_dm(prompt: int, split: bool) -> None:
    low, hw = _lowered(8, 8, prompt, split)
    graph, budget = low.graph, dm_budget(hw)
    runs = token_tiling(graph, budget)
    assert runs, "8 ranks' DM holds no prefill activation of batch 8 x 512 whole: runs must be tiled"
    where, whole = residency_at(graph, budget), _whole_at(graph, budget)
    for run in runs:
        assert run.least >= 2 and run.tokens % run.least == 0
        for v in run.values:
            assert whole[v] == HBM and where[v] != HBM  # spilled whole, held in DM as tiles
            assert -(-graph[v].type.nbytes // run.least) <= budget
        assert -(-run.largest // (run.least // 2)) > budget  # the fewest tiles that fit
    # what still spills is read across the attention (the residual stream) or has no token axis:
    # no intermediate of a tiled run that only the run reads is left in HBM
    ops = fuse(graph)
    for run in runs:
        inside = set(run.ops)
        for k in run.ops:
            for v in ops[k].inputs:  # a tile loads a tile of what it reads from HBM, not all of it
                if where.get(v) == HBM and not traits(graph[v].kind).in_memory:
                    assert TOKENS in graph[v].type.names, (ops[k].name, v)
            for v in ops[k].outputs:
                if where[v] == HBM and v not in graph.outputs:
                    readers = {op.index for op in ops if v in op.inputs}
                    assert not readers <= inside or TOKENS not in graph[v].type.names, v
    # one note per run of the stand-in graph, and its copies for the layers it leaves out
    # (tests/test_layer_replication.py: the same notes as the whole graph's)
    notes = [n for n in low.attention if n["form"] == "tiled"]
    assert len(notes) > len(runs) and all("exceed DM" in n["reason"] for n in notes)
    assert {n["op"] for n in notes} >= {ops[run.ops[0]].name for run in runs}


def test_tiled_runs_reread_their_weights_per_tile() -> None:
    hw, ranks = _rank(8)  # every token of the residual stream on every rank: its runs are tiled
    options = CompileOptions(batch=8, chips=ranks, sequence_parallel=False)
    compiled = compile_phase(CONFIG, hw, precision("bf16"), "prefill", 512, options)
    program = compiled.program
    up = [i for i, info in enumerate(program.ops) if info.role == "up"]
    assert up
    loaded = sum(int(program.hbm_bytes[program.op == i].sum()) for i in up)
    # a rank's up projection: 4096 rows x 14336 / 8 columns of bf16, streamed from HBM once per
    # token tile (its input and output are tiles in DM); the schedule cuts this run in 8 tiles
    weights = 4096 * (14336 // 8) * 2
    assert loaded == len(CONFIG.layers) * 8 * weights


def test_a_value_no_tile_fits_spills_as_before() -> None:
    # 511 tokens have no power-of-two tile: the values spill whole, as without tiling
    low, hw = _lowered(8, 8, 511)
    budget = dm_budget(hw)
    assert token_tiling(low.graph, budget) == ()
    assert residency_at(low.graph, budget) == _whole_at(low.graph, budget)
    assert not [n for n in low.attention if n["form"] == "tiled"]


def test_one_rank_keeps_its_residency_where_nothing_spilled_or_tiles_would_move_more() -> None:
    low, hw = _lowered(1, 1, 512)  # nothing spills
    budget = dm_budget(hw)
    assert token_tiling(low.graph, budget) == ()
    # batch 8: the MLP's 117 MB activations spill, and tiles would re-read the layer's weights
    low8, _ = _lowered(1, 8, 512)
    whole = _whole_at(low8.graph, budget)
    spilled = [v for v, w in whole.items() if w == HBM and v not in low8.graph.outputs
               and low8.graph[v].kind not in ("param", "input")]  # fmt: skip
    assert spilled
    for run in token_tiling(low8.graph, budget):
        assert (run.least - 1) * run.weights < run.spills


def test_eight_ranks_stay_above_their_floors() -> None:
    """A card of 8 PE ranks: each phase is no faster than its roofline (the program's FLOPs and
    bytes at peak) nor the config-only floor, whose links carry only what crosses cards (the
    ranks' reductions run PE to PE: a floor that priced them on the chip link sat above the run)."""
    hw, ranks = _rank(8)
    report = build_report(simulate_generation(CONFIG, hw, precision("bf16"), 8, 512, 2, chips=ranks))
    prefill, decode = report.prefill, report.decode
    assert prefill.seconds >= max(prefill.roofline_seconds, prefill.config_bound_seconds)
    assert decode.tpot_seconds_mean >= max(decode.roofline_seconds_mean, decode.config_bound_seconds_mean)
    one_card = phase_bound(CONFIG, precision("bf16"), hw, ranks, 8, "prefill", 512)
    two_cards = phase_bound(CONFIG, precision("bf16"), RNGD.with_value("system.pe_partitions", 8).ranks(2)[0],
                            2 * ranks, 8, "prefill", 512)  # fmt: skip
    assert one_card.link_seconds == 0 < two_cards.link_seconds
    # across cards each rank sends 1/8 of what a whole card would, at 1/8 of its link: the card's time
    card = phase_bound(CONFIG, precision("bf16"), RNGD.with_chips(2), 2, 8, "prefill", 512)
    assert two_cards.link_seconds == pytest.approx(card.link_seconds)
