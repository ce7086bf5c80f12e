"""`tcpc inspect`: reports, JSON, DOT, and one-line errors with exit code 2 on bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tcp_compiler.cli import main

GEMM = """graph gemm {
  %a = input() : bf16[M=64, K=32]
  %b = param() : bf16[K=32, N=16]
  %c = einsum(%a, %b) {eq = "M K, K N -> M N"} : f32[M=64, N=16]
  %d = exp(%c) : f32[M=64, N=16]
  return %d
}
"""


@pytest.fixture
def gemm(tmp_path: Path) -> Path:
    path = tmp_path / "gemm.tir"
    path.write_text(GEMM)
    return path


def test_inspect_prints_tables_and_totals(gemm: Path, capsys) -> None:
    assert main(["inspect", str(gemm)]) == 0
    out = capsys.readouterr().out
    assert "graph gemm" in out and "einsum" in out and "%c" in out
    assert "66,560 FLOPs" in out  # 2*64*32*16 + 64*16


def test_inspect_json(gemm: Path, capsys) -> None:
    assert main(["inspect", str(gemm), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["flops_by_kind"]["einsum"] == 2 * 64 * 32 * 16
    assert report["flops_by_kind"]["exp"] == 64 * 16
    assert report["total_flops"] == sum(report["flops_by_kind"].values())
    assert report["counts_by_kind"] == {"input": 1, "param": 1, "einsum": 1, "exp": 1}
    einsum = next(op for op in report["ops"] if op["kind"] == "einsum")
    assert einsum["bytes_read"] == 64 * 32 * 2 + 32 * 16 * 2
    assert einsum["bytes_written"] == 64 * 16 * 4


def test_inspect_top(gemm: Path, capsys) -> None:
    assert main(["inspect", str(gemm), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "top 1 ops" in out and "%c" in out and "%d " not in out


def test_inspect_writes_dot(gemm: Path, tmp_path: Path, capsys) -> None:
    dot = tmp_path / "gemm.dot"
    assert main(["inspect", str(gemm), "--dot", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith('digraph "gemm" {') and '"a" -> "c";' in text and '"c" -> "d";' in text


BAD_INPUTS = {
    "syntax": ("graph g {\n  %x = input( : f32[A=2]\n  return %x\n}\n", "bad.tir:2:15: expected ')'"),
    "type": (
        "graph g {\n  %x = input() : f32[A=2]\n  %y = exp(%x) : f32[A=3]\n  return %y\n}\n",
        "bad.tir:3: %y = exp: result axis 'A' has size 3 but the op gives 2",
    ),
    "dtype": ("graph g {\n  %x = input() : f31[A=2]\n  return %x\n}\n", "bad.tir:2:18: unknown dtype 'f31'"),
    "binary": (b"\xff\xfe\x00garbage", "bad.tir: cannot read"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case: str, tmp_path: Path, capsys) -> None:
    text, expected = BAD_INPUTS[case]
    bad = tmp_path / "bad.tir"
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    dot = tmp_path / "out.dot"
    assert main(["inspect", str(bad), "--json", "--dot", str(dot)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("tcpc: error: ")
    assert expected in captured.err.replace(str(tmp_path) + "/", "")
    assert not dot.exists()


def test_missing_file(tmp_path: Path, capsys) -> None:
    assert main(["inspect", str(tmp_path / "nope.tir")]) == 2
    assert "nope.tir: cannot read: No such file or directory" in capsys.readouterr().err


def test_unwritable_dot_target(gemm: Path, tmp_path: Path, capsys) -> None:
    assert main(["inspect", str(gemm), "--dot", str(tmp_path / "no" / "such" / "dir.dot")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tcpc: error: ") and "cannot write" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == [gemm]


def test_console_script_help_and_error() -> None:
    exe = shutil.which("tcpc") or ""
    cmd = [exe] if exe else [sys.executable, "-m", "tcp_compiler"]
    result = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "inspect" in result.stdout
    result = subprocess.run(
        [*cmd, "inspect", "/nonexistent.tir"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("tcpc: error:") and "Traceback" not in result.stderr


def test_a_full_or_closed_standard_output_is_one_line_or_silent() -> None:
    """`> /dev/full` is a one-line error (exit 2); a reader that stops early (`| head -1`) ends the
    command quietly: neither prints a traceback."""
    tcpc = [sys.executable, "-m", "tcp_compiler"]
    with open("/dev/full", "w") as full:
        layer = Path(__file__).parents[1] / "examples" / "ir" / "llama_decoder_layer.tir"
        run = subprocess.run([*tcpc, "inspect", str(layer)], stdout=full, stderr=subprocess.PIPE, text=True,
                             check=False)  # fmt: skip
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "cannot write standard output" in run.stderr
    proc = subprocess.Popen([*tcpc, "compile", "llama-3.1-8b", "--seq", "64"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().startswith("graph ")
    proc.stdout.close()  # stop reading, as `head -1` does
    err = proc.stderr.read()
    assert proc.wait() == 0 and "Traceback" not in err and err == ""


def test_simulate_into_head_exits_0() -> None:
    """`tcpc simulate | head -1`: the reader had what it wanted, so the command succeeded."""
    args = [sys.executable, "-m", "tcp_compiler", "simulate", "llama-3.2-1b", "--prompt-len", "16",
            "--gen-len", "2", "--top", "all"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("llama-3.2-1b on rngd")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait() == 0 and "Traceback" not in err and "Broken" not in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--json", "{tmp}/a.json", "--markdown", "{tmp}/no/r.md"], "{tmp}/no/r.md: cannot write: folder"),
        (["--json", "{tmp}"], "is a folder"),
        (["--trace", "/proc/t.json"], "cannot create files in /proc"),
        (["--plot", "{tmp}/a_file"], "exists and is not a folder"),
    ],
)
def test_output_paths_are_checked_before_any_work(
    args: list[str], expected: str, tmp_path: Path, capsys
) -> None:
    """A run that cannot write one of its outputs fails at once and writes none of them."""
    (tmp_path / "a_file").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    assert main(["simulate", "llama-3.2-1b", "--prompt-len", "16", "--gen-len", "2", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected.format(tmp=tmp_path) in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_an_output_that_fails_while_written_is_one_line(tmp_path: Path) -> None:
    from simulator.errors import OutputError
    from simulator.files import atomic_output

    with pytest.raises(OutputError, match="cannot write"), atomic_output(tmp_path / "x.json"):
        raise OSError(28, "No space left on device", None)
    assert list(tmp_path.iterdir()) == []


def test_no_sequence_parallel_keeps_the_all_reduces_and_takes_no_value(capsys) -> None:
    """`--no-sequence-parallel` (compile, simulate): a tensor-parallel prefill's blocks join by
    all-reduces of every token instead of reduce-scatters along S; a value given to it is a
    one-line error with exit code 2."""
    kinds = []
    for extra in ([], ["--no-sequence-parallel"]):
        assert main(["compile", "llama-3.2-1b", "--tp", "2", "--seq", "64", *extra]) == 0
        text = capsys.readouterr().out
        kinds.append((text.count("= reduce_scatter("), text.count("= all_reduce(")))
    (scatters, reduces), (scatters_off, reduces_off) = kinds
    assert scatters > 0 and reduces == 1  # the last token's row, picked
    assert scatters_off == 0 and reduces_off == scatters  # each join, of every token
    assert main(["compile", "llama-3.2-1b", "--tp", "2", "--no-sequence-parallel=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--no-sequence-parallel" in err
