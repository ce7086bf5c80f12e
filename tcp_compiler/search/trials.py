"""One design point of a search: a workload on a spec with some values set, costed into report
figures. Top-level and picklable, so trials run on the executors sweeps use; the worker's caches
(the spec-free lowering, recipes) serve every trial it runs."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, dataclass
from functools import cache

from ir.errors import TirError
from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from simulator.spec import Spec
from tcp_compiler import __version__
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.search.goals import report_figures
from tcp_compiler.simulate import simulate_generation

Settings = tuple[tuple[str, int | float], ...]


@dataclass(frozen=True)
class Workload:
    """What every trial simulates (`tcpc simulate`'s options)."""

    model: str
    hw: str
    batch: int
    prompt_len: int
    gen_len: int
    dtype: str
    chips: int | None = None


@dataclass(frozen=True)
class DesignPoint:
    workload: Workload
    settings: Settings  # the fixed settings, then the trial's sampled values, by address

    def spec(self) -> Spec:
        return _base(self.workload.hw, self.workload.chips).with_values(dict(self.settings))

    def hash(self) -> str:
        """Its identity: model config, the spec's values as set (not their sources), the workload
        and tcpc's version."""
        digest = hashlib.sha256(load_model(self.workload.model).source.read_bytes())
        spec = self.spec()
        digest.update(json.dumps({k: spec.value(k) for k in spec.leaf_keys()}, sort_keys=True).encode())
        digest.update(json.dumps([asdict(self.workload), __version__], sort_keys=True).encode())
        return digest.hexdigest()[:16]

    def command(self) -> str:
        """The `tcpc simulate` command that reproduces this point."""
        w = self.workload
        args = ["tcpc", "simulate", w.model, "--hw", w.hw, "--batch", str(w.batch), "--prompt-len",
                str(w.prompt_len), "--gen-len", str(w.gen_len), "--dtype", w.dtype]  # fmt: skip
        if w.chips:
            args += ["--chips", str(w.chips)]
        for address, value in self.settings:
            args += ["--set", f"{address}={value!r}"]  # exact: the point's hash depends on it
        return shlex.join(args)


@cache
def _base(hw: str, chips: int | None) -> Spec:
    return load_hardware(hw, chips)


def cost(point: DesignPoint) -> dict:
    """{"figures": ...} of one point, or {"error": ...} for what a user's choice can cause (a spec
    whose values contradict each other, a model that does not fit)."""
    try:
        hw = point.spec()
        w = point.workload
        sim = simulate_generation(load_model(w.model).config, hw, precision(w.dtype), w.batch, w.prompt_len,
                                  w.gen_len, w.chips)  # fmt: skip
        figures = report_figures(build_report(sim, top=1).to_dict())
    except (TirError, TcpcError, SimulatorError) as e:
        return {"error": str(e)}
    return {"figures": figures}
