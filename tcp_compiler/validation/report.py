"""The validation report's types (`tcpc validate --json`): measured runs against their replays
through the serving simulation, figure by figure, and a summary over the runs. Figures are
defined as vLLM's serving benchmark defines them (tcp_compiler.validation.metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tcp_compiler.records import Record, doc


@dataclass(frozen=True, kw_only=True)
class FigureRow(Record):
    """One figure of one run, measured and simulated."""

    nulls: ClassVar[bool] = True

    figure: str = doc("`ttft_p50_s`, ..., `itl_p99_s`, `output_tokens_per_s`, `total_tokens_per_s`")
    measured: float | None = doc("the run's figure; null where its file does not give it")
    simulated: float | None = doc("the replay's figure")
    ratio: float | None = doc("simulated / measured; null where either is missing or measured is 0", "x")


@dataclass(frozen=True, kw_only=True)
class ValidatedRun(Record):
    """One measured run and its replay."""

    nulls: ClassVar[bool] = True

    source: str = doc("the measured file")
    load: str = doc("how its requests arrived: `concurrency C`, `rate R/s`, `all at once` or `trace`")
    concurrency: int | None = doc("closed-loop clients; null otherwise", "clients")
    rate_per_s: float | None = doc("Poisson request rate; null otherwise", "requests/s")
    requests: int = doc("requests replayed", "requests")
    notes: tuple[str, ...] = doc("what was assumed reading the file")
    figures: tuple[FigureRow, ...] = doc("every figure")
    measured_power_w: float | None = doc("measured average power per card; null when not measured", "W")
    simulated_power_w: float = doc("the replay's average power per chip", "W")
    preemptions: int = doc("preemptions in the replay")


@dataclass(frozen=True, kw_only=True)
class SummaryRow(Record):
    """One figure over every run that has it."""

    nulls: ClassVar[bool] = True

    figure: str = doc("the figure, as in `figures`")
    runs: int = doc("runs with both a measured and a simulated value")
    geomean_ratio: float | None = doc("geometric mean of simulated / measured", "x")
    min_ratio: float | None = doc("smallest simulated / measured", "x")
    max_ratio: float | None = doc("largest simulated / measured", "x")


@dataclass(frozen=True, kw_only=True)
class ValidationReport(Record):
    """`tcpc validate --json`: measured runs replayed through the serving simulation."""

    model: str = doc("model name")
    hardware: str = doc("spec name")
    chips: int = doc("chips in all: tensor-parallel chips x pipeline stages")
    dtype: str = doc("precision mode (`--dtype`)")
    kv_dtype: str = doc("the KV cache's dtype")
    scheduler: str = doc("batching policy (`--scheduler`)")
    runs: tuple[ValidatedRun, ...] = doc("every run, in concurrency or rate order")
    summary: tuple[SummaryRow, ...] = doc("every figure over the runs")
