"""Every integer count field of every bundled family's config.json is bounded before anything is
allocated: set to 10**9, `tcpc compile` refuses it with one line naming the file and the field, or
(a field the family does not read, such as max_window_layers without sliding windows) compiles the
very graph the unchanged config does; all inside a bounded address space (RLIMIT_AS)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tcp_compiler.frontend.model import BUNDLED
from tcp_compiler.frontend.schema import FIELDS

HUGE = 10**9
ADDRESS_SPACE = 6 << 30  # numba and llvmlite reserve address space at import; 10**9 experts need more


def count_fields(data: dict) -> list[str]:
    """Key paths of the integer fields in `data` (text_config's too), whether or not the schema
    lists them, except those the schema takes as any number (rope_theta: 10**9 is a valid base)."""
    found = []
    for key, value in data.items():
        if isinstance(value, dict) and key == "text_config":
            found += [f"{key}.{sub}" for sub in count_fields(value)]
        elif type(value) is int and (key not in FIELDS or FIELDS[key].kind == "int"):
            found.append(key)
    return found


def with_value(data: dict, path: str, value: int) -> dict:
    head, _, rest = path.partition(".")
    if not rest:
        return {**data, head: value}
    return {**data, head: with_value(data[head], rest, value)}


def cases() -> list[tuple[str, str, str]]:
    """(model, field path, config text) for every count field of every bundled model, and each
    model unchanged (field "")."""
    out = []
    for path in sorted(BUNDLED.glob("*.json")):
        data = json.loads(path.read_text())
        out.append((path.stem, "", json.dumps(data)))
        for field in count_fields(data):
            out.append((path.stem, field, json.dumps(with_value(data, field, HUGE))))
    return out


RUNNER = textwrap.dedent(
    """
    import json, resource, sys, tempfile
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    from tests.hostile_inputs import run_in_process
    results = []
    with tempfile.TemporaryDirectory() as d:
        for i, (model, field, text) in enumerate(json.load(sys.stdin)):
            (Path(d) / str(i)).mkdir()
            config, graph = Path(d) / str(i) / f"{model}.json", Path(d) / str(i) / "out.tir"
            config.write_text(text)
            out = run_in_process(["compile", str(config), "--seq", "4", "-o", str(graph)])
            text = graph.read_text().replace(str(config), "") if graph.exists() else None
            results.append([model, field, str(config), out.code, out.stderr, out.traceback, text])
    print(json.dumps(results))
    """
)


def test_every_count_field_is_bounded_with_one_line_naming_file_and_field():
    all_cases = cases()
    assert len({model for model, _, _ in all_cases}) >= 20  # every bundled family has count fields
    assert any(field == "n_routed_experts" for _, field, _ in all_cases)
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER.replace("ADDRESS_SPACE", str(ADDRESS_SPACE))],
        input=json.dumps(all_cases),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    wrong, unchanged = [], {}
    for model, field, config, code, stderr, tb, graph in json.loads(proc.stdout):
        line = stderr.strip()
        if not field:
            unchanged[model] = graph
            continue
        key = field.rpartition(".")[2]
        refused = code == 2 and tb is None and "\n" not in line and config in line and key in line
        unread = code == 0 and graph == unchanged[model]
        if not (refused or unread):
            wrong.append(f"{model} {field}: exit {code}: {(tb or line)[-300:]}")
    assert not wrong, "\n".join(wrong)
