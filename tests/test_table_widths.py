"""Every table tcpc prints fits 80 and 100 columns with no header or value cut (issue 30, point 7):
an elastic column wraps, and columns that do not fit side by side stack below the key columns.
Each test sets the console width itself; none depends on the terminal or on COLUMNS."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tcp_compiler.cli import main
from tcp_compiler.report.tables import line_table

WIDTHS = (80, 100)
ELLIPSIS = "…"


def _render(renderable, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def _whole(text: str, width: int, headers, values=()) -> None:
    lines = [line.rstrip() for line in text.splitlines()]
    assert max(len(line) for line in lines) <= width
    assert ELLIPSIS not in text
    for header in headers:  # each header on one line, whole
        assert any(re.search(rf"(^|\s){re.escape(header)}(\s|$)", line) for line in lines), header
    flowing = " ".join(text.split())  # a wrapped cell's words, in order
    for value in values:
        assert value in flowing, value


@pytest.mark.parametrize("width", WIDTHS)
def test_a_wide_table_stacks_with_its_keys_and_keeps_every_cell(width: int) -> None:
    columns = ("name", *(f"figure number {i}" for i in range(8)))
    rows = [(f"row-{r}", *(f"{r * 1000 + i:,}.5" for i in range(8))) for r in range(3)]
    text = _render(line_table("wide", columns, rows, width), width)
    _whole(text, width, columns, [cell for row in rows for cell in row])
    assert text.count("row-1") >= 2  # the key column repeats in each part


@pytest.mark.parametrize("width", WIDTHS)
def test_the_elastic_column_wraps_instead_of_cutting(width: int) -> None:
    error = "heads do not split over 3 chips (heads must be a multiple of the chips) " * 3
    text = _render(line_table("t", ("chips", "status"), [("3", error)], width, elastic=1), width)
    _whole(text, width, ("chips", "status"))
    assert " ".join(text.split()).count("heads must be a multiple of the chips") == 3


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", [["hw", "show", "rngd-4"], ["hw", "list"],
                                     ["inspect", "examples/ir/llama_decoder_layer.tir"]])  # fmt: skip
def test_hw_and_inspect_tables_fit(width: int, command: list[str], monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(command) == 0
    text = capsys.readouterr().out
    headers = {"hw": ("MAC/lane/cycle", "ridge FLOP/B", "TFLOP/s x 4", "x 4 chips", "source"),
               "inspect": ("share of FLOPs", "value", "type", "written", "FLOP/B")}[command[0]]  # fmt: skip
    if command[1] == "list":
        headers = ("name", "chips", "description")
    _whole(text, width, headers)


@pytest.mark.parametrize("width", WIDTHS)
def test_serve_report_fits(width: int, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    args = ["serve", "llama-3.2-1b", "--requests", "4", "--concurrency", "2", "--prompt-len", "16",
            "--gen-len", "4"]
    assert main(args) == 0
    _whole(capsys.readouterr().out, width, ("latency", "mean", "p50", "p90", "p99", "TTFT", "TPOT", "E2E"))


def test_a_layer_list_wraps_after_its_commas() -> None:
    from tcp_compiler.report.tables import wrap

    assert wrap("1,3,5,7,9,11,13,15,17,19,21,23", 24) == ["1,3,5,7,9,11,13,15,17,", "19,21,23"]
    text = _render(line_table("t", ("layers", "n"), [("1,3,5,7,9,11,13,15,17,19,21,23", "12")], 100,
                              elastic_max=24), 100)  # fmt: skip
    assert "1,3,5,7,9,11,13,15,17,   12" in text and "19,21,23" in text


@pytest.fixture(scope="module")
def sweep_rows() -> dict[str, list[dict]]:
    """Rows of a simulation sweep and of a serving sweep, each with a failed point (3 chips do not
    divide llama-3.2-1b's heads) and a spec value set by address."""
    from tcp_compiler.sweep import grid, run_point
    from tcp_compiler.sweep.serve import ServePoint, run_serve_point

    setting = (("hbm.sustained_bytes_per_cycle", 720),)
    points = grid(["llama-3.2-1b"], ["rngd-4"], [1, 3], [1], [64], [2], ["bf16"],
                  settings=[("hbm.sustained_bytes_per_cycle", [720])])  # fmt: skip
    serve = [ServePoint(model="llama-3.2-1b", hw="rngd-4", chips=c, dtype="bf16", requests=4,
                        prompt_len="uniform:16:64", gen_len="8", rate=16.0, concurrency=None, spec=setting)
             for c in (1, 3)]  # fmt: skip
    return {"simulate": [run_point(p) for p in points], "serve": [run_serve_point(p) for p in serve]}


SWEEP_VALUES = {"simulate": ("hbm.sustained_bytes_per_cycle", "720", "64", "bf16"),
                "serve": ("hbm.sustained_bytes_per_cycle", "uniform:16:64", "16.0", "720")}  # fmt: skip


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", ["simulate", "serve"])
def test_sweep_tables_fit(width: int, kind: str, sweep_rows) -> None:
    from tcp_compiler.cli.sweep_cmd import SERVE_SHOWN, SHOWN, _varying, sweep_table

    rows = sweep_rows[kind]
    assert [r["status"] for r in rows] == ["ok", "failed"]
    shown = _varying(rows, list(rows[0]), SHOWN if kind == "simulate" else SERVE_SHOWN)
    text = _render(sweep_table(rows, shown, width), width)
    headers = [header for column, header, _ in shown if column != "pp"]
    _whole(text, width, [*headers, "status"], [*SWEEP_VALUES[kind], "do not split over 3 chips"])


@pytest.mark.parametrize("width", WIDTHS)
def test_a_sweep_store_shown_fits(width: int, sweep_rows, tmp_path) -> None:
    from tcp_compiler.cli.sweep_cmd import show
    from tcp_compiler.store import Store

    with Store(tmp_path / "s.parquet") as store:
        for row in sweep_rows["simulate"] + sweep_rows["serve"]:
            store.add(row)
    out = io.StringIO()
    assert show(str(tmp_path / "s.parquet"), Console(file=out, width=width, color_system=None)) == 0
    text = out.getvalue()
    _whole(text, width, ("TTFT ms", "tok/s", "req/s", "out tok/s", "TTFT p99 ms", "preempted", "status"),
           [*SWEEP_VALUES["serve"], "4 points, 2 failed"])  # fmt: skip
    assert text.count("sweep: 2 points") == 2  # a table of each kind


def test_role_and_layer_tables_show_times_with_their_units() -> None:
    """Times of a second or more in s, below in ms, as the rest of the report (simulator.numbers
    .duration); no column header states a unit its cells would then contradict."""
    from dataclasses import replace

    from simulator.hardware import load_hardware
    from tcp_compiler.frontend.model import load_model
    from tcp_compiler.frontend.precision import precision
    from tcp_compiler.report.build import build_report
    from tcp_compiler.report.text import LAYER_COLUMNS, ROLE_COLUMNS, layer_cells, role_cells
    from tcp_compiler.simulate import simulate_generation

    config = load_model("llama-3.2-1b").config
    sim = simulate_generation(config, load_hardware("rngd"), precision("bf16"), 1, 16, 2)
    report = build_report(sim, top=1)
    role = replace(report.op_roles.prefill[0], seconds=2.5, seconds_per_layer=0.0004)
    assert role_cells(role)[2:4] == ["2.500 s", "0.400 ms"]
    layer = replace(report.layers.prefill[0], seconds=1.25)
    assert layer_cells(layer, 2.5)[:2] == ["1.250 s", "50.0%"]
    assert not any("ms" in c.split() or c.startswith("ms") for c in (*ROLE_COLUMNS, *LAYER_COLUMNS))
