"""docs/ir.md is generated from the op registry; it must be current and cover every op."""

from __future__ import annotations

from pathlib import Path

from ir.ops import REGISTRY
from ir.reference import render_reference

DOC = Path(__file__).parents[1] / "docs" / "ir.md"


def test_reference_doc_is_current() -> None:
    assert DOC.read_text() == render_reference(), "run: python -m ir.reference > docs/ir.md"


def test_every_op_is_documented_with_an_example_of_itself() -> None:
    text = render_reference()
    for kind, op in REGISTRY.items():
        assert f"### `{kind}`" in text
        assert op.summary, kind
        assert f"= {kind}(" in op.example, kind
