"""Prefill cost vs prompt length (issue 7): Llama-3.1-8B's attention form follows the DM budget rule
of simulator.targets.rngd.mapping.attention, and its prefill time grows as its FLOPs do.

benchmarks/prefill_scaling.py prints the same for prompts 2048, 8192 and 32768 on the whole model
(docs/prefill-scaling.md); here the long prompts are checked on the attention choice alone, or on
the 8B's first decoder layer (its 32 layers are alike), to keep the file at about 10 s.
"""

from __future__ import annotations

import dataclasses

import pytest

import simulator.targets.rngd.mapping.attention as attention
from simulator.hardware import load_hardware
from simulator.targets.rngd.mapping.residency import dm_budget
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes import run_passes
from tcp_compiler.report.build import build_report
from tcp_compiler.report.types import Report
from tcp_compiler.simulate import simulate_generation

HARDWARE = load_hardware("rngd")
BUDGET = dm_budget(HARDWARE)
CONFIG = load_model("llama-3.1-8b").config
BF16 = PRECISIONS["bf16"]
# A compute-bound prefill's simulated / roofline factor moves by about 10 % with the tile shapes
# (1.10-1.23 over prompts 1024-8192), so time ratio / FLOP ratio within 15 % of 1 is "as FLOPs say".
TOLERANCE = 0.15


@pytest.mark.parametrize("prompt", [512, 2048, 32768])
def test_attention_form_follows_the_dm_budget(prompt: int, monkeypatch) -> None:
    """Plain softmax where a layer's f32 scores fit the DM budget; otherwise online softmax over
    power-of-two tiles of queries x keys whose scores, and whose queries' f32 accumulator, each fit
    half of it, as large as that allows. Only the choice is checked: the rewrite is recorded, not
    run (at 32768 it makes 64 x 64 tiles per layer; tests/test_online_softmax.py checks it)."""
    rewrites = []

    def record(graph, block, only=None, lse=False, rows=None):
        rewrites.append((block, rows, set(only)))
        return graph

    monkeypatch.setattr(attention, "online_softmax", record)
    graph = run_passes(build_prefill(CONFIG, BF16, 1, prompt).graph)
    _, notes = attention.choose_attention(graph, HARDWARE)
    per_score = CONFIG.heads * 4  # f32 bytes of one query-key pair over every head (batch 1)
    per_row = CONFIG.heads * CONFIG.head_dim * 4  # f32 accumulator bytes of one query
    scores = prompt * prompt * per_score
    assert len(notes) == len(CONFIG.layers)
    if scores <= BUDGET:
        assert prompt == 512  # 32 heads x 512^2 x 4 B = 32 MiB fit the 64 MiB budget; 2048 do not
        assert all(n["form"] == "plain" and f"scores {scores:,} B fit DM" in n["reason"] for n in notes)
        assert rewrites == []
        return
    ((rows, block),) = {(n["rows"], n["block"]) for n in notes}  # every layer alike
    held = rows * block * per_score
    assert held <= BUDGET // 2 and rows * per_row <= BUDGET // 2  # the tile fits
    for side, size in ((rows, prompt), (block, prompt)):
        assert side & (side - 1) == 0 and side <= size
    # As large as the rule allows: doubling either side overflows half the budget (or the prompt).
    assert 2 * held > BUDGET // 2 or (2 * rows > prompt and 2 * block > prompt)
    for n in notes:
        assert n["form"] == "online"
        assert n["reason"] == (
            f"scores {scores:,} B exceed DM ({BUDGET:,} B); tiles of {rows} queries x {block} keys "
            f"hold {held:,} B"
        )
    ((got_block, (axis, got_rows), names),) = rewrites  # one rewrite of every layer with that tile
    assert (got_block, got_rows, names) == (block, rows, {n["op"] for n in notes}) and axis == "Sq"


def _prefill(prompt: int, layers: int | None = None) -> Report:
    config = dataclasses.replace(CONFIG, layers=CONFIG.layers[:layers]) if layers else CONFIG
    return build_report(simulate_generation(config, HARDWARE, BF16, 1, prompt, 1), top=None)


def _check_scaling(short: Report, long: Report) -> None:
    for r in (short, long):
        assert r.decode.steps == 0  # the prefill alone
        assert {a.form for a in r.attention.prefill} - {"tiled"} == {"online"}  # tiled: token tiles
        assert r.prefill.seconds >= r.prefill.roofline_seconds
        assert r.prefill.seconds >= r.prefill.flops / r.hardware.peak_flops_per_s
    time_ratio = long.prefill.seconds / short.prefill.seconds
    flop_ratio = long.prefill.flops / short.prefill.flops
    assert flop_ratio > long.prompt_len / short.prompt_len  # the S x S attention grows faster
    assert abs(time_ratio / flop_ratio - 1) <= TOLERANCE, (time_ratio, flop_ratio)


def test_8b_prefill_time_tracks_its_flops_from_2048_to_4096() -> None:
    short, long = _prefill(2048), _prefill(4096)
    assert len(long.attention.prefill) == 32 and long.prefill.bound == "compute"
    _check_scaling(short, long)


def test_8b_layer_prefill_time_tracks_its_flops_from_4096_to_8192() -> None:
    short, long = _prefill(4096, layers=1), _prefill(8192, layers=1)
    assert any(".blk" in op.name for op in long.ops.prefill)  # the tiled form ran
    _check_scaling(short, long)


def test_8b_layer_prefill_time_tracks_its_flops_from_8192_to_16384() -> None:
    """From 16384 tokens the gate and up projections need sequential N passes to stay
    compute-bound (simulator.targets.rngd.mapping.placement); without them this step grew 1.28x too fast."""
    _check_scaling(_prefill(8192, layers=1), _prefill(16384, layers=1))
