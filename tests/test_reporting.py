"""The report's op roles, per-layer tables and `--top`: one row per op across layers, every op in
the JSON, every layer in the Markdown, identical layers collapsed on the terminal (issue 16)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from simulator.hardware import load_hardware
from simulator.targets.rngd.sites import SITES
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.build import build_report
from tcp_compiler.report.markdown import render_markdown
from tcp_compiler.report.terminal import LAYER_ROWS, print_report
from tcp_compiler.report.text import layer_groups, ranges
from tcp_compiler.report.types import LayerRow, Report
from tcp_compiler.simulate import Simulation, simulate_generation

MODEL = ["simulate", "llama-3.2-1b", "--prompt-len", "64", "--gen-len", "3"]


@pytest.fixture(scope="module")
def sim() -> Simulation:
    config = load_model("llama-3.2-1b").config
    return simulate_generation(config, load_hardware("rngd"), PRECISIONS["bf16"], 1, 64, 3)


@pytest.fixture(scope="module")
def report(sim: Simulation) -> Report:
    return build_report(sim)


def _terminal(report: Report, top: int = 10, width: int = 100) -> str:
    out = io.StringIO()
    print_report(report, SITES, Console(file=out, width=width, color_system=None), top)
    return out.getvalue()


def test_json_ops_hold_every_op_and_roles_account_for_each_once(sim: Simulation, report: Report) -> None:
    assert len(report.ops.prefill) == len(sim.prefill_ops.names)
    assert len(report.ops.decode) == len(sim.decode_ops.names)
    for phase, roles in report.op_roles.items():
        ops = dict(report.ops.items())[phase]
        assert sum(r.count for r in roles) == len(ops)
        assert sum(r.seconds for r in roles) == pytest.approx(sum(o.seconds for o in ops))
        assert sum(r.flops for r in roles) == pytest.approx(sum(o.flops for o in ops))
        assert [r.seconds for r in roles] == sorted((r.seconds for r in roles), reverse=True)
    down = next(r for r in report.op_roles.prefill if r.role == "down")
    layers = len(load_model("llama-3.2-1b").config.layers)
    assert down.count == down.layers == layers
    instances = [o for o in report.ops.prefill if o.name == f"l{o.layer}.down"]
    assert down.seconds_per_layer == pytest.approx(sum(o.seconds for o in instances) / layers)
    assert down.share == pytest.approx(down.seconds / report.prefill.seconds)


def test_terminal_lists_roles_not_the_same_op_per_layer(report: Report) -> None:
    text = _terminal(report)
    assert "l0.down" not in text and "l1.down" not in text
    rows = [line.split() for line in text.splitlines()]
    down = [row for row in rows if row and row[0] == "down"]
    assert len(down) == 2, "one row per phase"
    assert all(row[1] == "16" for row in down)
    roles = len(report.op_roles.prefill)
    assert f"top op roles, prefill: 10 of {roles}" in text
    assert f"... {roles - 10} more op roles" in text


@pytest.mark.parametrize(("top", "shown"), [("3", 3), ("0", None), ("all", None)])
def test_top_sets_how_many_roles_are_shown(top: str, shown: int | None, tmp_path: Path, capsys) -> None:
    md = tmp_path / "r.md"
    assert main([*MODEL, "--top", top, "--json", str(tmp_path / "r.json"), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    roles = len(report["op_roles"]["prefill"])
    count = shown or roles
    assert f"top op roles, prefill: {count} of {roles}" in out
    assert ("more op roles" in out) == (shown is not None)
    section = md.read_text().split("## Top op roles, prefill")[1].split("##")[0]
    assert sum(line.startswith("| ") for line in section.splitlines()) == count + 1  # + header
    assert len(report["ops"]["prefill"]) > roles  # the JSON has every op whatever --top says


@pytest.mark.parametrize("top", ["-1", "x"])
def test_top_refuses_what_is_not_a_count(top: str, capsys) -> None:
    try:
        code = main([*MODEL, "--top", top])
    except SystemExit as stop:
        code = stop.code
    assert code == 2 and "argument --top" in capsys.readouterr().err


def test_markdown_has_a_row_per_layer_and_the_roles(report: Report) -> None:
    md = render_markdown(report, SITES)
    layers = len(load_model("llama-3.2-1b").config.layers)
    for phase in ("prefill", "decode"):
        section = md.split(f"## Layers, {phase}")[1].split("##")[0]
        labels = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")][1:]
        assert labels == [str(i) for i in range(layers)] + ["other"] or labels == ["other"] + [
            str(i) for i in range(layers)
        ]
    assert "| plain |" in md.split("## Layers, prefill")[1].split("##")[0]  # the attention form
    assert "## Top op roles, prefill" in md and "| down | 16 |" in md


def test_layer_rows_name_their_attention_form(report: Report) -> None:
    forms = {row.layer: row.attention for row in report.layers.prefill}
    assert forms.pop(-1) is None and set(forms.values()) == {"plain"}
    assert all(row.attention is None for row in report.layers.decode)


def test_terminal_collapses_identical_layers(report: Report) -> None:
    text = _terminal(report)
    for phase in ("prefill", "decode (per step)"):
        table = text.split(f"layers, {phase}: figures per layer")[1].split("n layers with identical")[0]
        rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
        assert len(rows) < 6, rows  # 16 layers + the others in a few rows
        assert sum(int(row[1]) for row in rows) == len(report.layers.prefill)


def _row(layer: int, seconds: float) -> LayerRow:
    return LayerRow(
        layer=layer, seconds=seconds, tensor_unit_seconds=seconds, flops=1e9, hbm_bytes=1e6, intensity=1e3,
        hbm_intensity=1e3, roofline_seconds=seconds / 2, bound="memory", joules=1.0,
    )  # fmt: skip


def test_layer_groups_gather_interleaved_layers_and_keep_the_others_last() -> None:
    """Gemma-like: every sixth layer is global (slower); the locals form one group however they sit."""
    rows = [_row(i, 2e-3 if i % 6 == 5 else 1e-3) for i in range(12)] + [_row(-1, 5e-4)]
    groups = layer_groups(rows, 20e-3)
    assert [g.label for g in groups] == ["0-4,6-10", "5,11", "other"]
    assert [len(g.layers) for g in groups] == [10, 2, 1]
    assert ranges([0, 1, 2, 3, 5, 7, 8]) == "0-3,5,7-8"


def test_terminal_caps_the_layer_rows_and_says_where_the_rest_is(report: Report) -> None:
    """Layers that all differ (as an 80-layer model's might) stop at LAYER_ROWS rows plus a line."""
    layers = tuple(_row(i, (1 + i) * 1e-4) for i in range(30))
    varied = dataclasses.replace(report, layers=dataclasses.replace(report.layers, prefill=layers))
    text = _terminal(varied)
    table = text.split("layers, prefill: figures per layer")[1].split("n layers with identical")[0]
    assert len([line for line in table.splitlines()[3:] if line.strip()]) == LAYER_ROWS
    assert f"... {30 - LAYER_ROWS} more rows ({30 - LAYER_ROWS} layers): every layer is in --markdown" in text


def test_roles_of_online_softmax_tiles_are_one_role(tmp_path: Path) -> None:
    """A 4096-token prompt runs attention as online softmax: its tiles group into roles with `*`."""
    config = load_model("llama-3.2-1b").config
    config = dataclasses.replace(config, layers=config.layers[:2])
    sim = simulate_generation(config, load_hardware("rngd"), PRECISIONS["bf16"], 1, 4096, 1)
    report = build_report(sim)
    roles = {r.role: r for r in report.op_roles.prefill}
    scores = roles["attn.Sq*.blk*.scores"]
    assert scores.layers == 2 and scores.count > 2 * 8
    assert not any(re.search(r"\.(Sq|Sk|blk)\d", role) for role in roles)
    assert {row.attention for row in report.layers.prefill if row.layer >= 0} == {"online"}


@pytest.mark.parametrize("width", [80, 100])
def test_terminal_fits_80_and_100_columns_with_every_cell_whole(report: Report, width: int) -> None:
    """No header or value is cut (issue 30): wide tables stack, long names wrap."""
    from tcp_compiler.report.text import LAYER_COLUMNS, ROLE_COLUMNS

    text = _terminal(report, width=width)
    lines = [line.rstrip() for line in text.splitlines()]
    assert max(len(line) for line in lines) <= width and "…" not in text
    units = ("busy cycles prefill", "util prefill", "busy cycles decode", "util decode")
    for header in {"phase", "x roof", "x model", "layers", "unit", *units, *LAYER_COLUMNS, *ROLE_COLUMNS}:
        assert any(re.search(rf"(^|\s){re.escape(header)}(\s|$)", line) for line in lines), header
    for role in report.op_roles.prefill[:10]:
        cells = [role.role, str(role.count)]
        assert any(line.split()[:2] == cells for line in lines if line.split()), role.role
