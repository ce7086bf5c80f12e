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


def test_prose_quotes_the_dependencies_its_excerpt_shows() -> None:
    """Prose citing a command as (#N, `deps`) agrees with the generated excerpt's line for #N."""
    import re

    text = (ROOT / "docs" / "hardware-model.md").read_text()
    commands = {m[1]: m[0] for m in re.finditer(r"^\s+#(\d+)\s.*$", text, re.M)}
    cited = re.findall(r"\(#(\d+), `([^`]+)`\)", text)
    assert cited
    for number, deps in cited:
        assert commands[number].rstrip().endswith(deps), (number, deps, commands[number])


def test_measured_figures_name_commands_that_exist() -> None:
    """A figure too slow to regenerate in tests (a benchmark's CPU time) names its measuring command
    and date; the command must still run as written: the script exists and takes those flags."""
    import re

    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    commands = {m for page in pages for m in re.findall(r"python (benchmarks/\w+\.py)((?: --[\w-]+)*)",
                                                          page.read_text())}  # fmt: skip
    assert ("benchmarks/serve_speed.py", " --speed-only") in commands
    for script, flags in commands:
        assert (ROOT / script).is_file(), script
        if flags:
            shown = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True,
                                   text=True, cwd=ROOT, check=True).stdout  # fmt: skip
            assert all(flag in shown for flag in flags.split()), (script, flags)
