"""The source modules (ir, simulator, tcp_compiler) import one another without a cycle, and so do
tcp_compiler's subpackages (report, analysis, serve, ...) taken whole.

Every import that runs counts, at module level or inside a function (a late import hides a cycle,
it does not break it); imports under `if TYPE_CHECKING:` never run and do not count. `import a.b.c`
and `from a.b import c` (c a module) depend on a.b.c; `from a.b import name` depends on a.b. A
package's own __init__ importing its submodules is not an edge back from them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ir", "simulator", "tcp_compiler")

# The command line depends on everything and nothing depends on it, but the entry point.
CLI, ENTRY = "tcp_compiler.cli", "tcp_compiler.__main__"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The known modules one import statement depends on."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & known
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    targets = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        targets.add(submodule if submodule in known else base)
    return targets & known


def import_graph() -> nx.DiGraph:
    files = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for module, path in files.items():
        for node in run_imports(ast.parse(path.read_text(), str(path))):
            for target in imported(node, module, path.name == "__init__.py", set(files)):
                if target != module and not module.startswith(f"{target}."):
                    graph.add_edge(module, target)
    return graph


def run_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree outside `if TYPE_CHECKING:` blocks."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def cycles(graph: nx.DiGraph) -> set[frozenset[str]]:
    return {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}


def test_the_import_graph_sees_late_and_relative_imports() -> None:
    graph = import_graph()
    assert graph.has_edge("tcp_compiler.cli.sweep_cmd", "tcp_compiler.sweep.serve")  # inside run()
    assert graph.has_edge("ir.graph", "ir.typecheck")
    assert not graph.has_edge("simulator.utilisation", "simulator.report")  # under TYPE_CHECKING
    assert len(graph) > 100


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def package_of(module: str) -> str:
    """The tcp_compiler subpackage a module is in (tcp_compiler.report for tcp_compiler.report.build),
    or the module itself (ir, simulator and tcp_compiler's top-level modules)."""
    parts = module.split(".")
    if parts[0] != "tcp_compiler" or len(parts) < 2:
        return module
    if len(parts) > 2 or (ROOT / "tcp_compiler" / parts[1] / "__init__.py").is_file():
        return ".".join(parts[:2])
    return module


def package_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """The import graph with each tcp_compiler subpackage collapsed into one node."""
    packages = nx.DiGraph()
    packages.add_nodes_from({package_of(m) for m in graph if m.startswith("tcp_compiler")})
    for a, b in graph.edges:
        if a.startswith("tcp_compiler") and b.startswith("tcp_compiler") and package_of(a) != package_of(b):
            packages.add_edge(package_of(a), package_of(b))
    return packages


def test_no_import_cycle_between_subpackages() -> None:
    packages = package_graph(import_graph())
    assert {"tcp_compiler.report", "tcp_compiler.analysis", "tcp_compiler.cli"} <= set(packages)
    found = cycles(packages)
    assert not found, "package cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)
    assert set(packages.predecessors(CLI)) == {ENTRY}


def test_a_package_cycle_is_found() -> None:
    graph = nx.DiGraph([("tcp_compiler.report.build", "tcp_compiler.analysis.limiter"),
                        ("tcp_compiler.analysis.limiter", "tcp_compiler.report.types")])  # fmt: skip
    assert cycles(package_graph(graph)) == {frozenset({"tcp_compiler.report", "tcp_compiler.analysis"})}


def test_a_cycle_is_found() -> None:
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])
    assert cycles(graph) == {frozenset("abc")}
