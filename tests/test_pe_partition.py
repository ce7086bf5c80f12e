"""A card split into tensor-parallel ranks of fused PEs (system.pe_partitions): each rank has its
share of the card, and every layer's reductions between a card's ranks run PE to PE.

With the split off (the default, one rank per card) the program is the one it always was:
tests/test_golden_cycles.py holds its cycles unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import HardwareError
from simulator.hardware import load_hardware
from simulator.targets.rngd import SITES
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation

PE_LINK, LINK, MAIN = (SITES.context(name) for name in ("pe_link", "link", "main"))


def split(name: str, partitions: int):
    return load_hardware(name).with_value("system.pe_partitions", partitions, "assumed: test").partitioned()


def test_one_rank_per_card_is_the_card_itself() -> None:
    hw = load_hardware("rngd-8")
    assert hw.system.pe_partitions == 1 and hw.partitioned() is hw


@pytest.mark.parametrize("partitions", [2, 4, 8])
def test_a_rank_holds_its_share_of_the_card(partitions: int) -> None:
    card, rank = load_hardware("rngd-2"), split("rngd-2", partitions)
    assert rank.system.chips == 2 * partitions and rank.system.ranks_per_card == partitions
    assert rank.system.pe_partitions == 1 and rank.partitioned() is rank  # not split again
    for of in (lambda h: h.slices, lambda h: h.dm_bytes, lambda h: h.dma_bytes_per_cycle,
               lambda h: h.hbm.sustained_bytes_per_cycle, lambda h: h.hbm.capacity_bytes,
               lambda h: h.system.link_bytes_per_s, lambda h: h.macs_per_cycle("fp8")):  # fmt: skip
        assert of(rank) * partitions == of(card)
    assert rank.switch.ring_slices <= rank.slices_per_cluster
    assert rank.sources["hbm.capacity_bytes"].startswith("derived:")
    card = card.with_value("system.pe_partitions", partitions, "assumed: test")
    assert card.ranks(2) == (rank, 2 * partitions)  # --tp 2 cards: 2 x P ranks of one rank's spec


def test_a_split_that_leaves_unequal_ranks_is_refused() -> None:
    with pytest.raises(HardwareError, match="pe_partitions"):
        load_hardware("rngd").with_value("system.pe_partitions", 3, "assumed: test")


def _decode(hw, chips: int, batch: int = 4):
    cfg = load_model("llama-3.1-8b").config
    options = CompileOptions(batch=batch, chips=chips)
    return cfg, compile_phase(cfg, hw, precision("bf16"), "decode", 128, options).program


def test_every_layer_reduces_its_attention_output_and_mlp_between_the_ranks_of_the_card() -> None:
    partitions, batch = 8, 4
    cfg, program = _decode(split("rngd", partitions), partitions, batch)
    # Two all-reduces per layer (o and down projections), each a reduce-scatter and an all-gather
    # between the card's 8 ranks of the [B, 1, D] bf16 partial sums: 7/8 of them each way.
    sent = batch * cfg.hidden * 2 * (partitions - 1) // partitions
    per_layer: dict[int, list[int]] = {}
    for k in np.flatnonzero(program.context == PE_LINK):
        op = program.ops[program.op[k]]
        if op.layer < 0:  # the vocab-parallel embedding's rows summed and LM head's logits gathered
            assert op.kind in ("all_reduce", "all_gather")
            continue
        assert op.kind == "all_reduce"
        per_layer.setdefault(op.layer, []).append(int(program.dm_bytes[k]))
    assert sorted(per_layer) == list(range(len(cfg.layers)))
    for moved in per_layer.values():
        assert moved == [2 * sent] * 4  # read on one PE, written on the next
    assert not np.any(program.context == LINK)  # one card: no chip link


def test_cards_of_ranks_reduce_within_each_card_then_across_the_cards() -> None:
    cards, partitions, batch = 2, 4, 4
    cfg, program = _decode(split("rngd-2", partitions), cards * partitions, batch)
    x = batch * cfg.hidden * 2
    in_layers = np.array([program.ops[k].layer >= 0 for k in program.op])
    links = program.link_bytes[(program.context == LINK) & in_layers]
    # each rank sends its 1/4 of the tensor around the ring of 2 cards: 2 (n - 1) / n of it
    assert links.tolist() == [2 * (cards - 1) * (x // partitions) // cards] * 2 * len(cfg.layers)
    assert int(np.sum((program.context == PE_LINK) & in_layers)) == 4 * len(cfg.layers)


@pytest.mark.parametrize("phase, length", [("decode", 512), ("prefill", 512)])
def test_no_rank_beats_its_flops_at_peak_nor_its_bytes_at_peak_bandwidth(phase: str, length: int) -> None:
    partitions = 8
    hw = split("rngd", partitions)
    cfg = load_model("llama-3.1-8b").config
    program = compile_phase(cfg, hw, precision("bf16"), phase, length,
                            CompileOptions(batch=4, chips=partitions)).program  # fmt: skip
    cycles = run(program, hw).cycles
    assert cycles >= program.flops.sum() / (2 * hw.macs_per_cycle("bf16"))
    assert cycles >= program.hbm_bytes.sum() / hw.hbm.peak_bytes_per_cycle
    pe = program.context == PE_LINK
    assert cycles >= program.dm_bytes[pe].sum() / 2 / hw.pe_link_bytes_per_cycle


def test_where_the_time_goes_names_the_reductions_between_the_pes() -> None:
    hw = split("rngd", 8)
    sim = simulate_generation(load_model("llama-3.1-8b").config, hw, precision("bf16"), 8, 512, 3, chips=8)
    report = build_report(sim)
    assert report.decode.limiter is not None
    parts = {p.cause: p for p in report.decode.limiter.parts}
    assert parts["pe_link"].seconds > 0 and "PEs" in parts["pe_link"].what
    assert {u.unit: u for u in report.units.decode}["pe_path"].busy_cycles > 0
    assert report.hardware.ranks_per_card == 8 and report.hardware.chips == 8  # 1 card x 8 ranks


def test_a_prefill_on_pe_ranks_splits_its_residual_stream_by_tokens() -> None:
    """Sequence parallelism: each layer's joins between the card's ranks become a reduce-scatter
    and an all-gather along the tokens, moving the all-reduce's bytes between the PEs; the
    residual stream each rank keeps (and spills) is 1/8 of the tokens, so the prefill spills
    less and is no slower than the same ranks holding every token."""
    partitions, batch, length = 8, 8, 512
    hw, cfg = split("rngd", partitions), load_model("llama-3.1-8b").config

    def prefill(sequence_parallel: bool):
        options = CompileOptions(batch=batch, chips=partitions, sequence_parallel=sequence_parallel)
        compiled = compile_phase(cfg, hw, precision("bf16"), "prefill", length, options)
        program = compiled.program
        in_layers = np.array([program.ops[k].layer >= 0 for k in program.op])
        between = (program.context == PE_LINK) & in_layers
        kinds = {program.ops[program.op[k]].kind for k in np.flatnonzero(between)}
        moved = int(program.dm_bytes[between].sum())
        return kinds, moved, compiled.capacity.activations, run(program, hw).cycles

    split_kinds, split_moved, split_spilled, split_cycles = prefill(True)
    whole_kinds, whole_moved, whole_spilled, whole_cycles = prefill(False)
    assert split_kinds == {"reduce_scatter", "all_gather"} and whole_kinds == {"all_reduce"}
    assert split_moved == whole_moved  # a ring all-reduce is a reduce-scatter and an all-gather
    assert split_spilled < whole_spilled
    assert split_cycles < whole_cycles


@pytest.mark.parametrize("command", ["simulate", "serve"])
def test_reports_on_pe_ranks_say_per_rank_and_give_the_cards_power(command: str, capsys, monkeypatch) -> None:
    """A rank's figures are its share of the card: the terminal reports say 'per PE rank' where a
    whole card's run says 'per chip', and give the card's power beside the rank's."""
    from tcp_compiler.cli import main

    monkeypatch.setenv("COLUMNS", "1000")  # one line per line, whatever the terminal
    run = ["--prompt-len", "64", "--gen-len", "2"] if command == "simulate" else ["--requests", "2"]
    for split in (8, 1):
        assert main([command, "llama-3.2-1b", *run, "--set", f"system.pe_partitions={split}"]) == 0
        out = capsys.readouterr().out
        assert ("per PE rank" in out and "every PE rank counted" in out) == (split == 8)
        assert ("(1 card x 8 PE ranks)" in out) == (split == 8)
        assert ("W per card)" in out) == (split == 8)
        assert ("per chip" in out) == (split == 1)
