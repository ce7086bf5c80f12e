"""What would make a generation that does not fit HBM fit, each way out tried through the same
accounting as the check that refused it (generation.plan.needs), never guessed from a ratio.

The ways tried, each alone: the largest batch that fits; fp8 weights; an fp8 KV cache; more
tensor-parallel chips (`tp`) or pipeline stages (`pp`), the fewest that fit; a prefill chunk
(sequences per prefill program, as `prefill_chunk` tokens); for one phase alone (`tcpc compile`),
the batch, precisions and `tp`. A way that cannot be built (heads that
do not split over the chips, more stages than layers) or does not fit is not offered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import SimulatorError
from simulator.spec import Spec
from tcp_compiler.errors import CapacityError, TcpcError
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import KV_DTYPES, PRECISIONS, Precision
from tcp_compiler.generation.plan import default_micro_batches, lower_decode, needs, stage_options
from tcp_compiler.pipeline import CompileOptions, prefill_bound
from tcp_compiler.recipes import Footprint, recipes

MAX_CHIPS = 64  # the most chips (tp x pp) a way out may ask for
LOW_PRECISION = "fp8"  # the weights and KV cache dtype offered


@dataclass(frozen=True)
class Asked:
    """The options of a generation whose HBM use is asked for."""

    config: ModelConfig
    hw: Spec  # the chip (any system size: runs are sized by tp x pp)
    precision: Precision
    batch: int
    prompt_len: int
    final_positions: int  # the last decode step's cache
    tp: int
    pp: int = 1
    prefill_batch: int | None = None  # sequences per prefill program (None: the batch over its micro-batches)
    phase: str | None = None  # one phase alone (`tcpc compile`): its own use at `prompt_len`

    def need(self) -> Footprint:
        """HBM per chip of the fullest stage (generation.plan.needs), or of the phase alone (as
        the pipeline checks it: a prefill before its attention rewrite)."""
        hw = self.hw.with_chips(self.tp * self.pp)
        if self.phase is not None:
            options = CompileOptions(batch=self.batch, chips=self.tp)
            if self.phase == "prefill":
                return prefill_bound(self.config, hw, self.precision, self.prompt_len, options)
            return lower_decode(self.config, hw, self.precision, options, self.prompt_len).capacity
        prefill = self.prefill_batch or self.batch // default_micro_batches(self.batch, self.pp)
        options = CompileOptions(batch=self.batch, chips=self.tp)
        found = [needs(self.config, hw, self.precision, o, self.prompt_len, self.final_positions, prefill)[2]
                 for o in stage_options(self.config, options, self.pp)]  # fmt: skip
        return max(found, key=lambda c: c.needed)

    def fits(self) -> bool:
        try:
            return self.need().fits
        except (TcpcError, SimulatorError):  # a way that cannot be built is no way out
            return False


def ways_out(run: Asked) -> dict[str, object]:
    """The options that make `run` fit, each changed alone (module docstring): option -> value."""
    found: dict[str, object] = {}
    batch = _largest(1, run.batch - 1, lambda b: replace(run, batch=b, prefill_batch=None).fits())
    if batch:
        found["batch"] = batch
    if run.precision.weight.bits > 8 and run.precision.name != LOW_PRECISION:
        kv = next(k for k, v in KV_DTYPES.items() if v == run.precision.kv)
        weights = replace(PRECISIONS[LOW_PRECISION], kv=KV_DTYPES[kv])
        if replace(run, precision=weights).fits():
            found["dtype"] = LOW_PRECISION
    kv = replace(run.precision, kv=KV_DTYPES[LOW_PRECISION])
    if run.precision.kv.bits > 8 and replace(run, precision=kv).fits():
        found["kv_dtype"] = LOW_PRECISION
    for option in ("tp",) if run.phase else ("tp", "pp"):
        now = getattr(run, option)
        count = now * 2
        while run.tp * run.pp // now * count <= MAX_CHIPS:
            if replace(run, **{option: count}).fits():
                found[option] = count
                break
            count *= 2
    if run.phase:
        return found
    sequences = run.prefill_batch or run.batch // default_micro_batches(run.batch, run.pp)
    chunk = _largest(1, sequences - 1, lambda d: run.batch % d == 0 and replace(run, prefill_batch=d).fits())
    if chunk:
        found["prefill_chunk"] = chunk * run.prompt_len
    return found


def _largest(lo: int, hi: int, ok) -> int | None:
    """The largest n in [lo, hi] with ok(n), assuming ok holds up to some n and not above (the
    use grows with each of these options); None when none does."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def with_ways_out(error: CapacityError, run: Asked) -> CapacityError:
    """`error` (the figures the check that refused `run` found) with what would fit, each option
    named for the caller to spell (the CLI: --batch 32)."""
    found = ways_out(run)
    if found:
        advice = "; it fits with " + " or ".join(f"{{{o}}} {{{o}_fits}}" for o in found)
    else:
        advice = ("; it fits with none of a smaller {batch}, fp8 weights or KV cache, a {prefill_chunk} or "
                  f"up to {MAX_CHIPS} chips ({{tp}} x {{pp}})")  # fmt: skip
    v = error.values
    book = recipes(run.hw)
    cap = book.Capacity(v["weights"], v["kv_cache"], v["activations"], v["available"])
    return book.capacity_error(cap, v["what"], v["hw"], v["needs"] != "needs", advice,
                          **{f"{o}_fits": value for o, value in found.items()})  # fmt: skip
