"""What limits a phase beyond its roofline (issue 16): the activity breakdown of a timeline is
right on hand-made programs and agrees with a brute-force reading of a real one; the limiter's
parts add up to the excess and follow the hardware (a slower DMA start-up shows up as such)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from simulator.hardware import load_hardware
from simulator.occupancy import state_cycles
from simulator.program import OpInfo, ProgramBuilder
from simulator.targets.rngd.sites import SITES
from simulator.timeline import Timeline
from tcp_compiler.analysis.limiter import HOST_CAUSES, Limiter, limiter_line
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.build import build_report
from tcp_compiler.report.markdown import render_markdown
from tcp_compiler.report.types import Report
from tcp_compiler.simulate import simulate_generation

_CONTRACTION = "contraction"
BIT, STATES, CONTEXTS = SITES.bits, SITES.states, SITES.context_names


def _program(commands: list[dict]) -> ProgramBuilder:
    b = ProgramBuilder(SITES)
    op = b.op(OpInfo("x", "pass", 0))
    for c in commands:
        b.command(c.pop("context"), op, **c)
    return b


def test_states_of_a_hand_made_timeline() -> None:
    """A DMA move (start-up 0-10, moving 10-100) beside a contraction pass (50-150), then a vector
    pass (150-160) and a gap to the end (cycle 170)."""
    b = _program([
        dict(context="dma", cycles=100, latency=10, moved=900, hbm_bytes=900),
        dict(context="main", cycles=100, busy={"contraction": 80}),
        dict(context="main", cycles=10, busy={"vector": 10}),
        dict(context="main", cycles=10),
    ])  # fmt: skip
    program = b.build()
    timeline = Timeline(np.array([0.0, 50.0, 150.0, 160.0]), np.array([100.0, 150.0, 160.0, 170.0]))
    states = state_cycles(program, timeline)
    assert states.shape == (STATES,) and states.sum() == 170
    expected = {
        BIT["dma_startup"]: 10, BIT["hbm_move"]: 40, BIT["hbm_move"] | BIT[_CONTRACTION]: 50,
        BIT[_CONTRACTION]: 50, BIT["tensor_unit_other"]: 20,
    }  # fmt: skip
    assert {int(s): float(states[s]) for s in np.flatnonzero(states)} == expected


def _brute_force(program, timeline) -> np.ndarray:
    """Each piece between two event times, its activities read straight from the commands."""
    context = np.array(CONTEXTS)[program.context]
    moves = (context == "dma") & (program.moved > 0) & (program.cycles > program.latency)
    middle = np.where(moves, np.minimum(timeline.start + program.latency, timeline.end), timeline.end)
    contraction = program.busy[:, SITES.unit(_CONTRACTION)] > 0
    cuts = np.unique(np.concatenate([[0.0, timeline.cycles], timeline.start, timeline.end, middle]))
    total = np.zeros(STATES)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        t = (lo + hi) / 2
        on = (timeline.start < t) & (t < timeline.end)
        moving = on & moves & (t > middle)
        mask = 0
        mask |= BIT["hbm_move"] * bool((moving & (program.hbm_bytes > 0)).any())
        mask |= BIT["dma_on_chip"] * bool((moving & (program.hbm_bytes == 0)).any())
        mask |= BIT["dma_startup"] * bool((on & (context == "dma") & (t < middle)).any())
        mask |= BIT[_CONTRACTION] * bool((on & (context == "main") & contraction).any())
        mask |= BIT["tensor_unit_other"] * bool((on & (context == "main") & ~contraction).any())
        mask |= BIT["sub"] * bool((on & (context == "sub")).any())
        mask |= BIT["link"] * bool((on & (context == "link")).any())
        total[mask] += hi - lo
    return total


def test_states_of_a_real_decode_step_match_a_brute_force_reading() -> None:
    config = load_model("llama-3.2-1b").config
    sim = simulate_generation(config, load_hardware("rngd-2"), PRECISIONS["bf16"], 1, 64, 2)
    step = sim.traced_steps[0]
    assert (step.program.context == SITES.context("link")).any()  # every activity kind is there
    found = state_cycles(step.program, step.timeline)
    np.testing.assert_allclose(found, _brute_force(step.program, step.timeline), atol=1e-6)


def _report(hw: str = "rngd", prompt: int = 64, layers: int | None = None) -> Report:
    config = load_model("llama-3.2-1b").config
    if layers:
        config = dataclasses.replace(config, layers=config.layers[:layers])
    return build_report(simulate_generation(config, load_hardware(hw), PRECISIONS["bf16"], 1, prompt, 3))


@pytest.fixture(scope="module")
def report() -> Report:
    return _report()


def _limiters(report: Report) -> list[tuple[str, float, float, Limiter]]:
    dec = report.decode
    return [
        ("prefill", report.prefill.seconds, report.prefill.roofline_seconds, report.prefill.limiter),
        ("decode", dec.tpot_seconds_mean, dec.roofline_seconds_mean, dec.limiter),
    ]


@pytest.mark.parametrize("case", ["llama-3.2-1b", "2 chips", "compute-bound"])
def test_parts_add_up_to_the_time_beyond_the_roofline(case: str, report: Report) -> None:
    chosen = {"llama-3.2-1b": lambda: report, "2 chips": lambda: _report("rngd-2"),
              "compute-bound": lambda: _report(prompt=2048, layers=2)}[case]()  # fmt: skip
    for phase, seconds, roofline, lim in _limiters(chosen):
        assert lim.excess_seconds == pytest.approx(seconds - roofline), phase
        assert lim.roofline_ratio == pytest.approx(seconds / roofline), phase
        cycle = 1 / chosen.hardware.clock_hz
        total = sum(p.seconds for p in lim.parts)
        assert abs(total - lim.excess_seconds) < 14 * cycle, (phase, total, lim.excess_seconds)
        assert all(p.seconds >= cycle and 0 <= p.share <= 1 + 1e-9 for p in lim.parts), phase
        assert [p.seconds for p in lim.parts] == sorted((p.seconds for p in lim.parts), reverse=True)
        launch = next(p for p in lim.parts if p.cause == "kernel_launch")
        assert launch.seconds == pytest.approx(chosen.prefill.launch_seconds)
        host = sum(p.seconds for p in lim.parts if p.cause in HOST_CAUSES.values())
        own = chosen.prefill if phase == "prefill" else chosen.decode
        assert host == pytest.approx(own.host_seconds + chosen.prefill.launch_seconds), phase


def test_resource_is_the_largest_roofline_term() -> None:
    assert _report().prefill.limiter.resource == "memory"
    compute = _report(prompt=2048, layers=2).prefill.limiter
    assert compute.resource == "compute"
    assert {"pipeline_stages"} <= {p.cause for p in compute.parts}
    assert any(p.cause == "link" for p in _report("rngd-2").decode.limiter.parts)  # collectives


def test_a_slower_dma_start_up_is_named_as_the_limiter(tmp_path: Path) -> None:
    """The same run with a 4x DMA start-up: its `dma_startup` part grows, and nothing else changes
    in the spec, so the parts come from the timeline, not from constants."""
    slow = tmp_path / "slow-dma.toml"
    slow.write_text('extends = "rngd"\n[dma]\nstartup_cycles = { value = 2000, source = "assumed: test" }\n')
    base, slower = _report(), _report(str(slow))
    for (_, _, _, a), (_, _, _, b) in zip(_limiters(base), _limiters(slower), strict=True):
        startup = {p.cause: p.seconds for p in a.parts}.get("dma_startup", 0.0)
        assert {p.cause: p.seconds for p in b.parts}["dma_startup"] > 2 * startup
    device = [p for p in slower.decode.limiter.parts if p.cause not in HOST_CAUSES.values()]
    assert device[0].cause == "dma_startup"  # of the device's parts; the host's are the spec's [host]


def test_terminal_and_markdown_name_the_limiter(report: Report, capsys) -> None:
    assert main(["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    lim = report.prefill.limiter
    line = limiter_line("prefill", lim, SITES)
    assert line.startswith(f"prefill {lim.roofline_ratio:.2f}x roofline, memory-bound (HBM); the rest: ")
    assert f"{lim.parts[0].what} {100 * lim.parts[0].share:.0f}%" in line
    assert line in out
    whole = limiter_line("decode", report.decode.limiter, SITES, shown=99, least=0.0)
    assert f"- {whole}" in render_markdown(report, SITES)
