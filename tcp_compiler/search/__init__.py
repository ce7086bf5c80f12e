"""`tcpc search`: a seeded multi-objective search (Optuna) over spec value ranges for the designs
on the Pareto front of report figures (tokens/s per chip against area, ...), under constraints.

space.py: the ranges and fixed settings (`--range TABLE.KEY=LO:HI[:log]`, `--set TABLE.KEY=V`),
checked against the spec's declarations; goals.py: objectives and constraints, named by report
figures; trials.py: one design point costed (picklable, so trials run on the sweep's executors);
study.py: the Optuna study in its folder (SQLite), resumed and shared; front.py: the Pareto front.
"""
