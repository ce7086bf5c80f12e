"""The Pareto front of a search: its feasible trials that no other feasible trial dominates (at
least as good in every objective, better in one), as rows and as a plot of two objectives."""

from __future__ import annotations

from pathlib import Path

from tcp_compiler.search.study import Search


def feasible(study) -> list:
    """Completed trials within every constraint."""
    from optuna.trial import TrialState

    return [
        t for t in study.trials
        if t.state == TrialState.COMPLETE and all(v <= 0 for v in t.user_attrs.get("constraints", []))
    ]  # fmt: skip


def dominates(a: tuple[float, ...], b: tuple[float, ...], signs: tuple[int, ...]) -> bool:
    """Whether objective values `a` dominate `b`; signs: +1 to maximise, -1 to minimise."""
    better_or_equal = all(s * x >= s * y for x, y, s in zip(a, b, signs, strict=True))
    return better_or_equal and any(s * x > s * y for x, y, s in zip(a, b, signs, strict=True))


def pareto_front(search: Search, trials: list) -> list:
    """The non-dominated trials among `trials`, by their first objective (best first)."""
    signs = tuple(1 if o.direction == "max" else -1 for o in search.objectives)
    values = {t.number: tuple(t.values) for t in trials}
    front = [
        t for t in trials if not any(dominates(values[o.number], values[t.number], signs) for o in trials)
    ]
    unique = {values[t.number]: t for t in sorted(front, key=lambda t: t.number, reverse=True)}
    return sorted(unique.values(), key=lambda t: -signs[0] * t.values[0])


def front_rows(search: Search, front: list) -> list[dict]:
    """One row per front point: trial, hash, the searched values, the objectives, the command."""
    rows = []
    for t in front:
        row = {"trial": t.number, "hash": t.user_attrs["hash"]}
        row.update({r.address: t.params[r.address] for r in search.ranges})
        row.update({o.figure: v for o, v in zip(search.objectives, t.values, strict=True)})
        row["command"] = t.user_attrs["command"]
        rows.append(row)
    return rows


def plot_front(search: Search, study, path: Path) -> None:
    """Every trial on the first two objectives (infeasible ones marked), the front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.trial import TrialState

    x, y = search.objectives[0], search.objectives[1]
    ok = feasible(study)
    out = [t for t in study.trials if t.state == TrialState.COMPLETE and t not in ok]
    front = sorted(pareto_front(search, ok), key=lambda t: t.values[0])
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    if out:
        ax.scatter([t.values[0] for t in out], [t.values[1] for t in out], marker="x", color="#d62728",
                   alpha=0.5, label="outside a constraint")  # fmt: skip
    ax.scatter(
        [t.values[0] for t in ok], [t.values[1] for t in ok], color="#7f7f7f", alpha=0.6, label="trials"
    )
    ax.plot(
        [t.values[0] for t in front],
        [t.values[1] for t in front],
        "o-",
        color="#1f77b4",
        label="Pareto front",
    )
    ax.set_xlabel(f"{x.figure} ({x.direction})")
    ax.set_ylabel(f"{y.figure} ({y.direction})")
    ax.set_title(f"{search.workload.model} on {search.workload.hw}: {len(study.trials)} trials")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
