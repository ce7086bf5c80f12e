"""Which decoder layers repeat: a graph cut into layer segments, and the smaller graph that stands
for it when the segments repeat with a period.

A model graph is a prefix (embedding, shared tables), one segment per decoder layer, and a suffix
(final norm, LM head). Segment j runs from the first value of layer j (graph.meta) to the first
of layer j + 1; it also holds the layer-less values made on the way (the layer's weights, a mask
or constant first needed there). Two segments are alike when their nodes match one for one in
kind, attributes and types, and each operand is the same local position, the same position in
the segment before, or the very same value elsewhere (a shared table). Layers alike with a period
p (1 for a uniform stack; 6 for 5 sliding-window layers and 1 global one) can be compiled once per
phase of the period and copied (simulator.targets.rngd.mapping.replicate).

The stand-in graph keeps the prefix, the first segments (the ones that differ, then two periods)
and the last segment and suffix as they are; the segments in between are left out and the last
segment reads the kept one before it in place of its own predecessor. This module decides only
from the graph's structure, never from config fields, so layer kinds it does not know (new
attention forms) either repeat or make it decline (None: compile every layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir import Graph, Node

# Declining costs nothing but time: replicate only when it leaves out enough layers to pay off.
MIN_LEFT_OUT = 2


@dataclass(frozen=True)
class LayerPeriod:
    """How a graph's layer segments repeat, and the stand-in graph's layout."""

    layers: int  # segments in the full graph
    base: int  # the layer id of segment 0 (a pipeline stage's graph starts at its first layer)
    period: int  # p: segment j + p is like segment j from `first_periodic` on
    first_periodic: int  # the first segment of the repeating run
    kept: int  # segments of the stand-in graph before its last one (layers 0 .. kept - 1)
    names: tuple[tuple[str, ...], ...]  # per segment of the full graph, its node names in order
    shared: frozenset[str]  # values several segments read: one name, never rebound
    reads: tuple[tuple[str, ...], ...]  # per segment, the values of the segment before it reads

    def source(self, layer: int) -> int:
        """The stand-in's layer whose program layer `layer` copies: itself when kept, the last
        layer for the last, else the layer of the same phase in the second kept period."""
        if layer < self.kept or layer == self.layers - 1:
            return layer
        last = self.kept - 1  # the second period's last layer
        return last - (last - layer) % self.period

    def _next(self, layer: int) -> int:
        """The segment after `layer` in the stand-in (the last kept one is followed by the last)."""
        return self.layers - 1 if layer == self.kept - 1 else layer + 1

    def reattached(self) -> tuple[dict[str, str], dict[str, str]]:
        """Names the stand-in gives in place of the full graph's, both ways round the left-out
        layers: the last kept layer's fused ops take in the last layer's first values (layer
        `kept`'s in full), and the last layer reads the last kept one (layer `layers - 2`)."""
        n = self.layers
        after = zip(self.names[n - 1], self.names[self.kept], strict=False)
        before = zip(self.names[self.kept - 1], self.names[n - 2], strict=True)
        read = set(self.reads[n - 1])
        return ({a: b for a, b in after if a not in self.shared},
                {a: b for a, b in before if b in read})  # fmt: skip

    def renames(self, source: int, layer: int) -> dict[str, str]:
        """Names of segment `source`'s values -> those of the same values in segment `layer` (alike):
        its own, the previous segment's it reads and the next one's that its fused ops take in
        (aligned from the start)."""
        out: dict[str, str] = dict(zip(self.reads[source], self.reads[layer], strict=True))
        if source + 1 < self.layers and layer + 1 < self.layers:
            pairs = zip(self.names[self._next(source)], self.names[self._next(layer)], strict=False)
            out.update((a, b) for a, b in pairs if a not in self.shared)
        own = zip(self.names[source], self.names[layer], strict=True)
        out.update((a, b) for a, b in own if a not in self.shared)
        return out

    def copied_notes(self, notes: list[dict]) -> list[dict]:
        """The stand-in's per-op notes (each names its op) and, for each left-out layer, those of
        the layer its program copies (`source`), their ops renamed: every layer's, as the full
        graph would give them (in no particular order)."""
        layer_of = {name: j for j in (*range(self.kept), self.layers - 1) for name in self.names[j]}
        by_layer: dict[int, list[dict]] = {}
        for note in notes:
            if note["op"] in layer_of:
                by_layer.setdefault(layer_of[note["op"]], []).append(note)
        copies = []
        for layer in range(self.kept, self.layers - 1):
            source = self.source(layer)
            names = self.renames(source, layer)
            copies += [{**note, "op": names.get(note["op"], note["op"])} for note in by_layer.get(source, ())]
        return notes + copies


def layer_period(graph: Graph) -> LayerPeriod | None:
    """The graph's layer period, when copying layers would leave out at least MIN_LEFT_OUT
    segments; None when it would not or the graph is not a clean run of layer segments."""
    segments = _segments(graph)
    if segments is None:
        return None
    bounds, suffix_start, base = segments
    n = len(bounds)
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    ends = [*bounds[1:], suffix_start]
    shared = _shared(graph, index, bounds)
    keys = [_signature(graph, index, shared, bounds, ends, j) for j in range(n)]
    best = None
    for p in range(1, n):
        # The repeating run starts after the last segment unlike the one p later, and not before
        # the second layer of each phase: a later pass (the attention rewrite's mask tiles) may
        # make shared values in the first layer of a phase, which the graph here does not show.
        unlike = [j for j in range(n - 1 - p) if keys[j] != keys[j + p]]
        first = max(unlike[-1] + 1 if unlike else 0, p)
        kept = _kept(first, p, n)
        if kept is not None and (best is None or kept < best[2]):
            best = (p, first, kept)
    if best is None:
        return None
    p, first, kept = best
    # The last layer may read the one before it; it and the suffix may read anything before the
    # repeating run, but no other layer of it (that value would be another layer's copy).
    tail = [(i, index[o]) for i in range(bounds[-1], len(graph.nodes)) for o in graph.nodes[i].operands]
    if any(bounds[first] <= r < (bounds[-2] if i < suffix_start else bounds[-1]) for i, r in tail):
        return None
    names = tuple(tuple(node.name for node in graph.nodes[s:e]) for s, e in zip(bounds, ends, strict=True))
    reads = tuple(
        tuple(dict.fromkeys(graph.nodes[bounds[j] + r[1]].name for k in keys[j] for r in k[3] if r[0] == "p"))
        for j in range(n)
    )
    return LayerPeriod(n, base, p, first, kept, names, frozenset(shared), reads)


def _kept(first: int, period: int, layers: int) -> int | None:
    """Layers kept before the last: up to two whole periods from `first`, then on to the first
    layer of the last one's phase, so the kept layer before the last is in the same phase as
    layer `layers - 2`. None when that leaves out too few layers."""
    kept = first + 2 * period
    while (layers - 1 - kept) % period:
        kept += 1
    return kept if layers - 1 - kept >= MIN_LEFT_OUT else None


def _segments(graph: Graph) -> tuple[list[int], int, int] | None:
    """(first node index of each layer's segment, first index of the suffix, the first layer's id);
    None unless the layers are consecutive, in order, and each one's values lie in its segment."""
    firsts: dict[int, int] = {}
    last_of: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        layer = graph.meta.layer_of(node.name)
        if layer >= 0:
            firsts.setdefault(layer, i)
            last_of[layer] = i
    n = len(firsts)
    base = min(firsts, default=0)
    if n < 3 or sorted(firsts) != list(range(base, base + n)):
        return None
    bounds = [firsts[base + j] for j in range(n)]
    if any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
        return None
    ends = [*bounds[1:], last_of[base + n - 1] + 1]
    if any(not bounds[j] <= last_of[base + j] < ends[j] for j in range(n)):
        return None
    return bounds, ends[-1], base


def _shared(graph: Graph, index: dict[str, int], bounds: list[int]) -> set[str]:
    """Values that segments other than their own and the next one read (constants, masks, tables
    first made in some layer): operands name them, not their position."""
    segment = np.searchsorted(np.array(bounds), np.arange(len(graph.nodes)), side="right") - 1
    shared = set()
    for i, node in enumerate(graph.nodes):
        for o in node.operands:
            if segment[index[o]] < segment[i] - 1:
                shared.add(o)
    return shared


def _signature(
    graph: Graph, index: dict[str, int], shared: set[str], bounds: list[int], ends: list[int], j: int
) -> tuple:
    """Segment j's structure: per node its kind, attributes, type and operands, each as a local
    position ("s"), a position in segment j - 1 ("p"), or a name (a value shared by segments)."""
    start, end = bounds[j], ends[j]
    before = bounds[j - 1] if j else None
    out = []
    for node in graph.nodes[start:end]:
        refs = []
        for o in node.operands:
            i = index[o]
            if o in shared:
                refs.append(("a", o))
            elif i >= start:
                refs.append(("s", i - start))
            elif before is not None and i >= before:
                refs.append(("p", i - start))
            else:
                refs.append(("a", o))
        out.append((node.kind, _attrs(node), node.type, tuple(refs)))
    return tuple(out)


def _attrs(node: Node) -> tuple:
    return tuple(sorted(node.attrs.items()))


def stand_in(graph: Graph, period: LayerPeriod) -> Graph | None:
    """The graph with layers kept .. layers - 2 left out: the last layer's segment reads layer
    kept - 1 where it read layer layers - 2 (the same phase, so the same structure). None when
    the last layer reads a value of a left-out layer otherwise."""
    n = period.layers
    before_last = dict(zip(period.names[n - 2], period.names[period.kept - 1], strict=True))
    dropped = {name for j in range(period.kept, n - 1) for name in period.names[j]}
    last = set(period.names[n - 1])
    out = Graph(graph.name)
    for node in graph.nodes:
        if node.name in dropped:
            continue
        if node.name in last and any(o in before_last for o in node.operands):
            operands = tuple(before_last.get(o, o) for o in node.operands)
            node = Node(node.name, node.kind, operands, node.attrs, node.type, node.line)
        if any(o not in out for o in node.operands):
            return None
        out.append(node)
    out.outputs = [o for o in graph.outputs if o not in dropped]
    out.param_values = graph.param_values
    out.meta = graph.meta.copy()
    out.meta.kv_outputs = tuple(o for o in graph.meta.kv_outputs if o not in dropped)
    return out
