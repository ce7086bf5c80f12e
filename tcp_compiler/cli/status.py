"""What a long `tcpc simulate` is doing, on standard error: a status line for each stage (on a
terminal only, and gone once done), and a note up front when the prefill's attention plan means
a graph large enough that compiling it takes minutes; and the model's position limit, which
`tcpc simulate` and `tcpc run` apply alike."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.status import Status

from tcp_compiler.frontend.builder import check_positions, past_context
from tcp_compiler.frontend.config import ModelConfig

# Online-softmax tiles in the whole prefill above which its compile takes minutes: each tile adds
# about twenty graph ops that are built, fused and scheduled one by one (docs/performance.md).
LARGE_PLAN_TILES = 20_000


class StageStatus:
    """A transient spinner naming the current stage, shown only when standard error is a terminal."""

    def __init__(self) -> None:
        self.console = Console(stderr=True)
        self.status: Status | None = None

    def __call__(self, what: str) -> None:
        if not self.console.is_terminal:
            return
        if self.status is None:
            self.status = self.console.status(what)
            self.status.start()
        else:
            self.status.update(what)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


def large_plan_note(notes: list[dict]) -> str | None:
    """A one-line warning when the prefill's attention plan has more than LARGE_PLAN_TILES tiles."""
    online = [n for n in notes if n.get("form") == "online"]
    tiles = sum(n["tiles"] for n in online)
    if tiles <= LARGE_PLAN_TILES:
        return None
    return (
        f"note: the prefill's attention runs as online softmax over up to {tiles:,} tiles in {len(online)} "
        f"layers; compiling a graph this size takes minutes (a shorter --prompt-len is quicker)"
    )


def check_length(cfg: ModelConfig, positions: int) -> Callable[[], None]:
    """A generation of `positions` positions refused where the model cannot run it (learned
    positions past their table); else what to say once it has run: a note on standard error when it
    passes the context the model's positions are made for (it ran, as transformers runs it). Said
    after the run, so a run refused for another reason still ends in one line."""
    check_positions(cfg, positions)
    note = past_context(cfg, positions)

    def say() -> None:
        if note is not None:
            print(note, file=sys.stderr)

    return say
