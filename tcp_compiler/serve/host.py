"""The host's part of an iteration: what the serving runtime does around each device run.

Per iteration the host schedules the batch (a fixed part plus one per running sequence), prepares
its inputs (fixed plus one per scheduled token: ids, positions, block tables), launches the
programs (`system.kernel_launch_s` each) and samples the tokens (fixed plus one per sequence that
gets a token). Values: the spec's [host] table. `tcpc simulate` and `tcpc serve` both take an
iteration's host work from here.

Overlap: a decode step's inputs are the tokens the step before sampled, so by default the host
work runs between device runs (serial). With overlap, the host schedules and prepares iteration
k + 1 while the device runs k (vLLM's async scheduling; the vendor runtime queues up to
`npu_queue_limit` iterations): only what the device run before does not cover is exposed; the
launch and the sampling stay serial.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import Spec

HOST_PARTS = ("schedule", "prepare", "launch", "sample")  # in the order they run


@dataclass(frozen=True)
class HostWork:
    """Seconds of each part of one iteration's host work (HOST_PARTS)."""

    schedule: float
    prepare: float
    launch: float
    sample: float

    @property
    def total(self) -> float:
        return self.schedule + self.prepare + self.launch + self.sample

    def exposed(self, hidden_under: float) -> HostWork:
        """The parts left on the critical path when scheduling and preparing overlap a device run of
        `hidden_under` seconds (0: nothing overlaps): those two shrink by the same fraction."""
        ahead = self.schedule + self.prepare
        keep = max(ahead - hidden_under, 0.0) / ahead if ahead > 0 else 0.0
        return HostWork(self.schedule * keep, self.prepare * keep, self.launch, self.sample)

    def as_dict(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in HOST_PARTS}


def host_work(hw: Spec, sequences: int, tokens: int, sampled: int, programs: int) -> HostWork:
    """An iteration of `sequences` running sequences and `tokens` scheduled tokens, `sampled` of
    which sequences get a token, running `programs` device programs."""
    h = hw.host
    return HostWork(
        schedule=h.schedule_s + h.schedule_per_sequence_s * sequences,
        prepare=h.prepare_s + h.prepare_per_token_s * tokens,
        launch=hw.system.kernel_launch_s * programs,
        sample=h.sample_s + h.sample_per_sequence_s * sampled,
    )
