"""A long simulate says so up front: the prefill's attention plan is heard before its rewrite."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.cli.status import LARGE_PLAN_TILES, large_plan_note
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.observer import Observer
from tcp_compiler.simulate import simulate_generation


class Recorder(Observer):
    """Keeps every event, in order."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.steps: list[str] = []
        self.plans: list[list[dict]] = []
        self.progressed: list[tuple[int, int]] = []

    def stage(self, what: str) -> None:
        self.stages.append(what)

    def step(self, name: str) -> None:
        self.steps.append(name)

    def planned(self, attention: list[dict]) -> None:
        self.plans.append(attention)

    def progress(self, done: int, total: int) -> None:
        self.progressed.append((done, total))


def test_the_plan_arrives_before_the_rewrite_with_its_tile_count() -> None:
    heard = Recorder()
    cfg = load_model("llama-3.2-1b").config
    sim = simulate_generation(cfg, load_hardware("rngd"), precision("bf16"), 1, 8192, 1, observer=heard)
    heard, stages = heard.plans, heard.stages
    (notes,) = heard
    online = [n for n in notes if n["form"] == "online"]
    assert online and all(n["tiles"] == -(-8192 // n["rows"]) * -(-8192 // n["block"]) for n in online)
    assert [n["op"] for n in notes] == [a["op"] for a in sim.attention]
    assert stages[0].startswith("compiling the decode") and any("prefill" in s for s in stages)


def test_only_plans_past_the_threshold_get_a_note() -> None:
    small = [{"form": "online", "tiles": LARGE_PLAN_TILES // 2}, {"form": "plain"}]
    assert large_plan_note(small) is None
    note = large_plan_note(small * 3)
    assert note is not None and "minutes" in note and "\n" not in note


def test_the_observer_hears_the_named_lowering_steps_and_passes() -> None:
    from tcp_compiler.passes import PIPELINE
    from tcp_compiler.pipeline import LOWERING

    heard = Recorder()
    cfg = load_model("llama-3.2-1b").config
    simulate_generation(cfg, load_hardware("rngd"), precision("bf16"), 1, 32, 3, observer=heard)
    lowering = [name for name, _ in LOWERING]
    one = lowering[:2] + list(PIPELINE) + lowering[2:]  # the passes run inside the "passes" step
    assert heard.steps == one + one + ["schedule"]  # the decode step, then the prefill
    assert heard.progressed[-1] == (2, 2)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_pipelined_run_is_heard_as_one_stage_is(pp: int) -> None:
    """With --pp the attention plans and the decode steps are heard as without it: each stage's
    prefill plan (together the report's attention), and every step done."""
    heard = Recorder()
    cfg = load_model("llama-3.2-1b").config
    sim = simulate_generation(cfg, load_hardware("rngd", pp), precision("bf16"), 2, 64, 5, 1, pp=pp,
                              observer=heard)  # fmt: skip
    assert len(heard.plans) == pp
    assert [n["op"] for plan in heard.plans for n in plan] == [a["op"] for a in sim.attention]
    assert heard.progressed and heard.progressed[-1] == (4, 4)
