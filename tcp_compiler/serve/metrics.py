"""Request-level metrics of a serving run, defined as vLLM's serving benchmark defines them; the
report that carries them is built by tcp_compiler.report.serve_build.

- TTFT: first token time - arrival (queueing included); TPOT: (e2e - TTFT) / (output - 1), for
  requests of more than one output token; e2e: last token time - arrival.
- Throughput: tokens over the run's duration, from the first arrival to the last completion.
- Goodput: requests per second that met every SLO given (DistServe's definition).
- Power: each iteration's energy over its time, per chip (the simulator's energy model).
- Bound: each iteration's time beside an independent floor from the model alone, the roofline
  (tcp_compiler.analysis.roofline) of the weights any forward must read, read once (of a MoE
  layer the top-k experts: every token may pick the same ones), and 2 x active parameters x
  tokens FLOPs: their ratio shows how far the compiled programs are from the machine's limits.
"""

from __future__ import annotations

import numpy as np

from simulator.targets import energy_of
from tcp_compiler.analysis.config_floor import head_bytes, matmul_weight_bytes, matmul_weights
from tcp_compiler.analysis.roofline import Roofline
from tcp_compiler.serve.server import ServeResult


def latencies(result: ServeResult) -> dict[str, np.ndarray]:
    seqs = result.sequences
    arrival = np.array([s.arrival_s for s in seqs])
    first = np.array([s.first_token_s for s in seqs])
    finish = np.array([s.finish_s for s in seqs])
    outputs = np.array([s.request.output_len for s in seqs])
    several = outputs > 1
    return {
        "ttft": first - arrival,
        "e2e": finish - arrival,
        "tpot": (finish - first)[several] / (outputs[several] - 1),
        "tpot_all": np.where(several, (finish - first) / np.maximum(outputs - 1, 1), 0.0),
    }


def duration(result: ServeResult) -> float:
    start = min(s.arrival_s for s in result.sequences)
    return max(s.finish_s for s in result.sequences) - start  # type: ignore[type-var,operator]


def model_bound_cycles(result: ServeResult) -> np.ndarray:
    """Per iteration, the independent floor (module docstring), in cycles of one chip: compute at
    the faster peak of the operand and activation dtypes, the weights at sustained HBM bandwidth."""
    hw, it, cfg, chips = result.hardware, result.iterations, result.config, result.replica_chips
    tokens = it.array("decodes") + it.array("prefill_tokens")
    params = matmul_weights(cfg)[0] / chips  # weights each token multiplies by
    weight_bytes = (matmul_weight_bytes(cfg, result.precision) + head_bytes(cfg, result.precision)) / chips
    roofline = Roofline.of(hw, result.precision.operand, result.precision.act)
    compute, memory, _ = roofline.terms(2.0 * params * tokens, weight_bytes, 0.0)
    return np.maximum(compute, memory) * hw.chip.clock_hz


def iteration_energy(result: ServeResult) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: its energy on every chip of its replica (its work's actions on each
    tensor-parallel chip, running power on every chip) and its average power per chip."""
    point, it = energy_of(result.hardware).point(result.hardware), result.iterations
    chips = result.replica_chips
    seconds = it.array("duration_s")
    joules = it.array("dynamic_joules") * (chips // result.pp) + chips * point.running_power_w * seconds
    power = np.divide(joules, seconds * chips, out=np.zeros_like(joules), where=seconds > 0)
    return joules, power
