"""Serving a model with a per-sequence state (Mamba layers): the state takes whole blocks of its
own per running sequence, and a pure Mamba model's blocks are one state each (its tokens take none)."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import Request, ServeOptions, serve
from tcp_compiler.serve.blocks import UNBOUNDED, BlockManager, KvBudget


def test_a_state_takes_whole_blocks_beside_the_tokens() -> None:
    budget = KvBudget(10_000, 0, 0, kv_bytes_per_token=10, block_size=4, state_bytes_per_sequence=90)
    assert (budget.block_bytes, budget.state_blocks, budget.blocks) == (40, 3, 250)
    manager = budget.manager(20)
    assert [manager.blocks_for(n) for n in (0, 1, 4, 5)] == [0, 4, 4, 5]
    assert manager.tokens_in(3) == 0 and manager.tokens_in(5) == 8


def test_without_a_per_token_cache_a_block_is_one_state() -> None:
    budget = KvBudget(10_000, 1_000, 0, kv_bytes_per_token=0, block_size=16, state_bytes_per_sequence=900)
    assert (budget.block_bytes, budget.state_blocks, budget.blocks) == (900, 1, 10)
    manager = budget.manager(budget.blocks)
    assert [manager.blocks_for(n) for n in (0, 1, 100_000)] == [0, 1, 1]
    assert manager.tokens_in(1) == UNBOUNDED and manager.tokens_in(0) == 0
    assert BlockManager(4, 16).blocks_for(17) == 2  # attention only: unchanged


@pytest.fixture(scope="module")
def mamba():
    return load_model("mamba-130m").config, load_hardware("rngd"), precision("bf16")


def _requests(n: int) -> list[Request]:
    return [Request(i, 0.0, 40 + 7 * i, 5 + i % 4) for i in range(n)]


def test_a_pure_mamba_server_holds_one_block_per_running_sequence(mamba) -> None:
    cfg, hw, prec = mamba
    result = serve(cfg, hw, prec, _requests(6), ServeOptions())
    state = 2 * len(cfg.layers) * (cfg.ssm.inner * cfg.ssm.state + cfg.ssm.inner * (cfg.ssm.conv_kernel - 1))
    assert result.budget.state_bytes_per_sequence == state and result.budget.kv_bytes_per_token == 0
    assert result.budget.blocks == result.budget.kv_bytes // state
    assert result.iterations.array("kv_blocks_used").max() == 6  # all six run at once, one state each
    assert all(s.generated == s.request.output_len for s in result.sequences)
    report = serve_report(result)
    assert (report.kv_cache.state_bytes_per_sequence, report.kv_cache.state_blocks) == (state, 1)
    assert report.time.padded_kv_tokens == 0  # no KV cache: no context bucket to pad up to


def test_room_for_k_states_runs_at_most_k_sequences(mamba) -> None:
    cfg, hw, prec = mamba
    base = serve(cfg, hw, prec, _requests(1), ServeOptions()).budget
    small = hw.with_value(
        "hbm.capacity_bytes", base.weight_bytes + base.activation_bytes + 3 * base.state_bytes_per_sequence
    )
    result = serve(cfg, small, prec, _requests(6), ServeOptions())
    assert result.budget.blocks == 3
    assert result.iterations.array("kv_blocks_used").max() == 3
    assert all(s.generated == s.request.output_len for s in result.sequences)
