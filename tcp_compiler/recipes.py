"""The seam between the generic compiler and a target's recipe book: what the pipeline, the
generation driver, serving and the reports ask a target to do with a graph (place, schedule, cost
decode steps, join pipeline stages), and how they find the book of a spec's target.

Generic modules call `recipes(spec)` and never import a target's package: the spec's class names
its target (simulator.targets.target_of), and the target names its recipe book's module
(simulator.target.Target.recipes), which satisfies `Recipes`. The types below are what generic code
reads of the book's results; the book's own classes carry more.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol, cast

from simulator.errors import HardwareError
from simulator.targets import target_of

if TYPE_CHECKING:
    from ir import Graph
    from simulator.program import Program, ProgramBlock
    from simulator.spec import Spec
    from simulator.timeline import Timeline
    from tcp_compiler.errors import CapacityError


class Footprint(Protocol):
    """HBM use of one chip for a phase, by part, in bytes."""

    weights: int
    kv_cache: int
    activations: int  # the peak of intermediates spilled to HBM at once
    available: int

    @property
    def needed(self) -> int: ...

    @property
    def free(self) -> int: ...

    @property
    def fits(self) -> bool: ...


class Steps(Protocol):
    """Programs of one decode graph at any KV length, from one compiled template."""

    graph: Graph

    def at(self, length: int) -> Program: ...

    def blocks(self, lengths: range) -> Iterator[ProgramBlock]: ...


class Recipes(Protocol):
    """A target's recipe book, as the generic compiler calls it. `period` values are the book's
    own (a repeating layer period it found); `tiles` its attention tiling; `chunks` its scans'
    chunk lengths; `links` its list of which stage block waits for which; `policy` its mapping
    policy (`DEFAULT_POLICY` unless the options say otherwise: CompileOptions.policy_on)."""

    DEFAULT_POLICY: Any
    SENT: str  # the kind of op that ends an earlier pipeline stage's graph (its one send)

    def plan_attention(self, graph: Graph, hw: Spec, policy: Any) -> tuple[list[dict], Any]: ...

    def rewrite_attention(self, graph: Graph, tiles: Any) -> Graph: ...

    def plan_scans(self, graph: Graph, hw: Spec, policy: Any) -> tuple[list[dict], Any]: ...

    def rewrite_scans(self, graph: Graph, chunks: Any) -> Graph: ...

    def plan_token_tiles(
        self, graph: Graph, hw: Spec, policy: Any, period: Any | None = None
    ) -> list[dict]: ...

    def capacity(self, graph: Graph, weights: Iterable[str], hw: Spec, policy: Any, *,
                 ignore: frozenset[str] = ..., spills: Graph | None = ...) -> Footprint: ...  # fmt: skip

    def check_capacity(self, cap: Footprint, what: str, hw: Spec, at_least: bool = ...) -> None: ...

    def Capacity(self, weights: int, kv_cache: int, activations: int, available: int) -> Footprint: ...  # noqa: N802

    def capacity_error(self, cap: Footprint, what: str, hw: str, at_least: bool = ..., advice: str = ...,
                       **fits: object) -> CapacityError: ...  # fmt: skip

    def layer_period(self, graph: Graph) -> Any | None: ...

    def stand_in(self, graph: Graph, period: Any) -> Graph | None: ...

    def replicate(self, program: Program, period: Any, origins: Mapping[str, str]) -> Program | None: ...

    def schedule(self, graph: Graph, hw: Spec, policy: Any) -> Program: ...

    def DecodeSteps(self, graph: Graph, hw: Spec, policy: Any) -> Steps: ...  # noqa: N802 (the book's class)

    def resize_graph(self, graph: Graph, sizes: dict[str, int]) -> Graph: ...

    def in_turn(self, stages: int) -> list[Any]: ...

    def micro_batched(self, stages: int, micro_batches: int) -> list[Any]: ...

    def chain(self, stages: Sequence[Program], links: Sequence[Any],
              received: Sequence[str | None]) -> Program: ...  # fmt: skip

    def chain_block(self, stages: Sequence[ProgramBlock], links: Sequence[Any],
                    received: Sequence[str | None]) -> ProgramBlock: ...  # fmt: skip

    def handoffs(self, program: Program, timeline: Timeline, stages: int) -> tuple[int, ...]: ...


def recipes(spec: Spec) -> Recipes:
    """The recipe book of the spec's target (imported on first use)."""
    target = target_of(spec)
    if not target.recipes:
        raise HardwareError(f"{spec.path}: the {target.name} target has no recipe book to compile with")
    return cast(Recipes, import_module(target.recipes))
