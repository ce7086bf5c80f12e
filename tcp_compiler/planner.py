"""A deployment plan (`tcpc plan MODEL --chips N`): every tp x pp x dp layout of N chips, those
whose weights and longest request fit pruned by the capacity accounting `tcpc simulate` refuses a
run with (tcp_compiler.generation.fit), each survivor's highest Poisson rate under the SLOs found
by tcp_compiler.serve.max_rate, ranked by goodput per card.

A first planner: the layout alone is searched (the server's options are `tcpc serve`'s
defaults), and the candidates run one after another in this process.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.errors import SimulatorError
from simulator.spec import Spec
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.generation.fit import Asked
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve.max_rate import Found, Slo, at_rate, max_rate
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve, serving_costs
from tcp_compiler.serve.workload import Workload


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp


def layouts(chips: int) -> list[Layout]:
    """Every tp x pp x dp = chips, by tp then pp."""
    return [Layout(tp, pp, chips // (tp * pp)) for tp in range(1, chips + 1) if chips % tp == 0
            for pp in range(1, chips // tp + 1) if (chips // tp) % pp == 0]  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    found: Found | None  # None: pruned or no rate meets the SLOs (`why`)
    goodput_per_card: float  # requests/s meeting the SLOs at the found rate, per chip
    why: str = ""


def fits(config: ModelConfig, hw: Spec, precision: Precision, layout: Layout, work: Workload) -> bool:
    """Whether one sequence of the workload's longest prompt and output fits a replica (weights,
    activations and its KV cache on each chip of the fullest stage)."""
    requests = work.drawn()
    prompt = max(r.prompt_len for r in requests)
    final = max(r.prompt_len + r.output_len for r in requests)
    return Asked(config, hw, precision, 1, prompt, final, layout.tp, layout.pp).fits()


def plan(config: ModelConfig, hw: Spec, precision: Precision, chips: int, work: Workload, slo: Slo,
         options: ServeOptions = ServeOptions()) -> list[Candidate]:  # fmt: skip
    """Every layout of `chips`, ranked: those meeting the SLOs by goodput per card (best first),
    then those that do not, then those pruned. `work` gives the requests each search serves."""
    rows = []
    for layout in layouts(chips):
        if not fits(config, hw, precision, layout, work):
            rows.append(Candidate(layout, None, 0.0, "does not fit"))
            continue
        rows.append(_searched(config, hw.with_chips(layout.tp * layout.pp), precision, layout, work, slo,
                              dataclasses.replace(options, dp=layout.dp)))  # fmt: skip
    return sorted(rows, key=lambda c: (c.found is None, -c.goodput_per_card))


def _searched(config: ModelConfig, hw: Spec, precision: Precision, layout: Layout, work: Workload, slo: Slo,
              options: ServeOptions) -> Candidate:  # fmt: skip
    compile_options = CompileOptions(chips=layout.tp)
    try:
        costs = serving_costs(config, hw, precision, compile_options, options, layout.pp)
        found = max_rate(lambda rate: serve(config, hw, precision, at_rate(work, rate), options,
                                            compile_options, costs, layout.pp), slo)  # fmt: skip
    except (TcpcError, SimulatorError) as e:
        return Candidate(layout, None, 0.0, str(e).removeprefix("--max-rate: "))
    report = serve_report(found.best.result, slo.ttft_s, slo.tpot_s)
    return Candidate(layout, found, report.goodput.requests_per_s / layout.chips)
