"""Hostile input never gets a traceback, unbounded work or an accepted invalid value (issue 15).

A seeded fuzz over .tir graphs, config.json files, hardware TOML, safetensors checkpoints (float and
pre-quantised, with non-finite values among the mutations) and flags
(tests/hostile_inputs.py says what is generated and what each run must obey), mostly in process
for speed and a handful through a real `tcpc` process; then one test per class of failure the
issue lists, each asserting the one-line message that names file and field.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tcp_compiler.frontend.model import BUNDLED
from tests.hostile_inputs import (
    KINDS,
    TINY,
    TINY_TENSORS,
    Case,
    generate,
    materialise,
    overwrite,
    pack,
    problems,
    run_in_process,
    run_subprocess,
    safetensors,
    subcommand_parsers,
)

CASES_PER_KIND = 420  # x 8 kinds = 3,360 cases


@pytest.mark.parametrize("kind", KINDS)
def test_fuzz_in_process(kind: str, tmp_path: Path) -> None:
    rng = random.Random(f"issue-15-{kind}")
    found, codes = [], {0: 0, 2: 0}
    for i in range(CASES_PER_KIND):
        case = generate(rng, kind)
        folder = tmp_path / str(i)
        folder.mkdir()
        outcome = run_in_process(materialise(case, folder))
        codes[outcome.code] = codes.get(outcome.code, 0) + 1
        found += [
            (p, case.argv, outcome.traceback or outcome.stderr[:200]) for p in problems(case, outcome, folder)
        ]
    assert not found, found[:3]
    assert codes[2] > CASES_PER_KIND // 3, codes  # the generator does produce bad input


def test_fuzz_through_real_processes(tmp_path: Path) -> None:
    """A few cases of each kind as a user runs them: a separate process, its real exit code."""
    rng = random.Random("issue-15-subprocess")
    for i in range(10):
        case = generate(rng, KINDS[i % len(KINDS)])
        folder = tmp_path / str(i)
        folder.mkdir()
        outcome = run_subprocess(materialise(case, folder))
        assert not problems(case, outcome, folder), (case.argv, outcome.stderr)


def _run(tmp_path: Path, case: Case) -> str:
    """Runs a case that must be refused; returns its one error line."""
    outcome = run_in_process(materialise(case, tmp_path))
    assert not problems(case, outcome, tmp_path), outcome
    assert outcome.code == 2, outcome
    return outcome.stderr.strip()


# -- config.json ------------------------------------------------------------------------------

LLAMA = json.loads((BUNDLED / "llama-3.2-1b.json").read_text())
QWEN_MOE = json.loads((BUNDLED / "qwen3-30b-a3b.json").read_text())
GEMMA = json.loads((BUNDLED / "gemma-3-1b.json").read_text())
PYTHIA = json.loads((BUNDLED / "pythia-1.4b.json").read_text())
SCALING = LLAMA["rope_scaling"]


@pytest.mark.parametrize(
    ("base", "change", "expected"),
    [
        (LLAMA, {"model_type": ["llama"]}, 'model_type: expected a string, got ["llama"]'),
        (LLAMA, {"rope_scaling": {**SCALING, "factor": "two"}}, "rope_scaling.factor: expected a number > 0"),
        (LLAMA, {"rope_scaling": {**SCALING, "factor": 0}}, "rope_scaling.factor: expected a number > 0"),
        (LLAMA, {"rope_scaling": {**SCALING, "factor": -2.0}}, "got -2.0"),
        (LLAMA, {"rope_scaling": {**SCALING, "low_freq_factor": 0}}, "rope_scaling.low_freq_factor:"),
        (
            LLAMA,
            {"rope_scaling": {**SCALING, "high_freq_factor": 0.5}},
            "expected a number >= low_freq_factor",
        ),
        (
            LLAMA,
            {"rope_scaling": {**SCALING, "original_max_position_embeddings": "8k"}},
            'original_max_position_embeddings: expected an integer from 1 to 16,777,216, got "8k"',
        ),
        (LLAMA, {"rope_theta": "big"}, 'rope_theta: expected a number > 0 and <= 1e+12, got "big"'),
        (LLAMA, {"rope_theta": float("nan")}, "rope_theta: expected a number > 0 and <= 1e+12, got NaN"),
        (LLAMA, {"rms_norm_eps": float("inf")}, "rms_norm_eps: expected a number > 0 and < 1, got Infinity"),
        (
            LLAMA,
            {"num_hidden_layers": 1e20},
            "num_hidden_layers: expected an integer from 1 to 1,024, got 1e+20",
        ),
        (LLAMA, {"num_hidden_layers": 10**20}, "num_hidden_layers: expected an integer from 1 to 1,024"),
        (LLAMA, {"torch_dtype": ["float32"]}, 'torch_dtype: expected a string, got ["float32"]'),
        (LLAMA, {"num_key_value_heads": 7}, "must be a multiple of num_key_value_heads (7)"),
        (PYTHIA, {"rotary_pct": float("inf")}, "rotary_pct: expected a number > 0 and <= 1, got Infinity"),
        (GEMMA, {"query_pre_attn_scalar": -1}, "query_pre_attn_scalar: expected a number > 0"),
        (QWEN_MOE, {"num_experts_per_tok": 129}, "num_experts_per_tok (129) exceeds num_experts (128)"),
        (QWEN_MOE, {"mlp_only_layers": [[1]]}, "mlp_only_layers[0]: expected a layer index"),
        (
            {"model_type": "gemma3", "text_config": {**GEMMA, "rope_theta": -1}},
            {},
            "text_config.rope_theta: expected a number > 0",
        ),
    ],
)
def test_bad_config_fields_name_the_field(base: dict, change: dict, expected: str, tmp_path: Path) -> None:
    text = json.dumps({**base, **change})  # NaN and Infinity as Python's json writes them
    case = Case(
        "config",
        ["compile", "{d}/config.json", "--seq", "4", "-o", "{d}/out.tir"],
        {"config.json": text.encode()},
    )
    line = _run(tmp_path, case)
    assert f"{tmp_path}/config.json: " in line and expected in line, line


def test_deeply_nested_and_oversized_configs_are_refused(tmp_path: Path) -> None:
    deep = '{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert "nested deeper than 32 levels" in _run(
        tmp_path, Case("c", ["compile", "{d}/c.json"], {"c.json": deep.encode()})
    )
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate((4 << 20) + 1)
    assert "limit for config.json files" in _run(tmp_path, Case("c", ["compile", str(big)]))


def test_every_bundled_config_and_preset_still_loads() -> None:
    from simulator.hardware import list_presets, load_hardware
    from tcp_compiler.frontend.model import bundled_models, load_model

    assert all(load_model(m).config.layers for m in bundled_models())
    assert all(load_hardware(h).system.chips >= 1 for h in list_presets())


# -- hardware TOML ------------------------------------------------------------------------------


def _spec(key: str, value: str) -> bytes:
    table, name = key.rsplit(".", 1)
    return f'extends = "rngd"\n[{table}]\n{name} = {{ value = {value}, source = "assumed: fuzz" }}\n'.encode()


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "chip.clusters",
            str(2**64),
            "chip.clusters: expected an integer from 1 to 1,024, got int 18446744073709551616",
        ),
        (
            "dma.bytes_per_cycle_each",
            "1e-300",
            "dma.bytes_per_cycle_each: expected a number from 0.001 to 1e+09",
        ),
        ("chip.clock_hz", "1e-300", "chip.clock_hz: expected a number from 1e+06 to 1e+11, got float 1e-300"),
        ("system.kernel_launch_s", "1e300", "system.kernel_launch_s: expected a number from 1e-12 to 1"),
        ("memory.dm_bytes_per_slice", "1", "memory.dm_bytes_per_slice: 1 bytes cannot hold 4 packets"),
        ("memory.trf_bytes_per_slice", "64", "memory.trf_bytes_per_slice: 64 bytes cannot hold 2 packets"),
        ("switch.ring_slices", "1024", "switch.ring_slices: 1024 exceeds the 256 slices of a cluster"),
        ("hbm.peak_bytes_per_cycle", "nan", "hbm.peak_bytes_per_cycle: expected a number"),
        ("chip.tdp_w", '"150 W"', "chip.tdp_w: expected a number from 0.001 to 1e+06, got string '150 W'"),
    ],
)
def test_bad_spec_values_name_the_key(key: str, value: str, expected: str, tmp_path: Path) -> None:
    case = Case("hardware", ["hw", "show", "{d}/spec.toml", "--json"], {"spec.toml": _spec(key, value)})
    line = _run(tmp_path, case)
    assert f"{tmp_path}/spec.toml: " in line and expected in line, line


def test_extends_chains_are_bounded_and_cycles_named(tmp_path: Path) -> None:
    files = {f"s{i}.toml": f'extends = "s{i + 1}.toml"\n'.encode() for i in range(1200)}
    files["s1200.toml"] = b'extends = "rngd"\n'
    line = _run(tmp_path, Case("hardware", ["hw", "show", "{d}/s0.toml"], files))
    assert "extends: the chain is more than 16 files deep" in line, line
    files = {"a.toml": b'extends = "b.toml"\n', "b.toml": b'extends = "a.toml"\n'}
    assert "extends: cycle a.toml -> b.toml -> a.toml" in _run(
        tmp_path, Case("hw", ["hw", "show", "{d}/a.toml"], files)
    )


def test_specs_at_the_edges_of_their_ranges_still_simulate(tmp_path: Path) -> None:
    """The slowest chip the ranges allow costs a model without overflow, warning or traceback."""
    slow = {"dma.bytes_per_cycle_each": "1e-3", "hbm.peak_bytes_per_cycle": "1e-3", "chip.clock_hz": "1e6",
            "hbm.sustained_bytes_per_cycle": "1e-3", "system.kernel_launch_s": "1.0"}  # fmt: skip
    spec = 'extends = "rngd"\n' + "".join(
        f'{k} = {{ value = {v}, source = "assumed: x" }}\n' for k, v in slow.items()
    )
    argv = ["simulate", "{d}/tiny.json", "--hw", "{d}/spec.toml", "--prompt-len", "4", "--gen-len", "2"]
    case = Case("hardware", argv, {"spec.toml": spec.encode(), "tiny.json": json.dumps(TINY).encode()})
    outcome = run_in_process(materialise(case, tmp_path))
    assert not problems(case, outcome, tmp_path) and outcome.code == 0, outcome


# -- checkpoints ----------------------------------------------------------------------------------


def _checkpoint_case(tensors: dict[str, list[int]], extra: dict[str, bytes] | None = None) -> Case:
    header, data = safetensors(tensors)
    files = {
        "config.json": json.dumps(TINY).encode(),
        "model.safetensors": pack(header, data),
        **(extra or {}),
    }
    return Case("checkpoint", ["run", "{d}", "--prompt-ids", "1,2", "--logits-out", "{d}/out.npz"], files)


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("model.layers.0.self_attn.q_proj.weight", [4, 16], "has shape [4, 16], but"),
        ("model.layers.0.mlp.gate_proj.weight", [8, 16], "has shape [8, 16], but"),
        ("model.layers.0.self_attn.k_proj.weight", [32], "has shape [32], but"),
        ("model.embed_tokens.weight", [16, 9], "has shape [16, 9], but"),
    ],
)
def test_tensors_whose_shape_disagrees_with_the_config_are_refused(
    name: str, shape: list[int], expected: str, tmp_path: Path
) -> None:
    line = _run(tmp_path, _checkpoint_case({**TINY_TENSORS, name: shape}))
    assert (
        f"{tmp_path}/model.safetensors: tensor {name!r} {expected} {tmp_path}/config.json implies" in line
    ), line


def test_a_matching_checkpoint_runs(tmp_path: Path) -> None:
    outcome = run_in_process(materialise(_checkpoint_case(dict(TINY_TENSORS)), tmp_path))
    assert outcome.code == 0 and (tmp_path / "out.npz").is_file(), outcome


@pytest.mark.parametrize(
    ("name", "value", "everywhere", "expected"),
    [
        ("model.layers.0.mlp.up_proj.weight", float("nan"), False,
         "prefill: tensor 'model.layers.0.mlp.up_proj.weight': 1 of its 128 values are not finite"),
        ("model.norm.weight", float("-inf"), False,
         "tensor 'model.norm.weight': 1 of its 8 values are not finite"),
        ("model.layers.0.mlp.up_proj.weight", 3e38, True,
         "prefill: %final_norm.sq = mul computed 8 +inf of 8"),
        ("model.embed_tokens.weight", 3e38, True, "the first op to go non-finite"),
    ],
)  # fmt: skip
def test_non_finite_numbers_in_run_name_the_tensor_or_first_op(
    name: str, value: float, everywhere: bool, expected: str, tmp_path: Path
) -> None:
    """Not a sampling traceback over NaN logits: the weight, or the first op whose result is NaN or inf."""
    case = _checkpoint_case(dict(TINY_TENSORS))
    header, data = safetensors(TINY_TENSORS)
    case.files["model.safetensors"] = pack(header, overwrite(header, data, name, value, everywhere))
    line = _run(tmp_path, case)
    assert line.startswith(f"tcpc: error: {tmp_path}: ") and expected in line, line


@pytest.mark.parametrize("factor", [1e-300, 1e-40])
def test_an_extreme_rope_factor_names_the_rope_table(factor: float, tmp_path: Path) -> None:
    config = {**TINY, "rope_scaling": {"rope_type": "linear", "factor": factor}}
    case = _checkpoint_case(dict(TINY_TENSORS), {"config.json": json.dumps(config).encode()})
    line = _run(tmp_path, case)
    assert "prefill: %rope.table = param computed" in line and "the first op to go non-finite" in line, line


def test_an_index_naming_a_missing_shard_names_index_and_shard(tmp_path: Path) -> None:
    header, data = safetensors(TINY_TENSORS)
    weight_map = {n: "model-00001.safetensors" for n in TINY_TENSORS}
    weight_map["model.norm.weight"] = "model-00002.safetensors"
    files = {"config.json": json.dumps(TINY).encode(), "model-00001.safetensors": pack(header, data),
             "model.safetensors.index.json": json.dumps({"weight_map": weight_map}).encode()}  # fmt: skip
    case = Case("checkpoint", ["run", "{d}", "--prompt-ids", "1"], files)
    line = _run(tmp_path, case)
    assert f"{tmp_path}/model.safetensors.index.json: shard 'model-00002.safetensors'" in line, line


# -- flags ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["simulate", "{d}/tiny.json", "--chips", "0"],
            "argument --chips/--tp: expected an integer from 1 to 1,024, got '0'",
        ),
        (
            ["simulate", "{d}/tiny.json", "--trace-steps", "-1"],
            "argument --trace-steps: expected an integer from 0",
        ),
        (["compile", "{d}/tiny.json", "--documents", "100", "--seq", "8"], "--documents 100 exceeds --seq 8"),
        (["sweep", "{d}/tiny.json", "--jobs", "0"], "argument --jobs: expected an integer from 1 to 1,024"),
        (
            ["compile", "{d}/tiny.json", "--phase", "decode", "--past", "0"],
            "argument --past: expected an integer",
        ),
        (["compile", "{d}/tiny.json", "--seq", "-5"], "argument --seq: expected an integer from 1"),
        (["compile", "{d}/tiny.json", "--seq", "9" * 5000], "argument --seq: expected an integer from 1"),
        (["simulate", "{d}/tiny.json", "--trace", "{d}"], "--trace {d}: cannot write: it is a folder"),
        (["inspect", "{d}/tiny.json", "--top", "0"], "argument --top: expected an integer from 1"),
        (["sweep", "{d}/tiny.json", "--batch", "1,x"], "argument --batch: expected comma-separated integers"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(argv: list[str], expected: str, tmp_path: Path) -> None:
    line = _run(tmp_path, Case("flags", argv, {"tiny.json": json.dumps(TINY).encode()}))
    assert line.startswith("tcpc: error: ") and expected.format(d=tmp_path) in line, line


def _every_command_and_long_flag_prefix() -> list[tuple[str, str]]:
    from tcp_compiler.cli import build_parser

    cases = []
    for words, parser in subcommand_parsers(build_parser()).items():
        flags = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
        for flag in sorted(flags):
            prefix = next((flag[:n] for n in range(len(flag) - 1, 2, -1) if flag[:n] not in flags), None)
            if prefix is not None:
                cases.append((words, prefix))
    return cases


@pytest.mark.parametrize(("words", "prefix"), _every_command_and_long_flag_prefix())
def test_no_command_takes_a_prefix_of_a_long_flag(words: str, prefix: str, capsys) -> None:
    """`tcpc serve --batch 8` must not set --batch-bucket: an abbreviation is an unknown flag."""
    from tcp_compiler.cli import build_parser, main

    parser = subcommand_parsers(build_parser())[words]
    required = [a for a in parser._actions if a.required and a.nargs != "A..."]  # positionals and such
    given = [arg for a in required for arg in ([a.option_strings[0], "1"] if a.option_strings else ["x"])]
    argv = [*words.split(), *given, prefix]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments:" in err and prefix in err, err


def test_every_subcommand_is_covered_by_the_prefix_test() -> None:
    words = {w for w, _ in _every_command_and_long_flag_prefix()}
    assert {"simulate", "serve", "sweep", "compile", "run", "inspect", "hw show", "hw list"} <= words


@pytest.mark.parametrize(
    "text", ["\uff11\uff12", "1_000", "\u0663", "12\n", "\u00a012", "\U0001d7d1", "1,\u3000,2"]
)
def test_integer_flags_take_ascii_digits_only(text: str, tmp_path: Path) -> None:
    """int() reads full-width and other Unicode digits, underscores and Unicode spaces; a flag does not."""
    for argv in (["simulate", "{d}/tiny.json", "--batch", text], ["sweep", "{d}/tiny.json", "--batch", text],
                 ["sweep", "{d}/tiny.json", "--rate", text]):  # fmt: skip
        line = _run(tmp_path, Case("flags", argv, {"tiny.json": json.dumps(TINY).encode()}))
        assert line.startswith(f"tcpc: error: argument {argv[2]}: expected "), line


def test_integer_flags_still_take_signs_and_surrounding_spaces() -> None:
    from tcp_compiler.cli import arg_types

    assert arg_types.batch(" 12 ") == 12 and arg_types.batch("+12") == 12
    assert arg_types.integers(1, 64)("1, 2,4") == [1, 2, 4]


def test_a_hardware_error_names_the_users_file_not_the_preset_it_extends(tmp_path: Path) -> None:
    spec = _spec("chip.packet_bytes", "16384")  # the preset's VRF can no longer hold one packet
    line = _run(tmp_path, Case("hardware", ["hw", "show", "{d}/spec.toml"], {"spec.toml": spec}))
    assert line.startswith(f"tcpc: error: {tmp_path}/spec.toml: memory.vrf_bytes_per_slice: "), line
    assert "spec.toml inherits from" in line and "rngd.toml" in line, line


# -- reading and writing files -------------------------------------------------------------------


def test_inspect_refuses_dev_zero_and_a_fifo_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "g.tir"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        start = time.monotonic()
        outcome = run_subprocess(["inspect", path], timeout=60)
        assert outcome.code == 2 and "not a regular file" in outcome.stderr, outcome
        assert outcome.stderr.count("\n") == 1 and time.monotonic() - start < 30


def test_a_killed_writers_temporaries_are_removed_by_the_next_write(tmp_path: Path) -> None:
    """kill -9 leaves `.NAME.PID.XXXXXXXX.tmp`; the next write of NAME removes it once PID is gone,
    and never touches a live writer's file, another target's, or an unrelated file."""
    from simulator.files import atomic_output

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f".trace.json.{dead}.abcd1234.tmp"
    live = tmp_path / f".trace.json.{os.getppid()}.abcd1234.tmp"
    old_style = tmp_path / ".trace.json.abcd1234.tmp"
    other = tmp_path / f".p.tir.{dead}.abcd1234.tmp"
    mine = tmp_path / "notes.tmp"
    for path in (stale, live, old_style, other, mine):
        path.write_text("x")
    os.utime(old_style, (time.time() - 3600, time.time() - 3600))
    with atomic_output(tmp_path / "trace.json") as tmp:
        tmp.write_text("{}")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([live.name, other.name, mine.name, "trace.json"]), left
