"""The simulation report's types: the schema in code. Each field carries its unit and meaning, from
which docs/report-schema.md is generated (tcp_compiler.report.schema); `Report.to_dict()` is the
`--json` output. A field that is None is absent from the JSON."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, ClassVar, Literal

import numpy as np

from simulator.targets.rngd import SITES

SCHEMA = "tcpc.report/1"

Bound = Literal["compute", "memory", "communication", "overhead"]


def doc(meaning: str, unit: str = "", values: str = "", **kwargs: Any) -> Any:
    """A field with its meaning and unit, for the generated schema doc; `values` names a mapping
    ("module:NAME") whose keys the doc lists as the field's values, so the doc cannot omit one."""
    return field(metadata={"doc": meaning, "unit": unit, "values": values}, **kwargs)


@dataclass(frozen=True, kw_only=True)
class Record:
    """Base of every report object: numpy scalars become Python numbers, so the report is plain JSON."""

    nulls: ClassVar[bool] = False  # None fields written as null (True) or left out (False)

    def __post_init__(self) -> None:
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, np.generic):
                object.__setattr__(self, name, value.item())

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in field order, None fields left out (or null: `nulls`)."""
        keep = self.nulls
        return {f.name: _json(v) for f in fields(self) if (v := getattr(self, f.name)) is not None or keep}


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A record class's field names (dataclasses.fields is slow, and reports make many rows)."""
    return tuple(f.name for f in fields(cls))


def _json(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class HardwareSummary(Record):
    """The hardware spec as the report used it."""

    name: str = doc("spec name (`rngd`, `rngd-4`, or the file's)")
    chips: int = doc(
        "chips in all: tensor-parallel chips x pipeline stages; the figures describe one chip of each "
        "tensor-parallel group, summed over the stages (`pipeline`)"
    )
    clock_hz: float = doc("chip clock", "Hz")
    peak_flops_per_s: float = doc(
        "contraction-engine peak per chip for this precision's operand dtype (int weights are "
        "dequantised, so `w4` runs at the bf16 rate)",
        "FLOP/s",
    )
    hbm_bytes_per_s: float = doc("sustained HBM bandwidth per chip (the rooflines use it)", "B/s")
    assumed: tuple[str, ...] = doc("spec keys whose values are assumptions, not published facts")


@dataclass(frozen=True, kw_only=True)
class LimiterPart(Record):
    """One cause of the time a phase takes beyond its roofline, measured on the simulated timeline."""

    cause: Literal[SITES.limiter_causes] = doc(
        "`kernel_launch`: the host's launch overhead; `hbm_below_peak`: HBM moves in flight but below "
        "HBM's full rate; `pipeline_stages`: Tensor Unit pass time beyond its contraction (fill, drain, "
        "Vector, Commit, TRF loads); `contraction_placement`: contraction cycles beyond peak (lanes or "
        "slices the placement leaves idle); `link_latency`: chip-link time beyond its bytes at full "
        "bandwidth. The others are time the bound resource is idle, named by what runs instead (first "
        "match in this order): `link` collectives, `hbm_move`, `dma_on_chip` moves, `dma_startup`, "
        "`contraction` passes, `tensor_unit_other` (passes without a contraction), `sub` pipeline; "
        "`gaps`: nothing under way"
    )
    what: str = doc("the cause in words, as the terminal and Markdown reports print it")
    seconds: float = doc("time it accounts for (per step for decode)", "s")
    share: float = doc("`seconds` over the phase's time beyond its roofline", "0..1")


@dataclass(frozen=True, kw_only=True)
class Limiter(Record):
    """What a phase's time beyond its roofline is made of: the bound resource's idle time, split by
    what ran instead, plus the time it ran below its peak rate and the kernel launch; computed from
    the simulated timeline (which activities were under way at each cycle), so the parts sum to
    `excess_seconds`."""

    resource: Literal["compute", "memory", "communication"] = doc(
        "the largest roofline term: the resource that bounds the phase (the Contraction Engine, HBM, the "
        "chip links), even when the phase's `bound` is `overhead`"
    )
    roofline_ratio: float = doc("the phase's time over its roofline", "x")
    excess_seconds: float = doc("the phase's time minus its roofline (per step for decode)", "s")
    parts: tuple[LimiterPart, ...] = doc("the causes, largest first; causes under one cycle are left out")


@dataclass(frozen=True, kw_only=True)
class PrefillPhase(Record):
    """The prompt phase: one program over the whole prompt."""

    cycles: int = doc("simulated cycles of the prefill program", "cycles")
    seconds: float = doc("`cycles / clock_hz + launch_seconds`", "s")
    launch_seconds: float = doc("the kernel launch overhead included (`system.kernel_launch_s`)", "s")
    flops: int = doc(
        "work the program executes (online softmax adds its rescaling and skips the key blocks its "
        "mask hides)",
        "FLOP",
    )
    model_flops: int = doc(
        "work of the model's math: the graph before the attention rewrite (its einsums equal "
        "torch's FlopCounterMode)",
        "FLOP",
        default=0,
    )
    model_flops_utilisation: float = doc("`model_flops` / (`seconds` x `peak_flops_per_s`)", "", default=0.0)
    hbm_bytes: int = doc("bytes read and written in HBM", "B")
    roofline_seconds: float = doc(
        "the largest of: FLOPs at `peak_flops_per_s`, HBM bytes at `hbm_bytes_per_s`, chip-link bytes "
        "at the link bandwidth",
        "s",
    )
    bound: Bound = doc("the largest roofline term, or `overhead` when the phase took more than twice it")
    limiter: Limiter | None = doc(
        "what the time beyond the roofline is made of; absent with pipeline stages (see `pipeline`)",
        default=None,
    )
    config_bound_seconds: float = doc(
        "a floor from the model config and spec alone, blind to the lowering "
        "(tcp_compiler/analysis/config_floor.py)",
        "s",
        default=0.0,
    )


@dataclass(frozen=True, kw_only=True)
class DecodePhase(Record):
    """The decode phase: `gen_len - 1` steps, each at its own KV length; only `steps` when there are none."""

    steps: int = doc("decode steps simulated (`gen_len - 1`)", "steps")
    tpot_seconds_mean: float | None = doc("time per output token, mean over the steps", "s", default=None)
    tpot_seconds_first: float | None = doc(
        "time per output token of the first step (KV length `prompt_len + 1`)", "s", default=None
    )
    tpot_seconds_last: float | None = doc("time per output token of the last step", "s", default=None)
    seconds_total: float | None = doc("all decode steps", "s", default=None)
    flops_per_step_mean: float | None = doc("mean work of a step", "FLOP", default=None)
    hbm_bytes_per_step_mean: float | None = doc("mean HBM traffic of a step", "B", default=None)
    bound: Bound | None = doc("as for the prefill, for the mean step", default=None)
    roofline_seconds_mean: float | None = doc("the roofline of the mean step", "s", default=None)
    config_bound_seconds_mean: float | None = doc(
        "mean over the steps of the config-only floor (tcp_compiler/analysis/config_floor.py)",
        "s",
        default=None,
    )
    limiter: Limiter | None = doc("as for the prefill, for the mean step", default=None)


@dataclass(frozen=True, kw_only=True)
class UnitRow(Record):
    """One hardware unit over a phase (all steps for decode)."""

    unit: str = doc(
        "`tensor_dma`, `contraction`, `reducer`, `vector`, `fetch`, `switch`, `commit`, `trf_load`, "
        "`chip_link`"
    )
    busy_cycles: float = doc(
        "cycles the unit is busy; for `tensor_dma`, the bytes its moves carry over the engines' full rate",
        "cycles",
    )
    utilisation: float = doc(
        "`busy_cycles / phase cycles`; for `tensor_dma` likewise the bytes moved over what the engines "
        "could move; for `chip_link` the bytes sent over what the link could carry",
        "0..1",
    )


@dataclass(frozen=True, kw_only=True)
class LayerRow(Record):
    """One decoder layer (`-1`: embedding, final norm, LM head), per step for decode."""

    layer: int = doc("decoder layer index")
    seconds: float = doc(
        "time at least one of the layer's ops is under way (the union of its ops' spans; the next "
        "layer's weight prefetch overlaps it, and layer -1's ops sit at both ends of the program)",
        "s",
    )
    tensor_unit_seconds: float = doc("time the layer's ops hold the Tensor Unit's main context", "s")
    flops: float = doc("the layer's work", "FLOP")
    hbm_bytes: float = doc("the layer's HBM traffic", "B")
    intensity: float = doc("FLOPs per byte of HBM + DM traffic (on-chip reuse)", "FLOP/B")
    hbm_intensity: float = doc("FLOPs per byte of HBM traffic: the roofline's intensity", "FLOP/B")
    roofline_seconds: float = doc("as for the phases, for this layer", "s")
    bound: Bound = doc("as for the phases, for this layer")
    attention: Literal["plain", "online"] | None = doc(
        "prefill only: the softmax form of the layer's attention (`attention.prefill` says why)", default=None
    )


@dataclass(frozen=True, kw_only=True)
class OpRow(Record):
    """One fused op (an einsum with the element-wise work after it, a DMA move, a collective), per
    step for decode; every op, heaviest first."""

    name: str = doc("the IR value the op is named after (its einsum's, or its first node's)")
    kind: str = doc("`pass` (a Tensor Unit pass), `gather`, `scatter`, `slice`, `concat`, `all_reduce`, ...")
    layer: int = doc("decoder layer, `-1` outside the layers")
    placement: str = doc(
        "where the einsum's axes went: stationary operand, clusters, slices per role, lanes, packet, "
        "time steps, tiles"
    )
    seconds: float = doc("from the op's first command's start to its last command's end", "s")
    tensor_unit_seconds: float = doc("time on the Tensor Unit's main context", "s")
    flops: float = doc("the op's work", "FLOP")
    hbm_bytes: float = doc("the op's HBM traffic", "B")
    dm_bytes: float = doc("the op's data-memory (SRAM) traffic", "B")
    link_bytes: float = doc("the op's chip-link traffic", "B")
    intensity: float = doc("FLOPs per byte of HBM + DM traffic (on-chip reuse)", "FLOP/B")
    hbm_intensity: float = doc("FLOPs per byte of HBM traffic: the roofline's intensity", "FLOP/B")
    roofline_seconds: float = doc("as for the phases, for this op", "s")
    bound: Bound = doc("as for the phases, for this op")


@dataclass(frozen=True, kw_only=True)
class OpRoleRow(Record):
    """The ops that play one role across layers (`l0.down` ... `l15.down` are role `down`; tile
    indices of online softmax, such as `Sq1024` or `blk3`, read `*`), summed; per step for decode."""

    role: str = doc("the op name without its layer prefix, tile indices as `*`")
    kind: str = doc("as for ops")
    count: int = doc("ops in the role", "ops")
    layers: int = doc("distinct layers they sit in (0 for ops outside the layers)", "layers")
    seconds: float = doc("the sum of the ops' `seconds`", "s")
    seconds_per_layer: float = doc("`seconds` per layer (per op outside the layers)", "s")
    share: float = doc(
        "`seconds` over the phase's time; ops overlap (a prefetch runs beside a pass), so the shares of "
        "all roles can sum to more than 1",
        "0..1",
    )
    tensor_unit_seconds: float = doc("the sum of the ops' Tensor Unit time", "s")
    flops: float = doc("the ops' work", "FLOP")
    hbm_bytes: float = doc("the ops' HBM traffic", "B")
    intensity: float = doc("FLOPs per byte of HBM + DM traffic (on-chip reuse)", "FLOP/B")
    hbm_intensity: float = doc("FLOPs per byte of HBM traffic: the roofline's intensity", "FLOP/B")
    roofline_seconds: float = doc("the sum of the ops' rooflines", "s")
    bound: Bound = doc("as for the phases, for the role's summed time and roofline terms")


@dataclass(frozen=True, kw_only=True)
class AttentionNote(Record):
    """How one attention op of the prefill computes its softmax, and why."""

    op: str = doc("the attention's output value")
    form: Literal["plain", "online"] = doc("plain softmax, or online softmax over tiles")
    block: int | None = doc("online only: keys per tile", "keys", default=None)
    rows: int | None = doc("online only: queries per tile", "queries", default=None)
    tiles: int | None = doc(
        "online only: query x key tiles, before the blocks a mask hides are skipped", "tiles", default=None
    )
    reason: str = doc("the scores' size against the DM budget that chose the form")


@dataclass(frozen=True, kw_only=True)
class Memory(Record):
    """HBM capacity per chip."""

    hbm_capacity_bytes: int = doc("HBM on the chip", "B")
    weights_bytes: int = doc(
        "the chip's params (its shards under tensor parallelism), scales and RoPE tables included", "B"
    )
    kv_cache_bytes: int = doc(
        "the KV cache at the end of the generation (`prompt_len + gen_len - 1` positions, all sequences, "
        "the chip's KV heads)",
        "B",
    )
    kv_cache_bytes_per_token: float = doc("`kv_cache_bytes` per cached token of one sequence", "B")
    activations_bytes: int = doc("intermediates too large for DM, spilled to HBM", "B")
    free_bytes: int = doc("what is left", "B")


@dataclass(frozen=True, kw_only=True)
class StageRow(Record):
    """One pipeline stage: a tensor-parallel group of chips running consecutive layers."""

    stage: int = doc("stage index; stage 0 embeds, the last holds the LM head")
    first_layer: int = doc("its first decoder layer")
    last_layer: int = doc("its last decoder layer")
    weights_bytes: int = doc("params per chip of the stage", "B")
    kv_cache_bytes: int = doc("KV cache per chip of the stage at the end of the generation", "B")
    prefill_seconds: float = doc("one micro-batch's prefill on this stage alone", "s")
    prefill_busy_share: float = doc(
        "`micro_batches * prefill_seconds / ttft`: the share of the prefill the stage works; the rest it "
        "waits on the pipeline (fill, drain, slower stages)"
    )
    decode_seconds: float = doc("the first decode step on this stage alone", "s")
    decode_busy_share: float = doc("`decode_seconds / tpot`: the share of a decode step the stage works")


@dataclass(frozen=True, kw_only=True)
class Pipeline(Record):
    """Pipeline parallelism (`--pp`): how the layers and the time split over the stages."""

    tp: int = doc("tensor-parallel chips per stage")
    pp: int = doc("pipeline stages")
    micro_batches: int = doc(
        "micro-batches the prefill's batch splits into; a decode step sends the whole batch"
    )
    link_bytes_per_step: float = doc("hidden state one stage sends the next per decode step, per chip", "B")
    stages: tuple[StageRow, ...] = doc("per stage")


@dataclass(frozen=True, kw_only=True)
class ByPhase(Record):
    """One list per phase; `decode` only when there are decode steps."""

    def items(self) -> list[tuple[str, tuple]]:
        """(phase, rows) for the phases present, prefill first."""
        return [(f.name, rows) for f in fields(self) if (rows := getattr(self, f.name)) is not None]


@dataclass(frozen=True, kw_only=True)
class Units(ByPhase):
    """Per hardware unit, one list per phase; `decode` only when there are decode steps."""

    prefill: tuple[UnitRow, ...] = doc("the prefill's units")
    decode: tuple[UnitRow, ...] | None = doc("the decode steps' units", default=None)


@dataclass(frozen=True, kw_only=True)
class Layers(ByPhase):
    """Per decoder layer, one list per phase; `decode` only when there are decode steps."""

    prefill: tuple[LayerRow, ...] = doc("the prefill's layers")
    decode: tuple[LayerRow, ...] | None = doc("a decode step's layers", default=None)


@dataclass(frozen=True, kw_only=True)
class Ops(ByPhase):
    """Per fused op, every one, heaviest first, one list per phase; `decode` only when there are decode
    steps."""

    prefill: tuple[OpRow, ...] = doc("the prefill's ops")
    decode: tuple[OpRow, ...] | None = doc("a decode step's ops", default=None)


@dataclass(frozen=True, kw_only=True)
class OpRoles(ByPhase):
    """Per op role, heaviest first, one list per phase; `decode` only when there are decode steps."""

    prefill: tuple[OpRoleRow, ...] = doc("the prefill's op roles")
    decode: tuple[OpRoleRow, ...] | None = doc("a decode step's op roles", default=None)


@dataclass(frozen=True, kw_only=True)
class Attention(ByPhase):
    """The attention form of each layer; only the prefill chooses one."""

    prefill: tuple[AttentionNote, ...] = doc("one note per attention op, in layer order")


@dataclass(frozen=True, kw_only=True)
class Report(Record):
    """`tcpc simulate --json`: one generation of one model on one hardware spec."""

    schema: Literal["tcpc.report/1"] = doc("the schema version", default=SCHEMA)
    model: str = doc("model name (bundled name, checkpoint directory or config file stem)")
    family: str = doc(
        "the config's `model_type`, one of the supported families",
        values="tcp_compiler.frontend.families:FAMILIES",
    )
    hardware: HardwareSummary = doc("the spec")
    batch: int = doc("sequences per batch", "sequences")
    prompt_len: int = doc("prompt tokens per sequence", "tokens")
    gen_len: int = doc("generated tokens per sequence (the prefill produces the first)", "tokens")
    dtype: str = doc("precision mode (`--dtype`)", values="tcp_compiler.frontend.precision:PRECISIONS")
    kv_dtype: str = doc("the KV cache's dtype (`--kv-dtype`; by default the precision's)", default="")
    prefill: PrefillPhase = doc("the prompt phase")
    decode: DecodePhase = doc("the decode phase")
    ttft_seconds: float = doc("time to first token: the prefill's seconds", "s")
    throughput_tokens_per_s: float = doc(
        "`batch * gen_len / (ttft + every decode step)`, end to end", "tokens/s"
    )
    decode_tokens_per_s: float = doc(
        "`batch / tpot_seconds_mean`, the steady decode rate; 0 without decode steps", "tokens/s"
    )
    units: Units = doc("per hardware unit")
    layers: Layers = doc("per decoder layer")
    ops: Ops = doc("per fused op, every one, heaviest first")
    op_roles: OpRoles = doc(
        "per op role (one op across layers), heaviest first; the terminal and Markdown print the first "
        "`--top N`"
    )
    attention: Attention = doc("the prefill's attention form per layer")
    memory: Memory = doc("HBM capacity per chip (with `--pp`: of the fullest stage's chips)")
    pipeline: Pipeline | None = doc(
        "pipeline stages (`--pp`); absent without pipeline parallelism", default=None
    )
