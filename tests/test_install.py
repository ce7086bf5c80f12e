"""A non-editable install works on its own: the bundled models and hardware specs ship as package
data, so `tcpc` run from another folder, with only the installed copy on its path, finds them."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tcp_compiler.frontend.model import BUNDLED, bundled_models

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "ir", "simulator", "tcp_compiler")


def test_the_bundled_models_are_inside_the_package() -> None:
    assert BUNDLED.is_relative_to(ROOT / "tcp_compiler")
    assert "llama-3.1-8b" in bundled_models() and (BUNDLED / "model_cards.toml").is_file()
    assert not (ROOT / "examples" / "models").exists()  # one copy


def builds_here() -> bool:
    """Whether this environment's setuptools builds a wheel by itself (70.1 on); an older one (a
    fresh Python 3.11 venv has 65.5) needs pip's isolated build, which fetches setuptools."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(p) for p in version.split(".")[:2]) >= (70, 1)


@pytest.mark.slow
def test_a_target_install_runs_from_another_folder(tmp_path: Path) -> None:
    source, target, elsewhere = tmp_path / "source", tmp_path / "target", tmp_path / "elsewhere"
    source.mkdir()
    for name in SOURCES:  # a copy, so the build leaves nothing in the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    isolation = ["--no-build-isolation", "--no-index"] if builds_here() else []
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", *isolation, "--quiet", "--target",
           str(target), str(source)]  # fmt: skip
    built = subprocess.run(pip, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}

    def tcpc(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "tcp_compiler", *args], cwd=elsewhere, env=env,
                             capture_output=True, text=True, check=False)  # fmt: skip
        assert run.returncode == 0, run.stderr
        return run.stdout

    where = subprocess.run([sys.executable, "-c", "import tcp_compiler; print(tcp_compiler.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(target)
    assert "2,880 GB/s" in tcpc("hw", "show", "rngd-2x-hbm")
    assert "TTFT" in tcpc("simulate", "llama-3.2-1b", "--prompt-len", "32", "--gen-len", "2",
                          "--hw", "rngd-2x-hbm")  # fmt: skip
