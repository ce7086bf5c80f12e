"""The docs' quotes of tcpc output are what tcpc prints now (docs/excerpts.py), and the generator
itself rewrites exactly the marked parts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def excerpts():
    spec = importlib.util.spec_from_file_location("excerpts", ROOT / "docs" / "excerpts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_rewrites_only_marked_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    module = excerpts()
    monkeypatch.setitem(module.EXCERPTS, "answer", lambda: "42")
    text = "keep <!-- generated: answer -->41<!-- end --> keep\n<!-- generated: answer -->\nold\n<!-- end -->"
    assert module.regenerate(text, "t.md") == "keep <!-- generated: answer -->42<!-- end --> keep\n" + (
        "<!-- generated: answer -->42<!-- end -->"
    )
    with pytest.raises(KeyError, match="unknown excerpt 'nope'"):
        module.regenerate("<!-- generated: nope -->x<!-- end -->", "t.md")


def test_every_excerpt_is_used_and_the_docs_are_up_to_date() -> None:
    module = excerpts()
    used = {m["name"] for path in module.documents() for m in module.MARKED.finditer(path.read_text())}
    assert used == set(module.EXCERPTS)  # no excerpt generated for nothing, none missing
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "excerpts.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nrun: python docs/excerpts.py"
