"""The simulation report's types: the schema in code. Each field carries its unit and meaning, from
which docs/report-schema.md is generated (tcp_compiler.report.schema); `Report.to_dict()` is the
`--json` output. A field that is None is absent from the JSON."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from tcp_compiler.analysis.limiter import Limiter
from tcp_compiler.analysis.op_roles import OpRoleRow
from tcp_compiler.analysis.roofline import Bound
from tcp_compiler.records import Record, doc

SCHEMA = "tcpc.report/1"


# One home for what `ranks_per_card` means, in both reports' schemas.
RANKS_PER_CARD = (
    "tensor-parallel ranks each card is split into (`system.pe_partitions`); above 1, `chips` counts "
    "ranks and every per-chip figure is one rank's (its share of the card)"
)


@dataclass(frozen=True, kw_only=True)
class HardwareSummary(Record):
    """The hardware spec as the report used it."""

    name: str = doc("spec name (`rngd`, `rngd-4`, or the file's)")
    chips: int = doc(
        "chips in all: tensor-parallel chips x pipeline stages; the figures describe one chip of each "
        "tensor-parallel group, summed over the stages (`pipeline`)"
    )
    ranks_per_card: int = doc(RANKS_PER_CARD, default=1)
    clock_hz: float = doc("chip clock", "Hz")
    peak_flops_per_s: float = doc(
        "contraction-engine peak per chip for this precision's operand dtype (int weights are "
        "dequantised, so `w4` runs at the bf16 rate)",
        "FLOP/s",
    )
    hbm_bytes_per_s: float = doc("sustained HBM bandwidth per chip (the rooflines use it)", "B/s")
    area_mm2: float = doc("die area per chip as the spec's area model adds it up (`tcpc hw show`)", "mm^2")
    assumed: tuple[str, ...] = doc("spec keys whose values are assumptions, not published facts")


@dataclass(frozen=True, kw_only=True)
class PrefillPhase(Record):
    """The prompt phase: one program over the whole prompt."""

    cycles: int = doc("simulated cycles of the prefill program", "cycles")
    seconds: float = doc("`cycles / clock_hz + padding_seconds + launch_seconds + host_seconds`", "s")
    launch_seconds: float = doc("the kernel launch overhead included (`system.kernel_launch_s`)", "s")
    host_seconds: float = doc(
        "the host's scheduling, input preparation and sampling included (the spec's [host] table)", "s"
    )
    padding_seconds: float = doc(
        "device time of padding the batch and prompt up to the runtime's static shapes included "
        "(`--batch-shapes`, `--prefill-shapes`; 0 with `none`)", "s", default=0.0,
    )
    padded_tokens: int = doc("prompt tokens the padding adds (batch slots x padded prompt - batch x prompt)",
                             "tokens", default=0)  # fmt: skip
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
    chunks: int | None = doc(
        "with `--prefill-chunk`: the prefill programs run in turn, each over whole prompts of its "
        "share of the batch (each reads the weights again; the figures above are all of them)",
        "programs",
        default=None,
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
    host_seconds: float | None = doc(
        "per step: the host's scheduling, input preparation and sampling included (the spec's [host] "
        "table; the kernel launch besides)", "s", default=None,
    )
    padding_seconds: float | None = doc(
        "per step, mean: device time of padding the batch and the context up to the runtime's static "
        "shapes included (`--batch-shapes`, `--context-shapes`; 0 with `none`)", "s", default=None,
    )
    descriptor_seconds: float | None = doc(
        "per step, mean: issuing the paged-KV DMA descriptors beyond their transfer included "
        "(`dma.issue_cycles`, `--block-size`)", "s", default=None,
    )
    kv_descriptors_per_step: float | None = doc(
        "paged-KV DMA descriptors a step reads on one chip (one per block of K or V per layer), mean",
        "descriptors", default=None,
    )
    padded_sequences: int | None = doc("batch slots the batch padding adds to every step", "sequences",
                                       default=None)  # fmt: skip
    padded_kv_tokens_per_step: float | None = doc(
        "KV positions a step reads past the caches (context padding, all sequences), mean", "tokens",
        default=None,
    )
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
        "`chip_link`, `pe_path` (reductions between the ranks of a card split into PEs)"
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
    joules: float = doc("the layer's dynamic energy on one chip (per step for decode)", "J")
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
    seconds: float = doc(
        "the time at least one of the op's commands is under way (a weight fetched early counts for "
        "its fetch, not for the ops that run before the pass reads it)",
        "s",
    )
    tensor_unit_seconds: float = doc("time on the Tensor Unit's main context", "s")
    flops: float = doc("the op's work", "FLOP")
    hbm_bytes: float = doc("the op's HBM traffic", "B")
    dm_bytes: float = doc("the op's data-memory (SRAM) traffic", "B")
    link_bytes: float = doc("the op's chip-link traffic", "B")
    intensity: float = doc("FLOPs per byte of HBM + DM traffic (on-chip reuse)", "FLOP/B")
    hbm_intensity: float = doc("FLOPs per byte of HBM traffic: the roofline's intensity", "FLOP/B")
    roofline_seconds: float = doc("as for the phases, for this op", "s")
    bound: Bound = doc("as for the phases, for this op")
    joules: float = doc("the op's dynamic energy on one chip (docs/energy.md)", "J")


@dataclass(frozen=True, kw_only=True)
class AttentionNote(Record):
    """How one attention op (or selective scan) of the prefill mixes the sequence, and why."""

    op: str = doc("the attention's (or scan's) output value; tiled: the run's first op")
    form: Literal["plain", "online", "chunked", "sequential", "tiled"] = doc(
        "plain softmax, online softmax over tiles; a scan chunked (SSD) or run step by step; tiled: a run of "
        "token-separable ops whose activations DM holds a token tile at a time"
    )
    block: int | None = doc("online: keys per tile; chunked: positions per chunk; tiled: tokens per tile (at "
                            "the fewest tiles)", "positions", default=None)
    rows: int | None = doc("online only: queries per tile", "queries", default=None)
    tiles: int | None = doc(
        "online: query x key tiles, before the blocks a mask hides are skipped; chunked: chunks; tiled: the "
        "fewest token tiles (the schedule may cut more)",
        "tiles",
        default=None,
    )
    reason: str = doc("the sizes against the DM budget that chose the form")
    role: str = doc("a scan's op role (its work: roles `role` and `role.*`); '' for attention", default="")


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
    kv_cache_bytes_per_token: float = doc(
        "what grows with the context: `kv_cache_bytes` less the sequences' `state_bytes_per_sequence`, per "
        "cached token of one sequence",
        "B",
    )
    state_bytes_per_sequence: int = doc(
        "cache one sequence holds at any context length: every Mamba layer's recurrent state and convolution "
        "window (0 without Mamba layers), included in `kv_cache_bytes`",
        "B",
    )
    activations_bytes: int = doc("intermediates too large for DM, spilled to HBM", "B")
    free_bytes: int = doc("what is left", "B")
    unrun_params: int = doc(
        "parameters the checkpoint holds that the generation neither runs nor holds in HBM (MiMo's "
        "multi-token-prediction layers); not in `weights_bytes`",
        "params",
        default=0,
    )
    unrun_weights_bytes: int = doc(
        "`unrun_params` in the precision's weight format, the whole model's (not per chip): what "
        "loading them would add",
        "B",
        default=0,
    )


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
class UnitEnergy(Record):
    """Dynamic energy spent in one unit or memory during a phase, every chip counted."""

    unit: str = doc("a unit of the target, or the memory (`dm`, `hbm`) an access energy is spent in")
    joules: float = doc("per phase (decode: per step, mean)", "J")


@dataclass(frozen=True, kw_only=True)
class PhaseEnergy(Record):
    """One phase's energy, every chip counted: dynamic (from the activity its time comes from) plus
    static (idle power throughout, the active baseline while the device runs)."""

    joules: float = doc("the phase (decode: per step, mean)", "J")
    dynamic_joules: float = doc("the actions' part of `joules`", "J")
    average_power_w: float = doc("per chip: `joules` over the phase's seconds and the chips", "W")
    joules_per_token: float = doc("prefill: per prompt token; decode: per generated token", "J/token")
    by_unit: tuple[UnitEnergy, ...] = doc("dynamic energy per unit and memory")


@dataclass(frozen=True, kw_only=True)
class Energy(Record):
    """Energy and power of the run (docs/energy.md: the model, its values and their sources)."""

    chips: int = doc("chips counted: every chip of the system (tensor-parallel chips x pipeline stages)")
    prefill_joules: float = doc("the prefill, every chip", "J")
    decode_joules_per_step: float = doc("a decode step, mean, every chip; 0 without decode steps", "J")
    average_power_w: float = doc("the whole run (prefill and every decode step), per chip", "W")
    tokens_per_joule: float = doc(
        "generated tokens (`batch * gen_len`) per joule of the whole run", "tokens/J"
    )
    joules: float = doc("the whole run, every chip", "J")
    idle_power_w: float = doc("a chip's power with nothing running and the model resident", "W")
    tdp_w: float = doc("a chip's thermal design power (`chip.tdp_w`)", "W")
    over_tdp: tuple[str, ...] = doc("phases whose average power per chip exceeds `tdp_w`")
    clock_hz: float = doc("the clock the run used (below the spec's when `--power-cap` throttled it)", "Hz")
    voltage_v: float = doc("the voltage at that clock", "V")
    prefill: PhaseEnergy = doc("the prefill")
    decode: PhaseEnergy | None = doc("a decode step (mean); absent without decode steps", default=None)


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
    energy: Energy = doc("energy and power")
