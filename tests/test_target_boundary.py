"""Generic code reaches RNGD only through the Target seam: no generic module imports a module of
the RNGD package (spec, units, sites, energy, area, its recipe book), at module level or inside a
function; it asks `simulator.targets.target_of(spec)` or `tcp_compiler.recipes.recipes(spec)`.
And a target's package imports, of the compiler, only the layer below every target (errors,
observer, passes), so the import rule stays acyclic (docs/architecture.md, "Import direction").
Nor does generic code name RNGD's activities or units as strings (it takes them from a `Sites`), and
generic analysis asks a spec only what every `Spec` declares (its roofs)."""

from __future__ import annotations

import ast
import dataclasses
from functools import cache
from typing import get_args

import networkx as nx
import pytest

from ir.ops import REGISTRY as OPS
from simulator.hardware import load_hardware
from simulator.spec import Spec
from simulator.targets import target_of
from simulator.targets.rngd import RNGD
from tcp_compiler.frontend.weight_shapes import Kind as WeightKind
from tcp_compiler.recipes import Recipes, recipes
from tests.test_import_cycles import ROOT, import_graph

# Everything RNGD-specific: the target's package, and its recipe book's package (the module the
# Target names, less its last part).
RNGD_PACKAGES = ("simulator.targets.rngd", RNGD.recipes.rsplit(".", 1)[0])
REGISTRY = "simulator.targets"  # lists the targets of this build: the one generic module that names one
# The generic packages (and top-level modules), each of which must reach RNGD through the seam.
GENERIC = (
    "ir", "simulator", "tcp_compiler.pipeline", "tcp_compiler.simulate", "tcp_compiler.planner",
    "tcp_compiler.generation", "tcp_compiler.serve", "tcp_compiler.report", "tcp_compiler.analysis",
    "tcp_compiler.search",
    "tcp_compiler.cli", "tcp_compiler.frontend", "tcp_compiler.passes", "tcp_compiler.runtime",
    "tcp_compiler.sweep", "tcp_compiler.executors", "tcp_compiler.store",
    "tcp_compiler.spec_settings", "tcp_compiler.option_fields", "tcp_compiler.records",
    "tcp_compiler.provenance", "tcp_compiler.observer", "tcp_compiler.errors", "tcp_compiler.recipes",
    "tcp_compiler.validation",
    "tcp_compiler.__main__",
)  # fmt: skip
# What a target's package may import of tcp_compiler (beside its package's __init__): modules that
# never import a target.
COMPILER_CORE = ("tcp_compiler.errors", "tcp_compiler.observer", "tcp_compiler.passes")


@cache
def graph_of_imports() -> nx.DiGraph:
    return import_graph()


def core(module: str) -> bool:
    return module == "tcp_compiler" or inside(module, COMPILER_CORE)


def inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def rngd_specific(module: str) -> bool:
    return inside(module, RNGD_PACKAGES)


def generic_modules(package: str) -> list[str]:
    return [m for m in graph_of_imports() if inside(m, (package,)) and not rngd_specific(m) and m != REGISTRY]


def test_every_module_is_generic_rngd_specific_or_the_registry() -> None:
    known = ("tcp_compiler", REGISTRY)  # tcp_compiler's __init__ (its version) and the registry
    stray = [m for m in graph_of_imports() if not (rngd_specific(m) or m in known or inside(m, GENERIC))]
    assert not stray, f"modules in no package of GENERIC nor RNGD's: {stray}"


@pytest.mark.parametrize("package", GENERIC)
def test_generic_package_imports_no_rngd_module(package: str) -> None:
    graph = graph_of_imports()
    modules = generic_modules(package)
    assert modules, package
    direct = sorted(f"{m} -> {t}" for m in modules for t in graph.successors(m) if rngd_specific(t))
    assert not direct, f"{package} imports RNGD-specific modules: {direct}"


def test_a_direct_import_is_caught() -> None:
    graph = graph_of_imports().copy()
    graph.add_edge("tcp_compiler.pipeline", f"{RNGD_PACKAGES[1]}.schedule")
    assert any(rngd_specific(t) for t in graph.successors("tcp_compiler.pipeline"))


def test_targets_import_only_the_compiler_core() -> None:
    graph = graph_of_imports()
    wrong = sorted(
        f"{m} -> {t}" for m in graph if rngd_specific(m) for t in graph.successors(m)
        if inside(t, ("tcp_compiler",)) and not rngd_specific(t) and not core(t)
    )  # fmt: skip
    assert not wrong, wrong
    forbidden = ("simulator.targets", "tcp_compiler")  # any target, the compiler above the core
    above = sorted(f"{m} -> {t}" for m in graph if core(m) for t in graph.successors(m)
                   if inside(t, forbidden) and not core(t))  # fmt: skip
    assert not above, f"the compiler core imports what imports a target: {above}"


def test_the_recipe_book_offers_every_entry_of_the_seam() -> None:
    hw = load_hardware("rngd")
    book = recipes(hw)
    assert target_of(hw) is RNGD
    entries = {n for n in (*Recipes.__dict__, *Recipes.__annotations__) if not n.startswith("_")}
    assert {"schedule", "DecodeSteps", "chain", "SENT"} <= entries
    missing = sorted(n for n in entries if not hasattr(book, n))
    assert not missing, f"{RNGD.recipes} lacks {missing}"


# --- names and methods: generic code says no RNGD word, and asks a spec only what every Spec offers ---

RNGD_NAMES = frozenset((*RNGD.sites.activity_names, *RNGD.sites.unit_names))
# Packages that handle the IR and the model, where an op's kind (`sub`, a subtraction) and a weight's
# (`vector`, one dimension) are words of their own.
IR_SIDE = ("ir", "tcp_compiler.frontend", "tcp_compiler.passes")
IR_WORDS = frozenset((*OPS, *get_args(WeightKind)))


def source(module: str) -> ast.Module:
    path = ROOT.joinpath(*module.split("."))
    return ast.parse((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text())


def rngd_words(tree: ast.AST, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The string literals of `tree` that name an RNGD activity or unit, less dict keys (an output's
    field names, e.g. a trace's "dma" note) and `allowed`."""
    keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}
    return [
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in keys
        and n.value in RNGD_NAMES - allowed
    ]  # fmt: skip


@pytest.mark.parametrize("package", GENERIC)
def test_generic_code_names_no_rngd_activity_or_unit(package: str) -> None:
    ir_words = IR_WORDS if inside(package, IR_SIDE) else frozenset()
    found = {m: words for m in generic_modules(package) if (words := rngd_words(source(m), ir_words))}
    assert not found, f"RNGD's activities or units named in generic code (take them from a Sites): {found}"


def test_an_rngd_word_in_generic_code_is_caught() -> None:
    assert {"contraction", "sub"} <= RNGD_NAMES
    tree = ast.parse('_ACTIVE = {"compute": "contraction"}\nWHILE = ("sub",)')
    assert rngd_words(tree) == ["contraction", "sub"] and rngd_words(tree, IR_WORDS) == ["contraction"]


def spec_attributes(tree: ast.AST) -> set[str]:
    """What the functions of `tree` read of a parameter annotated `Spec` (`hw.flops_per_second`)."""
    read = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
            specs = {a.arg for a in args if a.annotation is not None and ast.unparse(a.annotation) == "Spec"}
            read |= {
                n.attr for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in specs
            }  # fmt: skip
    return read


def test_generic_analysis_calls_on_a_spec_only_what_spec_declares() -> None:
    modules = generic_modules("tcp_compiler.analysis")
    read = {m: spec_attributes(source(m)) for m in modules}
    assert {"flops_per_second", "hbm_bytes_per_second", "link_bytes_per_second"} <= read[
        "tcp_compiler.analysis.roofline"
    ]
    declared = {*dir(Spec), *(f.name for f in dataclasses.fields(Spec))}  # methods, and name, path...
    missing = {m: sorted(attrs - declared) for m, attrs in read.items()}
    assert not any(missing.values()), f"read of a Spec but not declared on Spec: {missing}"
    assert spec_attributes(ast.parse("def f(hw: Spec): return hw.system.link_bytes_per_s")) == {"system"}
    assert "system" not in declared  # a target's table: generic analysis may not reach into it
    assert {"name", "flops_per_second", "link_bytes_per_second"} <= declared
