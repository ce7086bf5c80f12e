"""--kv-dtype fp8 stores the KV cache in fp8: half the cache's bytes and capacity, half the decode's
KV traffic; the collectives keep sending bf16."""

from __future__ import annotations

import json

import pytest

import ir
from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.simulate import simulate_generation


def test_fp8_cache_halves_the_kv_bytes_and_keeps_bf16_collectives() -> None:
    cfg, hw = load_model("llama-3.2-1b").config, load_hardware("rngd")
    runs = {kv: simulate_generation(cfg, hw, precision("fp8", kv_dtype=kv), 1, 512, 3)
            for kv in ("bf16", "fp8")}  # fmt: skip
    assert runs["fp8"].capacity.kv_cache * 2 == runs["bf16"].capacity.kv_cache
    assert runs["fp8"].decode_hbm[0] < runs["bf16"].decode_hbm[0]
    graph = build_decode(cfg, precision("bf16", kv_dtype="fp8"), 1, 15, chips=2).graph
    assert {graph[n].type.dtype for n in graph.meta.kv_outputs} == {ir.FP8E4M3}
    assert {n.type.dtype for n in graph.nodes if n.kind == "all_reduce"} == {ir.BF16}


def test_the_flag_reaches_the_report(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    assert main(["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "2", "--kv-dtype", "fp8",
                 "--json", str(out)]) == 0  # fmt: skip
    assert json.loads(out.read_text())["kv_dtype"] == "fp8e4m3"


def test_an_unknown_kv_dtype_is_refused() -> None:
    with pytest.raises(OptionError, match="kv_dtype 'int2'"):
        precision("bf16", kv_dtype="int2")
