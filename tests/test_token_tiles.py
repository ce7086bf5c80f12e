"""Activations tiled along the tokens (simulator/targets/rngd/mapping/token_tiles.py): a run of
token-separable ops holds the intermediates that do not fit DM whole a token tile at a time, from
the fewest tiles that fit, only where the schedule estimates that faster than spilling (a time, not
bytes: a spill hidden behind compute costs nothing, a weight read per tile may not be hidden), and
the simulated programs agree; every tile re-reads the run's weights; a value too large for any tile
spills as before; runs that spilled nothing keep their cycles (tests/test_golden_cycles.py)."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping import schedule
from simulator.targets.rngd.mapping.fusion import fuse
from simulator.targets.rngd.mapping.residency import HBM, _whole_at, dm_budget, residency_at, tileable
from simulator.targets.rngd.mapping.token_tiles import TOKENS
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.spec import Hardware
from tcp_compiler.analysis.config_floor import phase_bound
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, lower
from tcp_compiler.pipeline import run as run_program
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
    runs = schedule.tiled_runs(graph, hw)
    assert runs, "8 ranks' DM holds no prefill activation of batch 8 x 512 whole: runs must be tiled"
    where, whole = residency_at(graph, budget, runs), _whole_at(graph, budget)
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
    assert len(notes) > len(runs)
    assert all("exceed DM" in n["reason"] and "estimated" in n["reason"] for n in notes)
    assert {n["op"] for n in notes} >= {ops[run.ops[0]].name for run in runs}


def test_a_gathered_stream_read_through_a_fetch_cast_is_tiled_with_its_readers() -> None:
    """w4's groups read a sequence-parallel prefill's all-gathered bf16 input as f32, a cast the
    Fetch Adapter does as the pass fetches it (no op makes the f32 value): the pass reads the
    gathered value, which its run holds a tile at a time (its readers once missed that pass, and
    `tcpc simulate llama-3.2-1b --dtype w4 --tp 2 --batch 32 --prompt-len 2048` raised KeyError)."""
    cfg = load_model("llama-3.2-1b").config
    hw = load_hardware("rngd", 2)
    low = lower(cfg, hw, precision("w4"), "prefill", 2048, CompileOptions(batch=32, chips=2), replicate=True)
    gathered = low.graph["l0.attn_norm.gathered.bf16"]
    assert gathered.kind == "all_gather"
    (cast,) = [n for n in low.graph.nodes if gathered.name in n.operands]
    assert cast.kind == "cast" and cast.type.dtype.name == "f32"
    runs = [run for run in schedule.tiled_runs(low.graph, hw) if gathered.name in run.values]
    assert runs
    ops = fuse(low.graph)
    assert any(cast.name in ops[k].inputs for k in runs[0].ops)  # its reader is inside the run


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
    assert tileable(low.graph, budget) == () == schedule.token_tiles(low.graph, hw)
    assert residency_at(low.graph, budget, schedule.tiled_runs(low.graph, hw)) == _whole_at(low.graph, budget)
    assert not [n for n in low.attention if n["form"] == "tiled"]


def test_one_rank_keeps_its_residency_where_nothing_spilled() -> None:
    low, hw = _lowered(1, 1, 512)  # nothing spills
    assert tileable(low.graph, dm_budget(hw)) == () == schedule.token_tiles(low.graph, hw)


def _forced(monkeypatch: pytest.MonkeyPatch, tiled: bool) -> None:
    """Every run that can be tiled is (`tiled`) or spills, whatever the estimate says."""
    chosen = schedule.token_tiles

    def forced(graph, hw, policy=schedule.DEFAULT_POLICY):
        return tuple(replace(c, tiled_cycles=float(not tiled), spilled_cycles=float(tiled))
                     for c in chosen(graph, hw, policy))  # fmt: skip

    monkeypatch.setattr(schedule, "token_tiles", forced)


def _both_ways(monkeypatch: pytest.MonkeyPatch, graph, hw: Hardware) -> tuple[int, int, int]:
    """The cycles of the graph's program as scheduled, and with every run forced tiled, then spilled."""
    chosen = run_program(schedule.schedule(graph, hw), hw).cycles
    forced = []
    for tiled in (True, False):
        with monkeypatch.context() as m:
            _forced(m, tiled)
            forced.append(run_program(schedule.schedule(graph, hw), hw).cycles)
    return chosen, *forced


GEMMA = load_model("gemma-3-1b").config


@functools.cache
def _gemma():
    """Gemma-3-1B, batch 3, prompt 2048 (one chip): its MLP's activations spill whole."""
    options = CompileOptions(batch=3)
    return lower(GEMMA, RNGD, precision("bf16"), "prefill", 2048, options, replicate=True).graph


def _hbm_over(factor: int) -> Hardware:
    hbm = RNGD.hbm
    return RNGD.with_values({"hbm.sustained_bytes_per_cycle": hbm.sustained_bytes_per_cycle / factor,
                             "hbm.peak_bytes_per_cycle": hbm.peak_bytes_per_cycle / factor})  # fmt: skip


def test_spills_hidden_behind_compute_are_not_tiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma-3-1B batch 3: tiles would move fewer bytes than spilling (the old rule tiled these
    runs), but the spills hide behind the MLP's compute while each tile's extra pass costs time:
    every run spills, and the simulated program is faster so than with the runs tiled."""
    graph = _gemma()
    choices = schedule.token_tiles(graph, RNGD)
    assert choices and all((c.run.least - 1) * c.run.weights < c.run.spills for c in choices)
    assert not any(c.tiled for c in choices) and schedule.tiled_runs(graph, RNGD) == ()
    chosen, tiled, spilled = _both_ways(monkeypatch, graph, RNGD)
    assert chosen == spilled < tiled


def test_exposed_spills_are_tiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same graph at a quarter of the HBM bandwidth: the spills no longer hide behind compute,
    the runs are tiled (the estimate reads the spec's rates), and the simulated program agrees."""
    graph, hw = _gemma(), _hbm_over(4)
    choices = schedule.token_tiles(graph, hw)
    assert choices and all(c.tiled for c in choices)
    assert [c.run for c in choices] == [c.run for c in schedule.token_tiles(graph, RNGD)]  # the same runs
    chosen, tiled, spilled = _both_ways(monkeypatch, graph, hw)
    assert chosen == tiled < spilled


def test_eight_ranks_tile_where_spills_outweigh_weight_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 PE ranks, batch 8, prompt 512: a rank's weights are small against its spilled activations
    (the 70B fp8 --tp 8 kind), so the runs are tiled, and faster so in the simulated program."""
    low, hw = _lowered(8, 8, 512)
    choices = schedule.token_tiles(low.graph, hw)
    assert choices and all(c.tiled for c in choices)
    chosen, tiled, spilled = _both_ways(monkeypatch, low.graph, hw)
    assert chosen == tiled < spilled


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
