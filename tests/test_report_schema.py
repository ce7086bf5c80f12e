"""docs/report-schema.md is generated from the reports' types (simulate's and serve's); it must be
current, name every key a real report's JSON has, and each report must hold the types it declares."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.records import Record
from tcp_compiler.report.build import build_report
from tcp_compiler.report.schema import render_schema
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.report.serve_types import ServeReport, ServeRun
from tcp_compiler.report.types import Report
from tcp_compiler.serve import ServeOptions, serve, synthetic
from tcp_compiler.serve.workload import lengths
from tcp_compiler.simulate import simulate_generation

DOC = Path(__file__).parents[1] / "docs" / "report-schema.md"


def _report(gen_len: int) -> Report:
    """One layer on two chips with a prompt long enough for online softmax: every optional key."""
    config = load_model("llama-3.2-1b").config
    config = dataclasses.replace(config, layers=config.layers[:1])
    sim = simulate_generation(config, load_hardware("rngd-2"), PRECISIONS["bf16"], 1, 4096, gen_len)
    return build_report(sim, top=3)


@pytest.fixture(scope="module", params=[1, 3], ids=["prefill only", "with decode"])
def report(request) -> Report:
    return _report(request.param)


def test_schema_doc_is_current() -> None:
    expected = render_schema()
    assert DOC.read_text() == expected, "run: python -m tcp_compiler.report.schema > docs/report-schema.md"


def _documented(text: str) -> set[str]:
    """Key paths the doc names: each section heading's paths joined with its table's keys."""
    paths, documented = [""], set()
    for line in text.splitlines():
        if line.startswith("## "):
            paths = re.findall(r"`([^`]+)`", line) or [""]
        elif key := re.match(r"\| `(\w+)` \|", line):
            documented |= {f"{p}.{key[1]}".lstrip(".") for p in paths}
    return documented


def _key_paths(value: Any, path: str = "") -> set[str]:
    if isinstance(value, dict):
        keys = [f"{path}.{k}".lstrip(".") for k in value]
        return set(keys).union(*(_key_paths(v, key) for key, v in zip(keys, value.values(), strict=True)))
    if isinstance(value, list):
        return set().union(*(_key_paths(v, f"{path}[]") for v in value))
    return set()


def test_every_json_key_is_documented(report: Report) -> None:
    keys = _key_paths(report.to_dict())
    assert {"attention.prefill[].block", "units.prefill[].unit"} <= keys  # the walk reached the lists
    assert keys <= _documented(DOC.read_text())


def _check(value: Any, hint: Any, name: str) -> None:
    """`value` is of type `hint` (None only where the field allows it), recursively."""
    args = get_args(hint)
    if type(None) in args:
        if value is None:
            return
        (hint,) = [a for a in args if a is not type(None)]
        args = get_args(hint)
    if get_origin(hint) is tuple:
        assert type(value) is tuple, name
        for item in value:
            _check(item, args[0], name)
    elif get_origin(hint) is Literal:
        assert value in args, (name, value)
    else:
        assert type(value) is hint, (name, type(value), hint)
        if isinstance(value, Record):
            hints = get_type_hints(hint)
            for f in dataclasses.fields(value):
                _check(getattr(value, f.name), hints[f.name], f"{name}.{f.name}")


def test_report_holds_its_declared_types_and_is_plain_json(report: Report) -> None:
    _check(report, Report, "report")
    as_dict = report.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict


def _reachable(hint: Any, seen: dict[type, None]) -> dict[type, None]:
    """Every dataclass a type hint names, and those their fields name, however nested (optional,
    tuple, dict, union): found here independently of the generator's own walk."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type) and hint not in seen:
        seen[hint] = None
        for f in dataclasses.fields(hint):
            _reachable(get_type_hints(hint)[f.name], seen)
    for arg in get_args(hint):
        _reachable(arg, seen)
    return seen


def _sections(text: str) -> dict[tuple[int, str], str]:
    """The doc's sections by position and heading (both reports have an `energy`), each the text up
    to the next heading."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {(i, part.split("\n", 1)[0]): part for i, part in enumerate(parts)}


def test_every_type_reachable_from_the_report_has_its_section() -> None:
    """A type the report can hold but the doc leaves out fails here (issue 16: five were omitted)."""
    types = _reachable(Report, {})
    assert {"Limiter", "LimiterPart", "OpRoleRow", "OpRoles", "Memory"} <= {t.__name__ for t in types}
    sections = _sections(DOC.read_text())
    for cls in types:
        doc = " ".join((cls.__doc__ or "").split())
        owners = [body for body in sections.values() if doc in body]
        assert owners, f"{cls.__name__} has no section in docs/report-schema.md"
        keys = set(re.findall(r"^\| `(\w+)` \|", owners[0], flags=re.M))
        assert keys == {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_the_family_key_names_every_supported_family() -> None:
    from tcp_compiler.frontend.families import FAMILIES

    family = next(line for line in DOC.read_text().splitlines() if line.startswith("| `family` |"))
    assert all(f"`{name}`" in family for name in FAMILIES)
    assert {"gpt2", "opt", "bloom", "gpt_neox", "falcon"} <= set(FAMILIES)


def test_decode_keys_of_shared_types_are_documented(report: Report) -> None:
    """A type met at two paths (the limiter of both phases) documents the types inside it at both."""
    documented = _documented(DOC.read_text())
    if report.decode.steps:
        assert "decode.limiter.parts[].cause" in _key_paths(report.to_dict())
    assert {"prefill.limiter.parts[].cause", "decode.limiter.parts[].cause"} <= documented


@pytest.fixture(scope="module")
def serving() -> ServeReport:
    """A short serving run with its options, as `tcpc serve --json` writes it."""
    config = load_model("llama-3.2-1b").config
    config = dataclasses.replace(config, layers=config.layers[:1])
    requests = synthetic(4, lengths("uniform:16:64"), lengths("uniform:2:8"), None, True, 0)
    options = ServeOptions(concurrency=2)
    result = serve(config, load_hardware("rngd"), PRECISIONS["bf16"], requests, options)
    run = ServeRun(
        model=config.name, hardware="rngd", chips=1, pp=1, dtype="bf16", kv_dtype="bf16", scheduler="chunked",
        max_batch_tokens=2048, max_seqs=256, attention="paged", arrivals="closed loop", rate_per_s=None,
        concurrency=2, trace_file=None, prompt_len="uniform:16:64", gen_len="uniform:2:8", seed=0,
    )  # fmt: skip
    return serve_report(result, slo_ttft=1.0, run=run)


def test_every_serve_json_key_is_documented_and_nulls_are_written(serving: ServeReport) -> None:
    as_dict = serving.to_dict()
    keys = _key_paths(as_dict)
    assert {"requests[].finish_s", "per_iteration.cycles", "cost_cache.buckets.kv"} <= keys
    assert keys <= _documented(DOC.read_text().split("# `tcpc serve --json`")[1])
    assert as_dict["run"]["rate_per_s"] is None  # written as null, not left out
    assert as_dict["goodput"]["slo_tpot_s"] is None


def test_serve_report_holds_its_declared_types_and_is_plain_json(serving: ServeReport) -> None:
    _check(serving, ServeReport, "report")
    as_dict = serving.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict


def test_every_type_reachable_from_the_serve_report_has_its_section() -> None:
    types = _reachable(ServeReport, {})
    assert {"ServeRun", "Percentiles", "Iterations", "CostGrids"} <= {t.__name__ for t in types}
    sections = _sections(DOC.read_text())
    for cls in types:
        doc = " ".join((cls.__doc__ or "").split())
        assert any(doc in body for body in sections.values()), f"{cls.__name__} has no section"
