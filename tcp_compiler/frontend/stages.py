"""Pipeline parallelism: which decoder layers each stage of `pp` holds.

A stage is a group of `tp` chips running its layers tensor-parallel; stage 0 also embeds the
tokens and the last stage holds the final norm and LM head. Each stage is its own graph: it takes
the previous stage's hidden state as an input and hands its own to the next stage with a `send`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.config import ModelConfig


@dataclass(frozen=True)
class Stage:
    index: int
    count: int
    layers: range  # the decoder layers this stage runs (global indices: names stay l{i}.*)

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


def whole_model(cfg: ModelConfig) -> Stage:
    return Stage(0, 1, range(len(cfg.layers)))


def pipeline_stages(cfg: ModelConfig, pp: int) -> list[Stage]:
    """`pp` stages of consecutive layers, as even as the count allows; the earlier stages take the
    extra layers, since the last one also runs the LM head."""
    n = len(cfg.layers)
    if pp < 1:
        raise OptionError("{pp} must be at least 1, got {value}", value=pp)
    if pp > n:
        raise OptionError("{model}: {pp} {value} exceeds its {n} layers (each stage needs one)",
                          model=cfg.name, value=pp, n=n)  # fmt: skip
    base, extra = divmod(n, pp)
    stages, start = [], 0
    for s in range(pp):
        stop = start + base + (s < extra)
        stages.append(Stage(s, pp, range(start, stop)))
        start = stop
    return stages
