"""The Optuna study of a search, kept in its folder (SQLite through Optuna's RDB storage): run again
with the same definition, a search resumes where it stopped; several workers pointed at the same
folder share its trials. Trials are asked a generation at a time and costed on the sweep
executor, so one generation runs in parallel; NSGA-II (seeded) picks the next from the results."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tcp_compiler.errors import OptionError, SearchError
from tcp_compiler.executors import Executor, local_executor
from tcp_compiler.search.goals import Constraint, Objective, check_figures
from tcp_compiler.search.space import Range
from tcp_compiler.search.trials import DesignPoint, Settings, Workload, cost

STORAGE_FILE = "search.db"


@dataclass(frozen=True)
class Search:
    """What a search looks for; its definition names its study, so a folder resumes only itself."""

    workload: Workload
    ranges: tuple[Range, ...]
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...] = ()
    settings: Settings = ()
    seed: int = 0
    population: int = 8  # trials per generation, costed together

    def definition(self) -> dict:
        return {
            "workload": asdict(self.workload),
            "ranges": [asdict(r) for r in self.ranges],
            "objectives": [o.text for o in self.objectives],
            "constraints": [c.text for c in self.constraints],
            "settings": [list(s) for s in self.settings],
            "seed": self.seed,
            "population": self.population,
        }

    @property
    def name(self) -> str:
        text = json.dumps(self.definition(), sort_keys=True)
        return "tcpc-search-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def point(self, params: dict[str, float]) -> DesignPoint:
        sampled = tuple((r.address, params[r.address]) for r in self.ranges)
        return DesignPoint(self.workload, self.settings + sampled)


@dataclass
class Outcome:
    """What a search run did: the study (every trial so far) and the trials this run added."""

    study: object  # optuna.Study
    added: int = 0
    failed: list[str] = field(default_factory=list)  # errors of this run's failed trials


def open_study(search: Search, folder: Path):
    """The search's study in `folder` (created, or loaded to resume), its sampler seeded by the
    search's seed and the trials already there, so a resumed search does not redraw its start."""
    try:
        import optuna
    except ImportError:
        raise SearchError("tcpc search needs Optuna: pip install -e '.[search]'") from None

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(f"sqlite:///{folder / STORAGE_FILE}")
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    others = [n for n in names if n != search.name]
    if others:
        raise OptionError("{dir} {folder}: it holds another search ({other}); give this one its own",
                          folder=folder, other=others[0])
    existing = len(optuna.load_study(study_name=search.name, storage=storage).trials) if names else 0
    sampler = optuna.samplers.NSGAIISampler(population_size=search.population, seed=search.seed + existing)
    study = optuna.create_study(study_name=search.name, storage=storage, sampler=sampler, load_if_exists=True,
                                directions=[_DIRECTION[o.direction] for o in search.objectives])  # fmt: skip
    study.set_user_attr("definition", search.definition())
    return study


_DIRECTION = {"max": "maximize", "min": "minimize"}


def finished(study) -> int:
    from optuna.trial import TrialState

    return sum(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in study.trials)


def run_search(search: Search, folder: Path, trials: int, jobs: int,
               progress: Callable[[int, int], None] | None = None,
               executor: Executor = local_executor) -> Outcome:  # fmt: skip
    """Trials until the study has `trials` finished ones (those of earlier runs count), each
    generation's trials costed on `executor` (as a sweep's points are); a trial whose run raised
    (a bug, a worker that died) fails with that error."""
    import optuna

    study = open_study(search, folder)
    outcome = Outcome(study)
    distributions = {r.address: _distribution(r) for r in search.ranges}
    while (done := finished(study)) < trials:
        asked = [study.ask(distributions) for _ in range(min(search.population, trials - done))]
        points = [search.point(t.params) for t in asked]
        for trial, point, result in zip(asked, points, _costed(points, jobs, executor), strict=True):
            trial.set_user_attr("hash", point.hash())
            trial.set_user_attr("command", point.command())
            if "error" in result:
                trial.set_user_attr("error", result["error"])
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                outcome.failed.append(result["error"])
                continue
            figures = result["figures"]
            names = [o.figure for o in search.objectives]
            check_figures(names, figures, "--objective")
            check_figures([c.figure for c in search.constraints], figures, "--constraint")
            trial.set_user_attr(
                "figures", {n: figures[n] for n in (*names, *(c.figure for c in search.constraints))}
            )
            violations = [c.violation(figures) for c in search.constraints]
            trial.set_user_attr("constraints", violations)
            for c, v in zip(search.constraints, violations, strict=True):
                trial.set_constraint(c.text, v)
            study.tell(trial, [figures[n] for n in names])
        outcome.added += len(asked)
        if progress is not None:
            progress(finished(study), trials)
    return outcome


def _costed(points: list[DesignPoint], jobs: int, executor: Executor) -> list[dict]:
    """Each point's `cost`, in the points' order, whatever order the executor finishes them in."""
    results: list[dict] = [{}] * len(points)
    for index, outcome in executor(points, jobs, cost):
        crashed = {"error": f"{type(outcome).__name__}: {outcome}"}
        results[index] = outcome if isinstance(outcome, dict) else crashed
    return results


def _distribution(r: Range):
    from optuna.distributions import FloatDistribution, IntDistribution

    if r.integer:
        return IntDistribution(int(r.lo), int(r.hi), log=r.log)
    return FloatDistribution(r.lo, r.hi, log=r.log)
