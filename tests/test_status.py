"""A long simulate says so up front: the prefill's attention plan is heard before its rewrite."""

from __future__ import annotations

from simulator.hardware import load_hardware
from tcp_compiler.cli.status import LARGE_PLAN_TILES, large_plan_note
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.simulate import simulate_generation


def test_the_plan_arrives_before_the_rewrite_with_its_tile_count() -> None:
    heard: list = []
    stages: list[str] = []
    cfg = load_model("llama-3.2-1b").config
    sim = simulate_generation(cfg, load_hardware("rngd"), precision("bf16"), 1, 8192, 1,
                              stage=stages.append, planned=heard.append)  # fmt: skip
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
