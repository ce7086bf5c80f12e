"""Every command block of the README runs as written, its Python runs, and its IR is the example's.

Commands run through bash in a fresh directory (with `examples/` linked in, so relative paths work),
block by block so a later command finds what an earlier one wrote (the README's `tcpc run` runs
on the checkpoint examples/make_tiny_checkpoint.py writes just before it). Two documented departures:
SKIPPED segments of a `&&` chain are not run, and SMALLER shrinks the long runs' sizes (each entry
must still occur in the README, so the mapping cannot go stale).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()

SKIPPED = {
    "pip install": "the environment under test is already installed",
    "python -m pytest": "the suite is what runs this test",
}
SMALLER = {  # README text -> what the test runs: same options, sizes a test can afford
    "--batch 16 --prompt-len 2048 --gen-len 256": "--batch 2 --prompt-len 64 --gen-len 3",
    "--batch 1,8,32 --prompt-len 128,2048 --gen-len 128": "--batch 1,2 --prompt-len 32,64 --gen-len 3",
    "--decode-steps 8": "--decode-steps 2",
    "--gen-len 16 --store study.parquet": "--prompt-len 64 --gen-len 2 --store study.parquet",
    "--tp 4 --pp 2 --batch 32 --gen-len 16": "--tp 4 --pp 2 --batch 2 --prompt-len 64 --gen-len 3",
}
OUTPUTS = ("-o", "--json", "--markdown", "--csv", "--trace", "--plot", "--logits-out")  # must exist after
SLOW = ("## Simulation", "A grid")  # blocks of several full simulations: marked slow


def blocks(language: str) -> list[tuple[str, str]]:
    """(the line before it, body) of each fenced block in `language` ("" for none)."""
    found, inside, before = [], None, ""
    body: list[str] = []
    for line in README.splitlines():
        if inside is None and line.startswith("```"):
            inside, body = line[3:].strip(), []
        elif inside is not None and line.strip() == "```":
            if inside == language:
                found.append((before, "\n".join(body) + "\n"))
            inside = None
        elif inside is not None:
            body.append(line)
        elif line.strip():
            before = line
    return found


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]


def runnable(command: str) -> str:
    """The command as the test runs it: SKIPPED segments out, SMALLER sizes in."""
    kept = [part.strip() for part in command.split("&&")]
    kept = [part for part in kept if not any(part.startswith(skip) for skip in SKIPPED)]
    text = " && ".join(kept)
    for long, short in SMALLER.items():
        text = text.replace(long, short)
    return text


def sh_blocks() -> list:
    params = []
    for k, (before, body) in enumerate(blocks("sh")):
        marks = [pytest.mark.slow] if any(before.startswith(s) for s in SLOW) else []
        params.append(pytest.param(body, id=f"block{k}-{before[:30]}", marks=marks))
    return params


def test_the_mapping_matches_the_readme() -> None:
    for long in SMALLER:
        assert long in README, f"{long!r} is no longer in the README: update tests/test_readme.py"
    assert len(blocks("sh")) >= 5 and len(blocks("python")) == 1


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def run_shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "100"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("block", sh_blocks())
def test_command_block_runs(block: str, workdir: Path) -> None:
    for command in commands(block):
        text = runnable(command)
        if not text:
            continue  # every segment skipped (installing, running this suite)
        done = run_shell(text, workdir)
        assert done.returncode == 0, f"{text}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        words = shlex.split(text)
        for flag, value in zip(words, words[1:], strict=False):
            if flag in OUTPUTS:
                assert (workdir / value).exists(), f"{text}: {flag} {value} was not written"


def test_python_block_runs(workdir: Path) -> None:
    [(_, code)] = blocks("python")
    done = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "graph gemm" in done.stdout


def test_ir_example_is_the_gemm_example() -> None:
    [(_, ir)] = [(before, body) for before, body in blocks("") if body.startswith("graph gemm")]
    example = (ROOT / "examples/ir/gemm.tir").read_text()
    graph = example[example.index("graph gemm") :]
    assert ir == graph, "the README's IR block differs from examples/ir/gemm.tir"
