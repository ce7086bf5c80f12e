"""One position limit for `tcpc simulate` and `tcpc run` (issue 28): learned positions cannot pass
their table (refused by both, the same one line, exit 2); every other scheme runs past
max_position_embeddings as transformers runs it, with a note when that passes the context its
positions are made for (none for dynamic NTK, which rescales itself for any length). Past the
limit, dynamic NTK's logits are transformers' own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tcp_compiler.cli import main
from tcp_compiler.errors import FrontendError
from tests.oracle.test_families import reference_logits
from tests.oracle.tiny_models import build, save

MAX = {"llama": 64, "llama_dynamic": 8, "gpt2": 64}  # the tiny models' max_position_embeddings


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    return {name: save(build(name), tmp_path_factory.mktemp(name)) for name in MAX}


def _run(directory: Path, prompt: int, steps: int, *extra: str) -> int:
    ids = ",".join(str(1 + i % 90) for i in range(prompt))
    return main(["run", str(directory), "--prompt-ids", ids, "--decode-steps", str(steps), *extra])


def _simulate(directory: Path, prompt: int, gen: int) -> int:
    argv = ["simulate", str(directory), "--prompt-len", str(prompt), "--gen-len", str(gen), "--top", "1"]
    return main(argv)


def test_learned_positions_are_refused_alike_by_run_and_simulate(checkpoints, capsys) -> None:
    """prompt + fed-back tokens = max is the last length that runs; one more is refused by both."""
    gpt2 = checkpoints["gpt2"]
    assert _run(gpt2, MAX["gpt2"] - 2, 2) == 0
    assert _simulate(gpt2, MAX["gpt2"] - 2, 3) == 0
    capsys.readouterr()
    errors = []
    for command in (lambda: _run(gpt2, MAX["gpt2"] - 2, 3), lambda: _simulate(gpt2, MAX["gpt2"] - 2, 4)):
        code, err = command(), capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        errors.append(err)
    assert errors[0] == errors[1]
    assert "65 positions exceed its 64 learned position embeddings (max_position_embeddings)" in errors[0]


def test_rope_past_max_positions_runs_in_both_with_the_same_note(checkpoints, capsys) -> None:
    llama = checkpoints["llama"]
    notes = []
    for command in (lambda: _run(llama, MAX["llama"], 2), lambda: _simulate(llama, MAX["llama"], 3)):
        code, err = command(), capsys.readouterr().err
        assert code == 0
        notes.append([line for line in err.splitlines() if line.startswith("note:")])
    assert notes[0] == notes[1] and len(notes[0]) == 1
    assert "uses 66 positions, past the 64 its rope positions are made for" in notes[0][0]
    assert _run(llama, MAX["llama"] - 2, 2) == 0 and "note:" not in capsys.readouterr().err


def test_dynamic_ntk_runs_past_max_positions_without_a_note(checkpoints, capsys) -> None:
    steps = 6
    assert _simulate(checkpoints["llama_dynamic"], MAX["llama_dynamic"] + 4, steps) == 0
    assert _run(checkpoints["llama_dynamic"], MAX["llama_dynamic"] - 2, steps) == 0
    assert "note:" not in capsys.readouterr().err


def test_tcpc_run_past_dynamic_ntks_max_positions_writes_transformers_logits(tmp_path: Path) -> None:
    """Prompt 6 and 6 decode steps on max_position_embeddings 8: the base is rescaled at every
    step past 8, each new key rotated with that step's frequencies, the cached ones keeping theirs."""
    model = build("llama_dynamic", seed=5)
    directory = save(model, tmp_path / "ckpt")
    out, prompt, steps = tmp_path / "logits.npz", [5, 17, 3, 88, 42, 9], 6
    assert len(prompt) + steps > MAX["llama_dynamic"] == model.config.max_position_embeddings
    ids = ",".join(map(str, prompt))
    assert main(["run", str(directory), "--prompt-ids", ids, "--decode-steps", str(steps),
                 "--logits-out", str(out)]) == 0  # fmt: skip
    saved = np.load(out)
    theirs = reference_logits(model, prompt, saved["tokens"][:steps].tolist())
    ours = [saved["prefill"]] + [saved[f"decode_{k}"] for k in range(steps)]
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"step {step}")


def test_the_context_each_scheme_is_made_for() -> None:
    """RoPE's context is max_position_embeddings, yarn's its original context x factor when longer;
    ALiBi and dynamic NTK have none (they extrapolate); learned positions are refused past theirs."""
    from tcp_compiler.frontend.builder import check_positions, past_context
    from tcp_compiler.frontend.config import Rope
    from tcp_compiler.frontend.model import load_model

    llama = load_model("llama-3.2-1b").config
    assert past_context(llama, 131_072) is None and "131,073 positions, past the 131,072" in past_context(
        llama, 131_073
    )
    yarn = dataclasses.replace(llama, layers=tuple(
        dataclasses.replace(layer, rope=Rope(500000.0, "yarn", 4.0, original_max_positions=65_536))
        for layer in llama.layers))  # fmt: skip
    assert past_context(yarn, 262_144) is None and "past the 262,144" in past_context(yarn, 262_145)
    dynamic = dataclasses.replace(llama, layers=tuple(
        dataclasses.replace(layer, rope=Rope(500000.0, "dynamic", 4.0, max_positions=131_072))
        for layer in llama.layers))  # fmt: skip
    assert past_context(dynamic, 10**6) is None
    bloom = load_model("bloom-560m").config
    assert past_context(dataclasses.replace(bloom, max_positions=2048), 10**6) is None  # ALiBi
    gpt2 = load_model("gpt2").config
    check_positions(gpt2, 1024)
    with pytest.raises(FrontendError, match="1025 positions exceed its 1024 learned position embeddings"):
        check_positions(gpt2, 1025)
