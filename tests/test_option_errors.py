"""Library errors name options, the CLI prints them as its flags: the same one-line messages as
before, and CliError only under tcp_compiler/cli/."""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path

import pytest

from simulator.errors import HardwareError
from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.cli.flags import describe, flag
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.precision import precision

ROOT = Path(__file__).resolve().parents[1]


def test_an_option_error_names_options_its_values_fill_the_rest() -> None:
    error = OptionError("{group_size} applies to integer weights ({grouped}), not to {dtype} {value}",
                        grouped="w4, w4-zp", value="bf16")  # fmt: skip
    assert error.options == ("group_size", "dtype")
    assert str(error) == "group_size applies to integer weights (w4, w4-zp), not to dtype bf16"
    assert describe(error) == "--group-size applies to integer weights (w4, w4-zp), not to --dtype bf16"
    assert flag("max_batch_tokens") == "--max-batch-tokens"


def test_user_text_in_values_is_neither_a_field_nor_a_second_line() -> None:
    error = OptionError("{dtype} {value!r} is not supported", value="{kv_dtype}\nx")
    assert error.options == ("dtype",)
    assert describe(error) == "--dtype '{kv_dtype}\\nx' is not supported"


def test_library_calls_raise_option_errors() -> None:
    with pytest.raises(OptionError, match=r"^group_size must be positive, got 0$"):
        precision("w4", group_size=0)
    with pytest.raises(OptionError) as caught:
        precision("bf16", group_size=64)
    assert caught.value.options == ("group_size", "dtype")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["compile", "llama-3.2-1b", "--dtype", "bf16", "--group-size", "64"],
         "--group-size applies to integer weights (w4, w4-zp), not to --dtype bf16"),
        (["simulate", "llama-3.2-1b", "--pp", "2", "--batch", "4", "--micro-batches", "3"],
         "--micro-batches 3 must divide the batch (4)"),
    ],
)  # fmt: skip
def test_the_cli_prints_flags(args: list[str], expected: str, capsys) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err == f"tcpc: error: {expected}\n"


def test_simulator_errors_name_options_too() -> None:
    """The simulator cannot import the compiler: its option errors share the mechanism from below."""
    with pytest.raises(HardwareError) as caught:
        load_hardware("rngd", 0)
    assert str(caught.value) == "chips must be at least 1, got 0"
    assert describe(caught.value) == "--chips must be at least 1, got 0"
    assert describe(pickle.loads(pickle.dumps(caught.value))) == "--chips must be at least 1, got 0"


def test_no_library_error_is_phrased_as_a_flag() -> None:
    """Outside tcp_compiler/cli/, no raised error's text spells a flag (`--chips`)."""
    phrased = []
    for package in ("ir", "simulator", "tcp_compiler"):
        for p in (ROOT / package).rglob("*.py"):
            if p.parent.name == "cli":
                continue
            for node in ast.walk(ast.parse(p.read_text())):
                if not isinstance(node, ast.Raise):
                    continue
                texts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                if any(isinstance(t, str) and re.search(r"(^|\s)--[a-z]", t) for t in texts):
                    phrased.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert phrased == []


def test_cli_error_is_raised_only_by_the_cli() -> None:
    users = [
        str(p.relative_to(ROOT))
        for package in ("ir", "simulator", "tcp_compiler")
        for p in (ROOT / package).rglob("*.py")
        if "CliError" in p.read_text() and p.parent.name != "cli" and p.name != "errors.py"
    ]
    assert users == []


def test_option_errors_cross_process_boundaries() -> None:
    """Sweep workers may send an error back: it arrives whole."""
    error = pickle.loads(pickle.dumps(OptionError("{pp} {value} is too many", value="3{")))
    assert describe(error) == "--pp 3{ is too many"


def test_a_sweep_row_names_flags_too(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    args = ["sweep", "llama-3.2-1b", "--pp", "17", "--prompt-len", "32", "--gen-len", "2", "--jobs", "1"]
    assert main([*args, "--json", str(out)]) == 1  # every point failed
    [row] = json.loads(out.read_text())
    assert row["error"] == "llama-3.2-1b: --pp 17 exceeds its 16 layers (each stage needs one)"
