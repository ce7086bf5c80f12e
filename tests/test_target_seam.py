"""The hardware-target seam: a second, made-up target (this fixture, not shipped) with other
contexts, units and spec tables loads its spec and runs a Program through the engines, the
occupancy sweep, the op totals and the trace; and the generic modules never name RNGD."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from simulator.engine import simulate
from simulator.errors import HardwareError
from simulator.hardware import load_hardware
from simulator.occupancy import state_cycles
from simulator.program import OpInfo, ProgramBuilder
from simulator.reference_engine import simulate_reference
from simulator.report import op_totals
from simulator.spec import DTypeName, EngineRates, Spec, Table, value
from simulator.target import Activity, Cause, Context, Sites, Target, Unit
from simulator.targets.rngd.sites import SITES as RNGD_SITES
from simulator.trace import TraceRun, trace_events
from simulator.utilisation import totals_busy_cycles
from tcp_compiler.analysis.roofline import Roofline

WIRE_BYTES_PER_CYCLE = 100.0  # the toy's network


@dataclass(frozen=True)
class ToySystem(Table):
    chips: int = value("", 1, 64)
    clock_hz: float = value("Hz", 1e6, 1e10)


@dataclass(frozen=True)
class ToyMemory(Table):
    bytes_per_cycle: float = value("B/cycle", 1, 1e6)
    copiers: int = value("", 1, 64)
    ops_per_cycle: dict[str, int] = value("op/cycle", 1, 1 << 20, per=("int", "float"))


@dataclass(frozen=True)
class ToySpec(Spec):
    system: ToySystem
    memory: ToyMemory

    __hash__ = Spec.__hash__

    @property
    def rates(self) -> EngineRates:
        m = self.memory
        return EngineRates(self.system.clock_hz, m.bytes_per_cycle, m.bytes_per_cycle, m.copiers,
                           m.bytes_per_cycle / m.copiers)  # fmt: skip

    def flops_per_second(self, dtype: DTypeName) -> float:
        kind = "int" if str(getattr(dtype, "name", dtype)).startswith("i") else "float"
        return 2.0 * self.memory.ops_per_cycle[kind] * self.system.clock_hz

    @property
    def hbm_bytes_per_second(self) -> float:
        return self.memory.bytes_per_cycle * self.system.clock_hz

    @property
    def hbm_peak_bytes_per_second(self) -> float:
        return self.hbm_bytes_per_second

    @property
    def link_bytes_per_second(self) -> float:
        return WIRE_BYTES_PER_CYCLE * self.system.clock_hz

    def consistency(self) -> tuple[str, str] | None:
        if self.memory.copiers > self.memory.ops_per_cycle["int"]:
            return "memory.copiers", "more copiers than integer ops per cycle"
        return None


TOY_SITES = Sites(
    contexts=(
        Context("copy", ordered=False),
        Context("compute", ordered=True),
        Context("net", ordered=True, collective=True),
    ),
    units=(
        Unit("alu", "compute", ("memory.ops_per_cycle",), None, "arithmetic"),
        Unit(
            "copier",
            "copy",
            ("memory.bytes_per_cycle",),
            "dma_bytes",
            "copies",
            lambda spec: spec.memory.bytes_per_cycle,
        ),
        Unit("wire", "net", (), "link_bytes", "the network", lambda spec: WIRE_BYTES_PER_CYCLE),
    ),
    activities=(
        Activity("setup", "copy", "a copy starts", moving=False),
        Activity("copying", "copy", "a copy moves memory bytes", moving=True, hbm=True),
        Activity("local", "copy", "a copy moves local bytes", moving=True, hbm=False),
        Activity("alu", "compute", "the ALU computes", unit="alu"),
        Activity("idle_compute", "compute", "compute without the ALU"),
        Activity("net", "net", "a transfer"),
    ),
    stages=("alu",),
    rate_causes=(Cause("launch", "launch", "a launch"),),
    idle_cause="nothing",
)

TOY_SPEC = """
description = "a made-up machine"
[system]
chips = { value = 2, source = "assumed: a test" }
clock_hz = { value = 1e9, source = "assumed: a test" }
[memory]
bytes_per_cycle = { value = 256, source = "assumed: a test" }
copiers = { value = 4, source = "assumed: a test" }
[memory.ops_per_cycle]
int = { value = 64, source = "assumed: a test" }
float = { value = 32, source = "assumed: a test" }
"""


@pytest.fixture
def toy(tmp_path: Path) -> Target:
    (tmp_path / "toy.toml").write_text(TOY_SPEC)
    (tmp_path / "toy-fast.toml").write_text(
        'extends = "toy"\n[memory]\nbytes_per_cycle = { value = 512, source = "assumed: twice" }\n'
    )
    return Target("toy", ToySpec, tmp_path, TOY_SITES)


def _program():
    b = ProgramBuilder(TOY_SITES)
    load, mul, send, add = (b.op(OpInfo(name, "x", 0)) for name in ("load", "mul", "send", "add"))
    a = b.command("copy", load, 1100, latency=100, moved=256_000, hbm_bytes=256_000)
    c = b.command("copy", load, 600, latency=100, moved=128_000, dm_bytes=128_000)
    m = b.command("compute", mul, 900, [a], flops=1000, busy={"alu": 800})
    n = b.command("compute", mul, 300, [m, c])
    s = b.command("net", send, 400, [n], link_bytes=40_000, busy={"wire": 400})
    b.command("compute", add, 200, [s], chip=1, busy={"alu": 200})
    return b.build()


def test_a_second_targets_spec_loads_from_its_own_tables_and_presets(toy: Target) -> None:
    spec = load_hardware("toy-fast", target=toy)
    assert isinstance(spec, ToySpec) and spec.memory.bytes_per_cycle == 512.0 and spec.system.chips == 2
    assert spec.value("memory.ops_per_cycle.float") == 32
    assert spec.sources["memory.bytes_per_cycle"] == "assumed: twice"
    assert [k for k, *_ in spec.parameters()] == [
        "system.chips", "system.clock_hz", "memory.bytes_per_cycle", "memory.copiers",
        "memory.ops_per_cycle.int", "memory.ops_per_cycle.float",
    ]  # fmt: skip
    assert spec.with_chips(8).system.chips == 8
    assert spec.with_value("memory.ops_per_cycle.int", 8).memory.ops_per_cycle == {"int": 8, "float": 32}
    with pytest.raises(HardwareError, match=r"^memory\.copiers: more copiers than integer ops per cycle$"):
        spec.with_value("memory.ops_per_cycle.int", 2)
    with pytest.raises(HardwareError, match=r"toy\.toml: memory\.flops: unknown key"):
        bad = TOY_SPEC.replace("[memory]\n", '[memory]\nflops = { value = 1, source = "assumed: x" }\n')
        (toy.specs_dir / "toy.toml").write_text(bad)
        load_hardware("toy", target=toy)


def test_a_second_targets_program_runs_through_engines_occupancy_totals_and_trace(toy: Target) -> None:
    spec = load_hardware("toy", target=toy)
    program = _program()
    assert program.busy.shape == (6, 3) and program.sites is TOY_SITES
    hbm, pool = spec.rates.hbm_bytes_per_cycle, spec.rates.dma_bytes_per_cycle
    timeline = simulate(program, hbm, pool)
    reference = simulate_reference(program, hbm, pool)
    assert np.array_equal(timeline.start, reference.start) and np.array_equal(timeline.end, reference.end)
    # The two copies share the pool (256 B/cycle): together they take longer than either alone.
    assert timeline.end[1] > 600 and timeline.start[2] >= timeline.end[0]
    states = state_cycles(program, timeline)
    bits = TOY_SITES.bits
    assert states.shape == (TOY_SITES.states,) and states.sum() == pytest.approx(timeline.cycles)
    assert states[bits["alu"]] > 0 and states[bits["idle_compute"]] > 0 and states[bits["net"]] > 0
    assert states[bits["setup"]] > 0 and states[bits["copying"] | bits["local"]] > 0
    totals = op_totals(program, timeline)
    busy = totals_busy_cycles(totals, spec)
    assert busy[TOY_SITES.unit("alu")] == 1000 and busy[TOY_SITES.unit("wire")] == 400  # 40,000 B at 100
    assert busy[TOY_SITES.unit("copier")] == pytest.approx(384_000 / 256)
    trace = trace_events([TraceRun("step", program, timeline, 0.0)], spec)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"
    }
    assert {names[(1, 2)], names[(1, 3)], names[(1, 4)], names[(1, 7)]} == {"compute", "net", "dma engine 0",
                                                                             "dma engine 3"}  # fmt: skip
    assert trace["metadata"]["dma_engines"] == 4


def test_a_second_targets_roofline_comes_from_the_roofs_every_spec_declares(toy: Target) -> None:
    spec = load_hardware("toy", target=toy)
    roof = Roofline.of(spec, "bf16", "i8")
    assert (roof.flops_per_s, roof.hbm_bytes_per_s, roof.link_bytes_per_s) == (2 * 64e9, 256e9, 100e9)
    assert roof.terms(2 * 64e9, 512e9, 0.0) == (1.0, 2.0, 0.0)


# The modules that must work for any target: they may read a program's Sites, never RNGD's.
GENERIC = (
    "program", "engine", "reference_engine", "timeline", "trace", "dma_shares", "dma_layout", "occupancy",
    "occupancy_kernels", "utilisation", "busy_time", "plots", "report", "step_totals", "program_text",
    "spec", "target",
)  # fmt: skip


@pytest.mark.parametrize("module", GENERIC)
def test_generic_modules_name_no_rngd_unit_context_or_activity(module: str) -> None:
    tree = ast.parse((Path(__file__).parents[1] / "simulator" / f"{module}.py").read_text())
    rngd = set(RNGD_SITES.unit_names) | set(RNGD_SITES.context_names) | set(RNGD_SITES.activity_names)
    labels = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}  # output field names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("simulator.targets"), node.module
            assert node.module != "simulator.hardware", "the loader picks a target; generic code takes a Spec"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in labels:
            assert node.value not in rngd, (module, node.value)
