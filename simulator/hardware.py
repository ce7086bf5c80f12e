"""Loading a hardware spec: one TOML file per machine, validated into its target's `Spec`.

Every number the cost formulas use lives in a spec file (simulator/specs/*.toml), never in code, and
every value records where it comes from (published / derived / assumed), so a report can say which of
its inputs are assumptions. A file may `extends` a preset or another file and override any values,
which makes a what-if study a three-line file. What a file may contain (tables, keys, types, ranges)
is its target's spec class (simulator.spec, simulator/targets/); this module reads and checks files.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from simulator.errors import HardwareError
from simulator.files import read_input
from simulator.spec import SOURCE_PATTERN, Param, Spec, build, describe, suggest
from simulator.target import Target
from simulator.targets import DEFAULT_TARGET

# Top-level keys that are not parameter tables.
_META_KEYS = ("extends", "description")
MAX_EXTENDS_DEPTH = 16  # files in one `extends` chain; presets use 2
MAX_SPEC_BYTES = 1 << 20  # a spec is a few KB of TOML


def list_presets(target: Target = DEFAULT_TARGET) -> list[str]:
    """Names of a target's bundled specs, as `load_hardware` and `tcpc hw show` accept them."""

    def natural(name: str) -> list[Any]:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]

    return sorted((p.stem for p in target.specs_dir.glob("*.toml")), key=natural)


def load_hardware(
    name_or_path: str | Path, chips: int | None = None, target: Target = DEFAULT_TARGET
) -> Spec:
    """Loads a preset by name (`rngd`, `rngd-4`) or a spec file by path, applying `extends`, into
    the target's spec class; with `chips`, as a system of that many of its chips (Spec.with_chips)."""
    path = _resolve(name_or_path, target)
    entries, meta = _load_entries(path, (), target)
    keys = target.spec.leaf_keys()
    for key in keys:
        if key not in entries:
            raise HardwareError(f"{path}: {key}: missing key (not set here nor in what it extends)")
    spec = build(
        target.spec,
        {k: entries[k][0] for k in keys},
        name=path.stem,
        path=path,
        description=meta.get("description", ""),
        extends=meta.get("extends"),
        sources={k: entries[k][1] for k in keys},
    )
    broken = spec.consistency()
    if broken:
        key, message = broken
        origin = entries[key][2]  # the file that set the value at fault: the user's, or one it extends
        inherited = f" (a value {path.name} inherits from {origin})" if origin != path else ""
        raise HardwareError(f"{path}: {key}: {message}{inherited}")
    return spec.with_chips(chips)


def _resolve(name_or_path: str | Path, target: Target) -> Path:
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or "\\" in text or text.endswith(".toml"):
        return Path(text)
    preset = target.specs_dir / f"{text}.toml"
    if preset.is_file():
        return preset
    if Path(text).is_file():
        return Path(text)
    presets = list_presets(target)
    raise HardwareError(
        f"{text}: unknown hardware preset{suggest(text, presets)}; presets: {', '.join(presets)} "
        "(or give the path of a .toml file)"
    )


# An entry is (value, source, file it was set in).
_Entry = tuple[Any, str, Path]


def _load_entries(
    path: Path, stack: tuple[Path, ...], target: Target
) -> tuple[dict[str, _Entry], dict[str, str]]:
    """Flattens one file (and what it extends) into dotted key -> entry; the file's entries win."""
    doc = _read_toml(path)
    meta: dict[str, str] = {}
    for key in _META_KEYS:
        if key in doc and not isinstance(doc[key], str):
            raise HardwareError(f"{path}: {key}: expected a string, got {describe(doc[key])}")
    entries: dict[str, _Entry] = {}
    tables, params = target.spec.tables(), target.spec.params()
    if "extends" in doc:
        if len(stack) + 1 >= MAX_EXTENDS_DEPTH:
            raise HardwareError(
                f"{path}: extends: the chain is more than {MAX_EXTENDS_DEPTH} files deep "
                f"(it starts at {stack[0] if stack else path})"
            )
        base = _resolve_extends(path, doc["extends"], stack, target)
        entries, meta = _load_entries(base, (*stack, _identity(path)), target)
        meta = {**meta, "extends": doc["extends"]}
    if "description" in doc:
        meta["description"] = doc["description"]
    for table, body in doc.items():
        if table in _META_KEYS:
            continue
        if table not in tables:
            raise HardwareError(f"{path}: {table}: unknown table{suggest(table, tables)}")
        if not isinstance(body, dict):
            raise HardwareError(f"{path}: {table}: expected a table [{table}], got {describe(body)}")
        for key, item in body.items():
            dotted = f"{table}.{key}"
            param = params.get(dotted)
            if param is None:
                raise HardwareError(f"{path}: {dotted}: unknown key{suggest(dotted, params)}")
            if not param.per:
                entries[dotted] = _entry(path, dotted, param, item)
                continue
            if not isinstance(item, dict) or "value" in item or "source" in item:
                raise HardwareError(
                    f"{path}: {dotted}: expected a table with one entry per dtype ({', '.join(param.per)})"
                )
            for dtype, sub in item.items():
                if dtype not in param.per:
                    raise HardwareError(
                        f"{path}: {dotted}.{dtype}: unknown dtype{suggest(dtype, param.per)}; "
                        f"known: {', '.join(param.per)}"
                    )
                entries[f"{dotted}.{dtype}"] = _entry(path, f"{dotted}.{dtype}", param, sub)
    return entries, meta


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = read_input(path, MAX_SPEC_BYTES, "hardware specs")
    except OSError as e:
        raise HardwareError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HardwareError(f"{path}: cannot read: not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise HardwareError(f"{path}: TOML nested too deeply") from None
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
        if where is None:
            raise HardwareError(f"{path}: TOML syntax error: {message}") from None
        line, column = int(where.group(1)), int(where.group(2))
        reason = message[: where.start()] + message[where.end() :]
        key = _key_at_line(text, line)
        at = f" {key}:" if key else ""
        raise HardwareError(f"{path}:{line}:{column}:{at} TOML syntax error: {reason}") from None


def _key_at_line(text: str, line: int) -> str | None:
    """The dotted key a syntax error sits on, so the message says which setting to fix."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return None
    table = ""
    for previous in lines[: line - 1]:
        header = re.match(r"\s*\[+\s*([A-Za-z0-9_.\- ]+?)\s*\]+\s*(#.*)?$", previous)
        if header:
            table = header.group(1).replace(" ", "")
    assignment = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*=", lines[line - 1])
    if assignment is None:
        return None
    key = assignment.group(1)
    return f"{table}.{key}" if table else key


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _resolve_extends(path: Path, extends: str, stack: tuple[Path, ...], target: Target) -> Path:
    """`extends` names a preset, or a file relative to the extending file; cycles are errors."""
    if "/" in extends or "\\" in extends or extends.endswith(".toml"):
        base = path.parent / extends
        if not base.is_file():
            raise HardwareError(f"{path}: extends: cannot read '{extends}' (looked for {base})")
    else:
        base = target.specs_dir / f"{extends}.toml"
        if not base.is_file():
            presets = list_presets(target)
            raise HardwareError(
                f"{path}: extends: unknown preset '{extends}'{suggest(extends, presets)}; "
                f"presets: {', '.join(presets)}"
            )
    chain = (*stack, _identity(path))
    if _identity(base) in chain:
        names = [p.name for p in chain[chain.index(_identity(base)) :]] + [base.name]
        raise HardwareError(f"{path}: extends: cycle {' -> '.join(names)}")
    return base


def _entry(path: Path, dotted: str, param: Param, item: Any) -> _Entry:
    """Checks one `{ value = ..., source = "..." }` entry where it is written."""
    if not isinstance(item, dict):
        raise HardwareError(
            f'{path}: {dotted}: expected {{ value = ..., source = "..." }}, got {describe(item)}'
        )
    for name in item:
        if name not in ("value", "source"):
            raise HardwareError(f"{path}: {dotted}.{name}: unknown field; an entry has only value and source")
    if "value" not in item:
        raise HardwareError(f"{path}: {dotted}: missing value")
    if "source" not in item:
        raise HardwareError(
            f"{path}: {dotted}: missing source; every value says where it comes from "
            "('published: ...', 'derived: ...' or 'assumed: ...')"
        )
    source = item["source"]
    if not isinstance(source, str) or not SOURCE_PATTERN.match(source):
        raise HardwareError(
            f"{path}: {dotted}: source {describe(source)} must start with 'published:', 'derived:' or "
            "'assumed:' followed by a reference"
        )
    try:
        value = param.check(dotted, item["value"])
    except HardwareError as e:
        raise HardwareError(f"{path}: {e}") from None
    return value, source, path


def extension_text(extends: str, description: str, spec: Spec, addresses: list[str]) -> str:
    """A spec file that `extends` another (a preset name or a path relative to the new file) and
    sets the values at `addresses` as `spec` has them, each with its source: what `load_hardware`
    reads back as `spec` at those addresses."""
    lines = [f"extends = {_toml_string(extends)}", f"description = {_toml_string(description)}"]
    tables: dict[str, list[str]] = {}
    for address in addresses:
        *table, key = address.split(".")
        entry = f"value = {spec.value(address)!r}, source = {_toml_string(spec.sources[address])}"
        tables.setdefault(".".join(table), []).append(f"{key} = {{ {entry} }}")
    for table, entries in tables.items():
        lines += ["", f"[{table}]", *entries]
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    """A TOML basic string (its escapes are JSON's for the characters a source holds)."""
    return json.dumps(text, ensure_ascii=False)
