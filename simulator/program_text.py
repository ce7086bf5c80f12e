"""A Program as text a person can read: each op with its placement, then its commands."""

from __future__ import annotations

from simulator.numbers import si
from simulator.program import Program


def format_program(program: Program, title: str = "program") -> str:
    lines = [f"{title}: {len(program)} commands, {len(program.ops)} ops"]
    contexts = program.sites.context_names
    by_op: dict[int, list[int]] = {}
    for i in range(len(program)):
        by_op.setdefault(int(program.op[i]), []).append(i)
    for index, info in enumerate(program.ops):
        layer = f" layer {info.layer}" if info.layer >= 0 else ""
        lines.append(f"op {index} %{info.name} [{info.kind}]{layer}: {', '.join(info.nodes)}")
        if info.placement:
            lines.append(f"  placement: {info.placement}")
        for i in by_op.get(index, []):
            parts = [
                f"  #{i:<6d} {contexts[program.context[i]]:<4s} chip {program.chip[i]}",
                f"{program.cycles[i]:>9,} cyc",
            ]
            if program.latency[i] and program.latency[i] != program.cycles[i]:
                parts.append(f"start-up {program.latency[i]:,}")
            for name, unit in (
                ("flops", "FLOP"),
                ("hbm_bytes", "B HBM"),
                ("dm_bytes", "B DM"),
                ("link_bytes", "B link"),
            ):
                value = int(getattr(program, name)[i])
                if value:
                    parts.append(si(value, unit))
            deps = program.deps(i)
            parts.append("after " + ", ".join(f"#{d}" for d in deps) if len(deps) else "no deps")
            lines.append("  ".join(parts))
    return "\n".join(lines) + "\n"
