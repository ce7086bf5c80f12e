"""A deployment plan (`tcpc plan MODEL --chips N`): every tp x pp x dp layout of N chips or fewer,
crossed with the server's settings (sequences at once, the prefill chunk: tokens per iteration)
and the precisions asked for. Those whose weights, prefill chunk and longest request do not fit a
replica are pruned by the capacity accounting `tcpc simulate` refuses a run with
(tcp_compiler.generation.fit); each survivor's highest Poisson rate under the SLOs is found by
tcp_compiler.serve.max_rate; the candidates are ranked by goodput per card, so fewer cards win
when they serve as much per card.

Compiling a layout's iteration costs takes seconds to a minute; a rate search on costs in hand
takes a fraction of a second. So the candidates sharing a model, layout and precision (tp, pp,
dtype, KV dtype: what the costs depend on; dp, the sequences and the chunk do not change them) run
as one task on one IterationCosts, and the tasks run on a sweep executor (tcp_compiler.executors).
Every candidate's answer depends on its own inputs alone, so the plan is the same whichever
executor runs it and however many workers it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import partial
from itertools import product

from simulator.errors import SimulatorError
from simulator.hardware import load_hardware
from simulator.spec import Spec
from tcp_compiler.errors import TcpcError
from tcp_compiler.executors import Executor, Outcome, local_executor
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import KV_DTYPES, Precision, precision
from tcp_compiler.generation.fit import Asked
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.search.front import dominates
from tcp_compiler.serve.costs import IterationCosts
from tcp_compiler.serve.max_rate import NoRate, Slo, at_rate, max_rate
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import serve, serving_costs
from tcp_compiler.serve.workload import Workload

OK, MISSES, NO_FIT, FAILED = "ok", "misses the SLOs", "does not fit", "failed"
STATUS_ORDER = (OK, MISSES, NO_FIT, FAILED)  # how the ranking lists them


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int

    @property
    def chips(self) -> int:
        return self.tp * self.pp * self.dp


def layouts(chips: int, fewer: bool = False) -> list[Layout]:
    """Every tp x pp x dp = chips (with `fewer`: = 1 .. chips), by chips, then tp, then pp."""
    counts = range(1, chips + 1) if fewer else (chips,)
    return [Layout(tp, pp, n // (tp * pp)) for n in counts for tp in range(1, n + 1) if n % tp == 0
            for pp in range(1, n // tp + 1) if (n // tp) % pp == 0]  # fmt: skip


@dataclass(frozen=True)
class Setting:
    """One candidate: a layout, its precision (the KV dtype spelled: the precision's own when not
    asked) and the server's sequences at once and tokens per iteration (the prefill chunk)."""

    layout: Layout
    dtype: str
    kv_dtype: str
    max_seqs: int
    max_batch_tokens: int

    @property
    def costs_key(self) -> tuple[int, int, str, str]:
        """What the iteration costs depend on (IterationCosts): candidates sharing it share them."""
        return self.layout.tp, self.layout.pp, self.dtype, self.kv_dtype


def kv_name(prec: Precision) -> str:
    """The KV dtype's name as --kv-dtype spells it."""
    return next(k for k, v in KV_DTYPES.items() if v == prec.kv)


@dataclass(frozen=True)
class Space:
    """What a plan enumerates: every combination (settings)."""

    chips: int
    fewer_chips: bool = True  # also layouts of fewer chips than `chips`
    dtypes: tuple[str, ...] = ("bf16",)
    kv_dtypes: tuple[str | None, ...] = (None,)  # None: each precision's own
    max_seqs: tuple[int, ...] = (ServeOptions().max_seqs,)
    max_batch_tokens: tuple[int, ...] = (ServeOptions().max_batch_tokens,)

    def settings(self) -> list[Setting]:
        """Every candidate once (a KV dtype asked for that is the precision's own is not repeated),
        layouts outermost."""
        found: dict[Setting, None] = {}
        for layout, dtype, kv, seqs, tokens in product(layouts(self.chips, self.fewer_chips), self.dtypes,
                                                       self.kv_dtypes, self.max_seqs, self.max_batch_tokens):
            found[Setting(layout, dtype, kv_name(precision(dtype, kv_dtype=kv)), seqs, tokens)] = None
        return list(found)


@dataclass(frozen=True)
class Result:
    """A candidate's answer. With status OK: the highest rate found meeting the SLOs, its latencies
    at the SLO percentile, the bracket's top (the lowest rate found failing) and the goodput and
    output throughput per card of the run at it; otherwise `why`. `requests`: those each probe
    served (Context.for_replicas)."""

    setting: Setting
    status: str
    why: str = ""
    requests: int = 0
    rate_per_s: float = 0.0
    failing_rate_per_s: float = 0.0
    capacity_bound: bool = False
    simulations: int = 0
    ttft_s: float = 0.0
    tpot_s: float = 0.0
    goodput_requests_per_s: float = 0.0
    goodput_per_card: float = 0.0
    output_tokens_per_s_per_card: float = 0.0

    @property
    def margin(self) -> float:
        """How far above the found rate the lowest failing one is, as a fraction of it."""
        return self.failing_rate_per_s / self.rate_per_s - 1 if self.rate_per_s else 0.0

    def row(self) -> dict:
        """The result as a flat dict (the setting's fields first): --json's rows, the plots' input."""
        s = self.setting
        return {**vars(s.layout), "chips": s.layout.chips, "dtype": s.dtype, "kv_dtype": s.kv_dtype,
                "max_seqs": s.max_seqs, "max_batch_tokens": s.max_batch_tokens,
                **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "setting"},
                "margin": self.margin}  # fmt: skip


@dataclass(frozen=True)
class Context:
    """What every candidate of a plan shares: the model and hardware (by name: a task may run in
    another process), the requests each replica's share of a search serves and the SLOs they are
    held to: each candidate is searched under each of `slos` in turn, on the same iteration costs.

    A layout of R data-parallel replicas serves R times the requests (`for_replicas`), so each
    replica sees the load a one-replica run does: replicas share nothing, and a finite run's
    ramp-up and drain would otherwise weigh R times as much on each, making replicas look worse
    per card than the single server they copy."""

    model: str
    hw: str
    work: Workload
    slos: tuple[Slo, ...]

    def for_replicas(self, dp: int) -> tuple[Workload, tuple[Slo, ...]]:
        """The requests and SLOs of a layout of `dp` replicas: the requests and warm-up dp times."""
        work = replace(self.work, requests=self.work.requests * dp)
        return work, tuple(replace(slo, warmup=slo.warmup * dp) for slo in self.slos)


def tasks(settings: list[Setting]) -> list[tuple[Setting, ...]]:
    """The candidates grouped by the iteration costs they share, in their first candidate's order."""
    groups: dict[tuple, list[Setting]] = {}
    for s in settings:
        groups.setdefault(s.costs_key, []).append(s)
    return [tuple(g) for g in groups.values()]


def plan(context: Context, space: Space, jobs: int = 1, executor: Executor = local_executor,
         progress: Callable[[int, int], None] = lambda done, total: None) -> list[list[Result]]:  # fmt: skip
    """Every candidate of `space`, ranked under each of the context's SLOs (a list each): those
    meeting them by goodput per card (best first; ties: fewer chips, then the enumeration's
    order), then the others by status. `progress` hears the tasks done."""
    settings = space.settings()
    groups = tasks(settings)
    found: list[dict[Setting, Result]] = [{} for _ in context.slos]
    for done, (index, outcome) in enumerate(executor(groups, jobs, partial(search_task, context)), 1):
        for k, results in enumerate(_results(groups[index], outcome, len(context.slos))):
            found[k].update(zip(groups[index], results, strict=True))
        progress(done, len(groups))
    order = {s: i for i, s in enumerate(settings)}
    return [sorted(f.values(), key=lambda r: (STATUS_ORDER.index(r.status), -r.goodput_per_card,
                                              r.setting.layout.chips, order[r.setting]))
            for f in found]  # fmt: skip


def _results(group: tuple[Setting, ...], outcome: Outcome, slos: int) -> list[list[Result]]:
    """A task's results per SLO; a task that raised (a bug, a worker that died) fails each."""
    if isinstance(outcome, Exception):
        return [[Result(s, FAILED, f"{type(outcome).__name__}: {outcome}") for s in group]] * slos
    return outcome["results"]


def search_task(context: Context, group: tuple[Setting, ...]) -> dict:
    """One task (a model, layout and precision): each candidate checked for fit, then searched
    under each SLO on iteration costs compiled once for all of them.
    {"results": [[Result per candidate] per SLO]}."""
    config = load_model(context.model).config
    tp, pp, dtype, kv = group[0].costs_key
    hw, ranks = load_hardware(context.hw, tp * pp).ranks(tp)  # cards split into PE ranks: one rank's spec
    prec = precision(dtype, kv_dtype=kv)
    costs: list[IterationCosts] = []  # compiled for the first candidate that fits
    unfit: dict[int, str] = {}  # by tokens per iteration: why it does not fit ("" it does)
    results: list[list[Result]] = [[] for _ in context.slos]
    for s in group:
        if s.max_batch_tokens not in unfit:
            unfit[s.max_batch_tokens] = misfit(config, hw, prec, s, context.work, ranks)
        why = unfit[s.max_batch_tokens]
        work, slos = context.for_replicas(s.layout.dp)
        for slo, found in zip(slos, results, strict=True):
            found.append(Result(s, NO_FIT, why) if why else
                         _highest_rate(config, hw, prec, s, work, slo, costs, ranks))  # fmt: skip
    return {"results": results}


def misfit(config: ModelConfig, hw: Spec, prec: Precision, s: Setting, work: Workload, ranks: int) -> str:
    """Why one sequence of the workload's longest prompt and output does not fit a replica of `s`
    (its stages `ranks` tensor-parallel ranks of `hw` wide) beside the weights and the activations
    of its prefill chunk (at most its tokens per iteration), on each chip of the fullest stage as
    simulate and serve account it; "" when it fits."""
    requests = work.drawn()
    prompt = min(max(r.prompt_len for r in requests), s.max_batch_tokens)
    final = max(r.prompt_len + r.output_len for r in requests)
    try:
        need = Asked(config, hw, prec, 1, prompt, final, ranks, s.layout.pp).need()
    except (TcpcError, SimulatorError) as e:  # a layout that cannot be built (heads that do not split)
        return str(e)
    if need.fits:
        return ""
    return f"needs {need.needed / 1e9:.1f} GB of {need.available / 1e9:.1f} GB HBM per chip"


def serve_options(s: Setting) -> ServeOptions:
    return replace(ServeOptions(), dp=s.layout.dp, max_seqs=s.max_seqs, max_batch_tokens=s.max_batch_tokens)


def _highest_rate(config: ModelConfig, hw: Spec, prec: Precision, s: Setting, work: Workload, slo: Slo,
                  costs: list[IterationCosts], ranks: int) -> Result:  # fmt: skip
    """The candidate's highest rate under `slo`, its stages `ranks` tensor-parallel ranks of `hw`
    wide, on `costs` (one IterationCosts, compiled here when empty: every candidate of a task
    shares it)."""
    options, compile_options, pp = serve_options(s), CompileOptions(chips=ranks), s.layout.pp
    try:
        if not costs:
            costs.append(serving_costs(config, hw, prec, compile_options, options, pp))
        found = max_rate(lambda rate: serve(config, hw, prec, at_rate(work, rate), options,
                                            compile_options, costs[0], pp), slo)  # fmt: skip
    except NoRate as e:
        return Result(s, MISSES, str(e).removeprefix("--max-rate: "))
    except (TcpcError, SimulatorError) as e:  # the KV cache a server keeps beside what `misfit` counts
        return Result(s, NO_FIT, str(e))
    best, chips = found.best, s.layout.chips
    report = serve_report(best.result, slo.ttft_s, slo.tpot_s)
    return Result(s, OK, requests=work.requests, rate_per_s=best.rate, failing_rate_per_s=found.failing_rate,
                  capacity_bound=found.capacity_bound, simulations=found.simulations, ttft_s=best.ttft_s,
                  tpot_s=best.tpot_s, goodput_requests_per_s=report.goodput.requests_per_s,
                  goodput_per_card=report.goodput.requests_per_s / chips,
                  output_tokens_per_s_per_card=report.throughput_output_tokens_per_s / chips)  # fmt: skip


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the (latency, throughput) points no other dominates (search.front.dominates:
    latency minimised, throughput maximised), by latency; of equal points, the first."""
    front = [i for i, p in enumerate(points)
             if not any(dominates(q, p, (-1, 1)) for q in points) and p not in points[:i]]  # fmt: skip
    return sorted(front, key=lambda i: points[i])
