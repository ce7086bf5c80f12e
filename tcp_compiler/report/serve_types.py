"""The serving report's types (`tcpc serve --json`): the schema in code, as tcp_compiler.report.types
is the simulation report's. docs/report-schema.md is generated from both; `ServeReport.to_dict()` is
the JSON. Metrics follow vLLM's serving benchmark (tcp_compiler.serve.metrics defines them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tcp_compiler.records import Record, doc
from tcp_compiler.report.types import RANKS_PER_CARD


@dataclass(frozen=True, kw_only=True)
class ServeRun(Record):
    """What was served, and how: the options of the run."""

    nulls: ClassVar[bool] = True

    model: str = doc("model name")
    hardware: str = doc("spec name")
    chips: int = doc("chips in all: data-parallel replicas x tensor-parallel chips x pipeline stages")
    ranks_per_card: int = doc(RANKS_PER_CARD, default=1)
    pp: int = doc("pipeline stages (`--pp`)")
    dtype: str = doc("precision mode (`--dtype`)", values="tcp_compiler.frontend.precision:PRECISIONS")
    kv_dtype: str = doc("the KV cache's dtype")
    scheduler: str = doc("batching policy (`--scheduler`)")
    max_batch_tokens: int = doc("tokens per iteration (`--max-batch-tokens`)", "tokens")
    max_seqs: int = doc("sequences running at once (`--max-seqs`)", "sequences")
    attention: str = doc("decode attention over each sequence's length (`paged`) or the longest (`padded`)")
    shapes: str = doc("static-shape buckets: batch, prefill and context ladders (`--batch-shapes` ...)",
                      default="")  # fmt: skip
    prefix_cache: bool = doc("the shared prefix's KV reused (`--prefix-cache`)", default=False)
    shared_prefix: int = doc(
        "tokens every prompt shares at its start (`--shared-prefix`)", "tokens", default=0
    )
    arrivals: str = doc("`poisson`, `at once`, `closed loop` or `trace`")
    rate_per_s: float | None = doc("Poisson arrival rate; null otherwise", "requests/s")
    concurrency: int | None = doc("closed-loop clients; null otherwise", "clients")
    trace_file: str | None = doc("the requests' file; null otherwise")
    prompt_len: str | None = doc("prompt length distribution (`--prompt-len`); null with a trace file")
    gen_len: str | None = doc("output length distribution (`--gen-len`); null with a trace file")
    seed: int = doc("seed of lengths and arrivals")


@dataclass(frozen=True, kw_only=True)
class Percentiles(Record):
    """A latency over the requests: its mean and percentiles; zeros for an empty sample."""

    count: int = doc("requests in the sample", "requests")
    mean: float = doc("mean", "s")
    p50: float = doc("median", "s")
    p90: float = doc("90th percentile", "s")
    p99: float = doc("99th percentile", "s")


@dataclass(frozen=True, kw_only=True)
class Goodput(Record):
    """Requests that met every SLO given (DistServe's definition); with none given, every request."""

    nulls: ClassVar[bool] = True

    slo_ttft_s: float | None = doc("the TTFT SLO (`--slo-ttft`); null without one", "s")
    slo_tpot_s: float | None = doc("the TPOT SLO (`--slo-tpot`); null without one", "s")
    requests_meeting_slo: int = doc("requests within every SLO", "requests")
    fraction: float = doc("their share of the requests", "0..1")
    requests_per_s: float = doc("`requests_meeting_slo / duration_s`", "requests/s")
    output_tokens_per_s: float = doc("their output tokens over `duration_s`", "tokens/s")


@dataclass(frozen=True, kw_only=True)
class KvCache(Record):
    """Where the KV block count comes from, per chip, and how many blocks the run used."""

    hbm_bytes: int = doc("HBM on the chip", "B")
    weight_bytes: int = doc("the compiled weights on one chip", "B")
    activation_bytes: int = doc("the largest spill of the programs the run may execute", "B")
    kv_bytes: int = doc("what is left for the KV cache", "B")
    kv_bytes_per_token: int = doc("every layer's K and V of one token, on one chip", "B")
    state_bytes_per_sequence: int = doc(
        "every Mamba layer's recurrent state and convolution window of one sequence, on one chip (0 "
        "without Mamba layers): whole blocks of its own while the sequence runs; a model without a "
        "per-token cache has blocks of one such state",
        "B",
    )
    state_blocks: int = doc("blocks one sequence's state takes", "blocks")
    block_size: int = doc("tokens per block (`--block-size`)", "tokens")
    blocks: int = doc("blocks that fit in `kv_bytes`", "blocks")
    tokens: int = doc("`blocks * block_size`", "tokens")
    peak_blocks_used: int = doc("most blocks in use at an iteration", "blocks")
    mean_blocks_used: float = doc("blocks in use, weighted by iteration time", "blocks")


@dataclass(frozen=True, kw_only=True)
class Series(Record):
    """A quantity at iteration starts, every n-th iteration so that at most 2,000 points are kept."""

    time_s: tuple[float, ...] = doc("iteration start", "s")
    value: tuple[int, ...] = doc("the quantity then")
    every_nth_iteration: int = doc("iterations between two points")


@dataclass(frozen=True, kw_only=True)
class CostGrids(Record):
    """Grid steps of the shapes an iteration is costed at (1: exact)."""

    kv: int = doc("decode KV length step (`--kv-bucket`)", "tokens")
    batch: int = doc("decode batch step (`--batch-bucket`)", "sequences")
    tokens: int = doc("prefill tokens step (`--tokens-bucket`)", "tokens")


@dataclass(frozen=True, kw_only=True)
class CostCache(Record):
    """How much compiling and simulating the run needed, and its grids."""

    engine_runs: int = doc("programs the engine timed")
    decode_templates: int = doc("decode programs compiled")
    prefill_compiles: int = doc("prefill programs compiled")
    lookups: int = doc("iteration costs asked of the cache")
    buckets: CostGrids = doc("the grids")


@dataclass(frozen=True, kw_only=True)
class RequestRow(Record):
    """One request as it was served."""

    id: int = doc("request index, in arrival order")
    arrival_s: float = doc("arrival time", "s")
    prompt_len: int = doc("prompt tokens", "tokens")
    output_len: int = doc("output tokens", "tokens")
    first_token_s: float = doc("time its first token was out", "s")
    finish_s: float = doc("time its last token was out", "s")
    preemptions: int = doc("times it was preempted (recompute)")


@dataclass(frozen=True, kw_only=True)
class Iterations(Record):
    """Every iteration's batch and time, one list per column, in iteration order."""

    start_s: tuple[float, ...] = doc("start", "s")
    duration_s: tuple[float, ...] = doc("time it took", "s")
    cycles: tuple[float, ...] = doc("its programs' cycles, at the padded shapes", "cycles")
    device_s: tuple[float, ...] = doc("device time, the padding and descriptor issue left out", "s")
    padding_s: tuple[float, ...] = doc("device time the static shapes' padding costs", "s")
    descriptor_s: tuple[float, ...] = doc("device time issuing its paged-KV descriptors adds", "s")
    schedule_s: tuple[float, ...] = doc("host scheduling on the critical path", "s")
    prepare_s: tuple[float, ...] = doc("host input preparation on the critical path", "s")
    launch_s: tuple[float, ...] = doc("kernel launches (`system.kernel_launch_s` per program)", "s")
    sample_s: tuple[float, ...] = doc("host sampling and output processing", "s")
    padded_tokens: tuple[int, ...] = doc("prefill tokens and decode batch slots added by padding", "tokens")
    padded_kv_tokens: tuple[int, ...] = doc("KV positions its decode read past the caches (context padding)",
                                            "tokens")  # fmt: skip
    kv_descriptors: tuple[int, ...] = doc("paged-KV DMA descriptors its decode read, one chip",
                                          "descriptors")  # fmt: skip
    flops: tuple[float, ...] = doc("its work", "FLOP")
    hbm_bytes: tuple[float, ...] = doc("its HBM traffic", "B")
    joules: tuple[float, ...] = doc("its energy, every chip: the actions of its work plus running power", "J")
    power_w: tuple[float, ...] = doc("its average power per chip while it ran", "W")
    decodes: tuple[int, ...] = doc("sequences decoding one token", "sequences")
    prefill_tokens: tuple[int, ...] = doc("prompt tokens prefilled", "tokens")
    prefill_sequences: tuple[int, ...] = doc("sequences prefilling", "sequences")
    kv_blocks_used: tuple[int, ...] = doc("KV blocks in use (on its replica, with `--dp`)", "blocks")
    preemptions: tuple[int, ...] = doc("preemptions made while planning it")


@dataclass(frozen=True, kw_only=True)
class ServeTime(Record):
    """Where the time goes: the iterations' time split into device work, the device time the static
    shapes' padding and the paged-KV descriptors' issue cost, and the host's parts on the critical
    path (tcp_compiler.serve.host); the parts sum to `busy_s`."""

    busy_s: float = doc("every iteration's time, summed", "s")
    device_s: float = doc("programs at the sequences' own shapes (with pipeline stages, waits included)", "s")
    padding_s: float = doc("what padding up to the static shapes adds", "s")
    descriptor_s: float = doc(
        "what issuing paged-KV descriptors adds beyond their transfer (`dma.issue_cycles`)", "s"
    )
    schedule_s: float = doc("host scheduling (`host.schedule_s` + per sequence)", "s")
    prepare_s: float = doc("host input preparation (`host.prepare_s` + per token)", "s")
    launch_s: float = doc("kernel launches (`system.kernel_launch_s` per program)", "s")
    sample_s: float = doc("host sampling (`host.sample_s` + per sampled sequence)", "s")
    host_overlap: bool = doc("scheduling and preparation overlap the device run before (`--host-overlap`)")
    padded_tokens: int = doc("prefill tokens and decode batch slots added by padding, in all", "tokens")
    padded_kv_tokens: int = doc("KV positions decodes read past their caches, padded to the context bucket",
                                "tokens")  # fmt: skip
    kv_descriptors_per_decode: float = doc(
        "paged-KV DMA descriptors a decode iteration reads on one chip, mean", "descriptors"
    )


@dataclass(frozen=True, kw_only=True)
class ServeEnergy(Record):
    """Energy and power of the run, every chip counted (docs/energy.md): each iteration's actions
    from the programs that timed it, running power while iterations run, idle power between them."""

    chips: int = doc("chips counted: every chip (replicas x tensor-parallel chips x pipeline stages)")
    joules: float = doc("first arrival to last completion, every chip", "J")
    average_power_w: float = doc("`joules` over `duration_s`, per chip", "W")
    peak_power_w: float = doc("the highest iteration's average power, per chip", "W")
    idle_power_w: float = doc("a chip's power with nothing running and the model resident", "W")
    joules_per_request: float = doc("`joules` over the requests served", "J/request")
    output_tokens_per_joule: float = doc("output tokens per joule", "tokens/J")
    tdp_w: float = doc("a chip's thermal design power (`chip.tdp_w`)", "W")
    over_tdp_iterations: int = doc("iterations whose power per chip exceeds `tdp_w`")
    power_cap_w: float | None = doc("`--power-cap`: the most an iteration may draw per chip (absent without)",
                                    "W", default=None)  # fmt: skip
    clock_hz: float | None = doc("with `--power-cap`: the clock the run used (DVFS; below the spec's when "
                                 "the cap lowered it)", "Hz", default=None)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ReplicaRow(Record):
    """One data-parallel replica's share of the run."""

    requests: int = doc("requests the router sent it", "requests")
    busy_s: float = doc("its iterations' time", "s")


@dataclass(frozen=True, kw_only=True)
class DataParallel(Record):
    """`--dp R`: R replicas of the tp x pp layout, each with its own KV cache and scheduler."""

    replicas: int = doc("data-parallel replicas (`--dp`)")
    router: str = doc("which replica an arriving request joins (`--router`)",
                      values="tcp_compiler.serve.routers:ROUTERS")  # fmt: skip
    chips_per_replica: int = doc("tensor-parallel chips x pipeline stages of one replica")
    per_replica: tuple[ReplicaRow, ...] = doc("each replica's requests and busy time")


@dataclass(frozen=True, kw_only=True)
class MaxRate(Record):
    """`--max-rate`: the highest Poisson rate whose latency percentiles meet the SLOs; the rest of
    the report is the run at that rate (tcp_compiler/serve/max_rate.py)."""

    nulls: ClassVar[bool] = True

    rate_per_s: float = doc("the highest rate found meeting the SLOs", "requests/s")
    failing_rate_per_s: float = doc("the lowest rate found failing them: the bracket's top", "requests/s")
    margin: float = doc("`failing_rate_per_s` / `rate_per_s` - 1: how far the true limit may lie above "
                        "`rate_per_s`", "fraction")  # fmt: skip
    percentile: float = doc("the percentile the SLOs bound (`--slo-percentile`)")
    slo_ttft_s: float | None = doc("`--slo-ttft`; null without", "s")
    slo_tpot_s: float | None = doc("`--slo-tpot`; null without", "s")
    ttft_s: float = doc("TTFT at the percentile at `rate_per_s`, warm-up left out", "s")
    tpot_s: float = doc("TPOT at the percentile at `rate_per_s`, warm-up left out", "s")
    requests: int = doc("requests each run serves: the warm-up, then those measured", "requests")
    warmup_requests: int = doc("the first requests, left out of the percentiles", "requests")
    simulations: int = doc("serving runs the search took")
    capacity_bound: bool = doc("the SLOs hold up to the server's capacity (its completion rate with "
                               "every request waiting): `rate_per_s` is that capacity and a higher rate "
                               "fails as overload")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ServeReport(Record):
    """`tcpc serve --json`: one serving run of a stream of requests."""

    run: ServeRun | None = doc(
        "the run's options; absent where no command line gave them (sweeps)", default=None
    )
    requests_completed: int = doc("requests served", "requests")
    duration_s: float = doc("first arrival to last completion", "s")
    throughput_output_tokens_per_s: float = doc("output tokens over `duration_s`", "tokens/s")
    throughput_total_tokens_per_s: float = doc("prompt + output tokens over `duration_s`", "tokens/s")
    throughput_requests_per_s: float = doc("requests over `duration_s`", "requests/s")
    ttft_seconds: Percentiles = doc("time to first token: first token time - arrival (queueing included)")
    tpot_seconds: Percentiles = doc(
        "time per output token: (e2e - TTFT) / (output tokens - 1), requests of more than one output token"
    )
    e2e_seconds: Percentiles = doc("end to end: last token time - arrival")
    goodput: Goodput = doc("requests meeting `--slo-ttft` and `--slo-tpot` (each optional)")
    preemptions: int = doc("preemptions in all")
    preemption_mode: str = doc("how a preempted sequence resumes: `recompute`")
    iterations: int = doc("iterations run")
    mixed_iterations: int = doc("iterations running both prefill and decode programs")
    busy_fraction: float = doc("time iterations ran over `duration_s` (per replica, with `--dp`)", "0..1")
    time: ServeTime = doc("where the iterations' time goes: device, padding and host work")
    model_bound_ratio: float = doc(
        "sum of iteration times over the sum of an independent bound per iteration: the larger of the "
        "weights any forward must read (a MoE layer's top-k experts) read once at sustained HBM bandwidth "
        "and 2 x active parameters x tokens at peak compute "
        "(tcp_compiler/analysis/roofline.py)",
        "x",
    )
    kv_cache: KvCache = doc("the block arithmetic and the blocks used")
    kv_blocks_over_time: Series = doc("KV blocks used at iteration starts")
    cost_cache: CostCache = doc("engine runs and compiles the run needed")
    requests: tuple[RequestRow, ...] = doc("every request")
    per_iteration: Iterations = doc("every iteration")
    energy: ServeEnergy = doc("energy and power")
    max_rate: MaxRate | None = doc("with `--max-rate`: the search's answer (absent otherwise)", default=None)
    data_parallel: DataParallel | None = doc("with `--dp` above 1: the replicas' shares (absent otherwise)",
                                             default=None)  # fmt: skip
