"""What the terminal and Markdown reports both say, worded once: attention forms, the rows of the
top-roles and per-layer tables, and number formats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.numbers import duration, plural, si
from tcp_compiler.analysis.op_roles import OpRoleRow
from tcp_compiler.report.types import (
    AttentionNote,
    LayerRow,
    Memory,
    Pipeline,
    Report,
    StageRow,
)

ROLE_COLUMNS = ("op role", "n", "total", "per layer", "share", "FLOPs", "HBM", "FLOP/HBM B", "bound")
LAYER_COLUMNS = ("time", "share", "FLOPs", "HBM", "FLOP/HBM B", "x roof", "bound", "attention")


def percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def intensity(flops_per_byte: float, hbm_bytes: float) -> str:
    """FLOPs per HBM byte; "-" for work that touches no HBM (its intensity has no bound)."""
    return f"{flops_per_byte:,.1f}" if hbm_bytes else "-"


def attention_lines(report: Report) -> list[str]:
    """One line per attention form the prefill used: form, tile, how many layers, and why (the
    first such layer's reason)."""
    notes = report.attention.prefill
    groups: dict[tuple, list[AttentionNote]] = {}
    for note in notes:
        groups.setdefault((note.form, note.rows, note.block), []).append(note)
    lines = []
    scans = sum(note.form in SCAN_FORMS for note in notes)
    tiled = sum(note.form == "tiled" for note in notes)
    for (form, rows, block), group in groups.items():
        if form == "tiled":
            lines.append(f"prefill activations: held in DM a token tile at a time, tiles of {block:,} tokens "
                         f"or fewer, in {len(group)} runs of ops ({group[0].reason})")  # fmt: skip
            continue
        what = {
            "plain": "plain softmax",
            "online": f"online softmax, tiles of {rows} queries x {block} keys",
            "chunked": f"chunked, {block} positions per chunk",
            "sequential": "step by step on the Vector Engine",
        }[form]
        mixer, of = ("scan", scans) if form in SCAN_FORMS else ("attention", len(notes) - scans - tiled)
        share = ""
        if form in SCAN_FORMS:
            part = role_share(report.op_roles.prefill, {n.role for n in group}, report.prefill.seconds)
            share = f", {part:.0%} of the prefill"
        lines.append(f"prefill {mixer}: {what} in {len(group)} of {of} layers{share} ({group[0].reason})")
    scan_roles = {note.role for note in notes if note.form in SCAN_FORMS}
    step = report.decode.tpot_seconds_mean
    if scan_roles and report.op_roles.decode and step:
        lines.append(f"decode scan: {role_share(report.op_roles.decode, scan_roles, step):.1%} of a step")
    return lines


def runtime_lines(report: Report) -> list[str]:
    """The serving runtime's device costs around the programs, a line each: the padding up to its
    static shapes (when anything is padded) and the paged-KV descriptors' issue (when there are
    decode steps)."""
    pre, dec = report.prefill, report.decode
    lines = []
    padded = pre.padded_tokens or dec.padded_sequences or dec.padded_kv_tokens_per_step
    if padded or pre.padding_seconds or dec.padding_seconds:
        step = ""
        if dec.steps:
            slots = plural(dec.padded_sequences, "batch slot")
            step = (f"; decode {duration(dec.padding_seconds)} a step ({slots}, "
                    f"{dec.padded_kv_tokens_per_step:,.0f} KV positions past the caches)")  # fmt: skip
        lines.append(f"shape padding: prefill {duration(pre.padding_seconds)} "
                     f"({plural(pre.padded_tokens, 'padded token')}){step}")  # fmt: skip
    if dec.steps:
        lines.append(f"KV descriptor issue: {duration(dec.descriptor_seconds)} a step "
                     f"({dec.kv_descriptors_per_step:,.0f} descriptors per step on a "
                     f"{device_noun(report.hardware.ranks_per_card)})")  # fmt: skip
    return lines


def role_share(roles: tuple[OpRoleRow, ...], scans: set[str], seconds: float) -> float:
    """The share of a phase's `seconds` the Tensor Unit spends on the ops of the `scans` roles (and
    what the chunked form made of them, `role.*`): Tensor Unit time, as the unit runs one pass at a
    time while the data moves of the scan's blocks overlap with other work."""
    mine = (r for r in roles if any(r.role == s or r.role.startswith(s + ".") for s in scans))
    return sum(r.tensor_unit_seconds for r in mine) / seconds


SCAN_FORMS = frozenset({"chunked", "sequential"})


def role_cells(role: OpRoleRow) -> list[str]:
    """A role's row of ROLE_COLUMNS."""
    return [
        role.role, str(role.count), duration(role.seconds), duration(role.seconds_per_layer),
        percent(role.share),
        si(role.flops), si(role.hbm_bytes, "B"), intensity(role.hbm_intensity, role.hbm_bytes), role.bound,
    ]  # fmt: skip


def top_roles(roles: Sequence[OpRoleRow], top: int) -> tuple[Sequence[OpRoleRow], str]:
    """The `top` heaviest roles (0: all) and a line for the rest ("" when none is left out)."""
    shown = roles if top <= 0 else roles[:top]
    rest = roles[len(shown) :]
    if not rest:
        return shown, ""
    seconds = sum(r.seconds for r in rest)
    return shown, f"... {len(rest)} more op roles, {duration(seconds)} in all (--top all lists every role)"


OTHER = "other"  # layer -1: the embedding, final norm and LM head
OTHER_NOTE = f"{OTHER} = embedding, final norm, LM head"


def layer_label(layer: int) -> str:
    return str(layer) if layer >= 0 else OTHER


def layer_cells(row: LayerRow, phase_seconds: float) -> list[str]:
    """A layer's row of LAYER_COLUMNS (share of the phase's time)."""
    share = row.seconds / phase_seconds if phase_seconds else 0.0
    ratio = row.seconds / row.roofline_seconds if row.roofline_seconds else 0.0
    return [
        duration(row.seconds), percent(share), si(row.flops), si(row.hbm_bytes, "B"),
        intensity(row.hbm_intensity, row.hbm_bytes), f"{ratio:.2f}", row.bound, row.attention or "-",
    ]  # fmt: skip


@dataclass(frozen=True)
class LayerGroup:
    """Layers whose printed figures are identical, shown as one row."""

    layers: tuple[int, ...]
    cells: tuple[str, ...]

    @property
    def label(self) -> str:
        return ranges(self.layers) if self.layers[0] >= 0 else layer_label(self.layers[0])


def layer_groups(rows: Sequence[LayerRow], phase_seconds: float) -> list[LayerGroup]:
    """Decoder layers with identical printed figures collapse into one group, wherever they sit
    (Gemma's local and global layers interleave); the non-layer ops (-1) stay on their own, last;
    groups in order of their first layer."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for row in rows:
        cells = tuple(layer_cells(row, phase_seconds))
        key = cells if row.layer >= 0 else ("other", *cells)
        groups.setdefault(key, []).append(row.layer)
    found = [LayerGroup(tuple(layers), key[-len(LAYER_COLUMNS) :]) for key, layers in groups.items()]
    return sorted(found, key=lambda g: (g.layers[0] < 0, g.layers[0]))


def ranges(values: Sequence[int]) -> str:
    """0,1,2,3,5,7,8 -> '0-3,5,7-8'."""
    spans: list[list[int]] = []
    for v in sorted(values):
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


PIPELINE_COLUMNS = ("stage", "layers", "weights", "prefill/mb", "busy", "decode step", "busy")


def chips_text(chips: int, ranks_per_card: int) -> str:
    """'8 chips', or '2 cards x 8 PE ranks' when each card runs as several tensor-parallel ranks."""
    if ranks_per_card == 1:
        return plural(chips, "chip")
    return f"{plural(chips // ranks_per_card, 'card')} x {ranks_per_card} PE ranks"


def device_noun(ranks_per_card: int) -> str:
    """What a per-device figure is per: a chip, or a PE rank (its share of a card) when each card
    runs as several tensor-parallel ranks (`system.pe_partitions`)."""
    return "chip" if ranks_per_card == 1 else "PE rank"


def power_text(watts: float, ranks_per_card: int) -> str:
    """'95 W per chip', or '12 W per PE rank (96 W per card)'."""
    noun = device_noun(ranks_per_card)
    card = f" ({watts * ranks_per_card:.0f} W per card)" if ranks_per_card > 1 else ""
    return f"{watts:.0f} W per {noun}{card}"


def pipeline_title(pipe: Pipeline) -> str:
    batches = f"{pipe.micro_batches} micro-batch" + ("es" if pipe.micro_batches > 1 else "")
    return f"pipeline: {pipe.pp} stages x {plural(pipe.tp, 'chip')}, prefill in {batches}"


def pipeline_caption(pipe: Pipeline) -> str:
    return (
        "each stage timed alone; busy: its share of TTFT / TPOT. Sent per decode step: "
        f"{si(pipe.link_bytes_per_step, 'B')} per chip"
    )


def pipeline_cells(s: StageRow) -> list[str]:
    return [
        str(s.stage), f"{s.first_layer}-{s.last_layer}", si(s.weights_bytes, "B"),
        duration(s.prefill_seconds), f"{100 * s.prefill_busy_share:.0f}%", duration(s.decode_seconds),
        f"{100 * s.decode_busy_share:.0f}%",
    ]  # fmt: skip


def counted_text(chips: int, ranks_per_card: int) -> str:
    """Which devices an energy figure counts: '1 chip', or all of them, each counted."""
    if chips == 1:
        return "1 chip"
    return f"{chips_text(chips, ranks_per_card)}, every {device_noun(ranks_per_card)} counted"


def energy_lines(report: Report) -> list[str]:
    """Power and energy per phase, tokens per joule, and a line for each phase above the TDP."""
    e, ranks = report.energy, report.hardware.ranks_per_card
    j, noun = joules_text, device_noun(ranks)
    pre = e.prefill
    parts = [f"prefill {j(pre.joules)} at {power_text(pre.average_power_w, ranks)}, "
             f"{j(pre.joules_per_token)}/prompt token"]  # fmt: skip
    if e.decode is not None:
        parts.append(f"decode {j(e.decode.joules)}/step at {power_text(e.decode.average_power_w, ranks)}, "
                     f"{j(e.decode.joules_per_token)}/token")  # fmt: skip
    lines = [f"energy ({counted_text(e.chips, ranks)}): {'; '.join(parts)}; whole run "
             f"{power_text(e.average_power_w, ranks)}, {e.tokens_per_joule:.3g} tokens/J (idle "
             f"{e.idle_power_w:.0f} W; {e.clock_hz / 1e9:.3g} GHz at {e.voltage_v:.3g} V)"]  # fmt: skip
    lines += [f"{phase} draws above the {e.tdp_w:.0f} W TDP per {noun} (chip.tdp_w); "
              "--power-cap lowers the clock" for phase in e.over_tdp]  # fmt: skip
    return lines


def joules_text(joules: float) -> str:
    """Joules with three significant digits, in mJ below one joule."""
    return f"{joules:.3g} J" if joules >= 1 else f"{joules * 1e3:.3g} mJ"


def unrun_line(mem: Memory) -> str:
    """The weights the checkpoint holds that the generation does not run, and what they would take."""
    return (
        f"not run: {mem.unrun_params:,} parameters ({si(mem.unrun_weights_bytes, 'B')}) the checkpoint "
        f"holds beside the model (multi-token-prediction layers), neither run nor held in HBM"
    )
