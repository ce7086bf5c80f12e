"""Graphviz DOT export, for looking at a graph's dataflow as a picture."""

from __future__ import annotations

from ir.graph import Graph

_STYLE = {
    "input": 'shape=invhouse, style=filled, fillcolor="#dbeafe"',
    "param": 'shape=box, style=filled, fillcolor="#fef3c7"',
    "const": "shape=box, style=dashed",
    "iota": "shape=box, style=dashed",
    "einsum": 'shape=box, style="filled,bold", fillcolor="#fee2e2"',
    "grouped_einsum": 'shape=box, style="filled,bold", fillcolor="#fee2e2"',
}
_DEFAULT = "shape=box, style=rounded"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: Graph) -> str:
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;", '  node [fontname="monospace"];']
    for n in graph.nodes:
        label = f"%{n.name} = {n.kind}\n{n.type}"
        if "eq" in n.attrs:  # einsum, grouped_einsum
            label += f"\n{n.attrs['eq']}"
        lines.append(f"  {_quote(n.name)} [label={_quote(label)}, {_STYLE.get(n.kind, _DEFAULT)}];")
    for n in graph.nodes:
        for o in n.operands:
            lines.append(f"  {_quote(o)} -> {_quote(n.name)};")
    for i, o in enumerate(graph.outputs):
        out = f"output {i}"
        lines.append(f"  {_quote(out)} [label={_quote('return ' + o)}, shape=house];")
        lines.append(f"  {_quote(o)} -> {_quote(out)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
