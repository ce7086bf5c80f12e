"""docs/architecture.md and the README's layout table name the packages as they are: every source
package is named, and every path either names exists, so neither can drift from the tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("ir", "simulator", "tcp_compiler")
# A backticked path: starts at a top-level folder of the repository and names a file or folder.
PATH = re.compile(r"`((?:ir|simulator|tcp_compiler|docs|tests|benchmarks|examples)/[\w./-]*)`")


def packages() -> list[str]:
    """Every folder of source code under the three roots that Python imports as a package."""
    found = [p.parent for root in ROOTS for p in (ROOT / root).rglob("__init__.py")]
    return sorted(f"{p.relative_to(ROOT).as_posix()}/" for p in found if "__pycache__" not in p.parts)


def layout_table() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Layout", 1)[1].split("\n## ", 1)[0]


def architecture() -> str:
    return (ROOT / "docs" / "architecture.md").read_text()


def test_packages_are_found() -> None:
    assert {"ir/", "simulator/targets/rngd/", "tcp_compiler/frontend/builder/"} <= set(packages())


@pytest.mark.parametrize("page", ["README layout", "docs/architecture.md"])
def test_every_package_is_named(page: str) -> None:
    text = layout_table() if page == "README layout" else architecture()
    named = set(PATH.findall(text))
    missing = [p for p in packages() if p not in named]
    assert not missing, f"{page} does not name: {missing}"


@pytest.mark.parametrize("page", ["README layout", "docs/architecture.md"])
def test_every_named_path_exists(page: str) -> None:
    text = layout_table() if page == "README layout" else architecture()
    paths = PATH.findall(text)
    assert len(paths) > 20
    gone = [p for p in paths if not (ROOT / p.rstrip("/")).exists() and "<" not in p]
    assert not gone, f"{page} names paths that do not exist: {gone}"
