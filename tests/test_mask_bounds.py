"""Blocks of a mask proven all-False are all-False, and for masks of iotas alone every such block
is found: checked against the mask evaluated by the interpreter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ir
from ir import I32, Graph
from tcp_compiler.frontend.builder.masks import PrefillMasks
from tcp_compiler.frontend.config import Window
from tcp_compiler.passes.mask_bounds import all_masked
from tcp_compiler.passes.online_softmax import online_softmax
from tests.test_online_softmax import TINY, _compare

SEQ = 12


def _mask_graph(window: int | None, padded: bool, packed: bool) -> tuple[Graph, str, dict]:
    g = Graph("masks")
    lengths = g.input("lengths", ir.TensorType.of(I32, B=2)) if padded else None
    segment = g.input("segment", ir.TensorType.of(I32, B=2, S=SEQ)) if packed else None
    consts = iter(range(10_000))

    def const(value, dtype):
        return g.const(value, ir.TensorType.of(dtype), name=f"c{next(consts)}")

    mask = PrefillMasks(g, const, SEQ, lengths, segment)(window)
    g.set_outputs(mask)
    rng = np.random.default_rng(0)
    feeds = {"lengths": np.array([SEQ, 5])} if padded else {}
    if packed:
        feeds["segment"] = np.sort(rng.integers(0, 3, (2, SEQ)), axis=1)
    return g, mask.name, feeds


def _blocks(size: int, step: int):
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]


WINDOWS = [None, Window(3), Window(5), Window(3, chunked=True), Window(5, chunked=True)]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize(("padded", "packed"), [(False, False), (True, False), (False, True)])
def test_skipped_blocks_are_masked_everywhere(window, padded, packed) -> None:
    g, name, feeds = _mask_graph(window, padded, packed)
    values = ir.interpret(g, feeds, {})[name]
    sq, sk = g[name].type.index("Sq"), g[name].type.index("Sk")
    found = 0
    for rows, keys in itertools.product(_blocks(SEQ, 4), _blocks(SEQ, 3)):
        block = np.take(np.take(values, range(*rows), axis=sq), range(*keys), axis=sk)
        skipped = all_masked(g, name, {"Sq": rows, "Sk": keys})
        assert not (skipped and block.any()), (rows, keys)
        if not padded and not packed:  # an iota-only mask is understood completely
            assert skipped == (not block.any()), (rows, keys)
        found += skipped
    assert found > 0  # the causal upper triangle at least


def test_blocks_of_earlier_chunks_are_skipped() -> None:
    """Chunks of 4 over 12 positions, blocks of 4 x 4: each query block sees its own key block
    only (the ones before are earlier chunks, the ones after the future)."""
    g, name, _ = _mask_graph(Window(4, chunked=True), False, False)
    spans = _blocks(SEQ, 4)
    seen = {(r, k) for r, k in itertools.product(range(3), range(3))
            if not all_masked(g, name, {"Sq": spans[r], "Sk": spans[k]})}  # fmt: skip
    assert seen == {(0, 0), (1, 1), (2, 2)}


def test_causal_prefill_skips_about_half_the_blocks() -> None:
    from tcp_compiler.frontend.builder import build_prefill
    from tcp_compiler.frontend.config import RawConfig
    from tcp_compiler.frontend.families import read_model_config
    from tcp_compiler.frontend.precision import PRECISIONS

    cfg = read_model_config(RawConfig({**TINY, "layer_types": ["full_attention"] * 3}, "tiny.json"), "tiny")
    built = build_prefill(cfg, PRECISIONS["f32"], 1, 16)
    blocked = online_softmax(built.graph, 4, rows=("Sq", 4))
    scores = sum(n.kind == "einsum" and n.name.endswith(".scores") for n in blocked.nodes)
    assert scores == 3 * (1 + 2 + 3 + 4)  # per layer: query tile t sees key blocks 0..t, not all 4
    _compare(built, {"ids": np.arange(16)[None] % 64}, 4, np.random.default_rng(1), ("Sq", 4))
