"""The scheduler registry: a policy is one registered class, offered by `tcpc serve --scheduler`,
served, and described in docs/serving.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli import build_parser
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.serve import ServeOptions, serve, synthetic
from tcp_compiler.serve.schedulers import SCHEDULERS, Continuous, register
from tcp_compiler.serve.workload import lengths

DOCS = Path(__file__).resolve().parents[1] / "docs" / "serving.md"


@pytest.fixture
def one_at_a_time():
    """A policy registered for one test: continuous admission of at most one running sequence."""

    @register
    class OneAtATime(Continuous):
        """Continuous, one sequence at a time."""

        name = "one-at-a-time"

        def plan(self, st):
            st.max_seqs = 1
            return super().plan(st)

    yield OneAtATime
    del SCHEDULERS[OneAtATime.name]


def test_registered_names_in_order() -> None:
    assert list(SCHEDULERS) == ["static", "continuous", "chunked"]
    assert [name for name, cls in SCHEDULERS.items() if cls.chunks_prompts] == ["chunked"]


def test_a_registered_class_is_a_serve_choice_and_serves(one_at_a_time) -> None:
    args = build_parser().parse_args(["serve", "--scheduler", "one-at-a-time"])
    assert args.scheduler == "one-at-a-time"
    config, hw = load_model("llama-3.2-1b").config, load_hardware("rngd")
    requests = synthetic(3, lengths("16"), lengths("2"), None, False, 0)
    result = serve(config, hw, precision("bf16"), requests, ServeOptions(scheduler="one-at-a-time"))
    assert result.iterations.array("decodes").max() == 1  # never two sequences at once


def test_every_registered_scheduler_is_documented() -> None:
    section = DOCS.read_text().split("## Schedulers (`--scheduler`)")[1].split("\n## ")[0]
    assert re.findall(r"^- `([a-z-]+)`", section, re.M) == list(SCHEDULERS)
