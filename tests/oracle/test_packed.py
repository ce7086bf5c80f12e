"""Packed prefill (seed 002): several documents in one row, with per-token segment ids and
positions, give each document the logits and KV cache it gets when run on its own - whatever the
position scheme (RoPE, learned, ALiBi) or window."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.passes.online_softmax import online_softmax
from tests.oracle.tiny_models import build, save

F32 = PRECISIONS["f32"]
DOCS = [[5, 17, 3, 88], [42, 9], [7, 1, 60, 11, 12]]
ROWS = [[0, 1, 2], [2, 0, None]]  # row 1: two documents, then 5 filler tokens as a segment of their own
FAMILIES = ["llama", "gpt2", "bloom", "gemma3", "gpt_neox", "llama4"]  # RoPE, learned, ALiBi, windows,
# partial RoPE, chunks (starting at multiples of the chunk within each document)


def _pack(rows: list[list[int | None]]) -> tuple[dict[str, np.ndarray], list[list[tuple[int, int, int]]]]:
    """Feeds for a packed prefill and, per row, (document, start, end) of each real document."""
    seq = max(sum(len(DOCS[d]) for d in row if d is not None) for row in rows)
    ids, segment, position = (np.zeros((len(rows), seq), np.int32) for _ in range(3))
    ends = np.zeros((len(rows), len(rows[0])), np.int32)
    spans = []
    for b, row in enumerate(rows):
        start, spans_b = 0, []
        for n, d in enumerate(row):
            tokens = DOCS[d] if d is not None else [1] * (seq - start)
            end = start + len(tokens)
            ids[b, start:end], segment[b, start:end] = tokens, n
            position[b, start:end] = np.arange(len(tokens))
            ends[b, n] = end - 1
            if d is not None:
                spans_b.append((d, start, end))
            start = end
        assert start == seq  # the filler segment runs to the end
        spans.append(spans_b)
    return {"ids": ids, "segment": segment, "position": position, "ends": ends}, spans


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tmp_path_factory):
    return request.param, load_model(save(build(request.param), tmp_path_factory.mktemp(request.param)))


@pytest.mark.parametrize("online", [False, True])
def test_each_packed_document_gets_its_own_logits_and_cache(model, online: bool) -> None:
    name, loaded = model
    cfg, get = loaded.config, loaded.checkpoint.load
    feeds, spans = _pack(ROWS)
    built = build_prefill(cfg, F32, len(ROWS), feeds["ids"].shape[1], documents=len(ROWS[0]))
    graph = online_softmax(built.graph, 4) if online else built.graph
    assert graph["logits"].type == ir.TensorType.of(ir.F32, B=2, N=3, V=cfg.vocab)
    packed = ir.interpret(graph, feeds, built.bind(get))
    for b, row in enumerate(spans):
        for n, (d, start, end) in enumerate(row):
            single = build_prefill(cfg, F32, 1, len(DOCS[d]))
            alone = ir.interpret(single.graph, {"ids": np.array([DOCS[d]], np.int32)}, single.bind(get))
            where = f"{name} row {b} document {d}"
            np.testing.assert_allclose(
                packed["logits"][b, n], alone["logits"][0], atol=1e-5, rtol=0, err_msg=where
            )
            for i in range(len(cfg.layers)):
                for cache in (f"l{i}.k_cache", f"l{i}.v_cache"):
                    mine = packed[cache][b, :, start:end][:, _held(single.graph, cache, end - start)]
                    np.testing.assert_allclose(mine, alone[cache][0], atol=1e-5, rtol=0, err_msg=where)


def _held(graph: ir.Graph, cache: str, length: int) -> np.ndarray:
    """The positions a document's own cache holds, slot by slot: all of them, or for a sliding
    window W < length its ring (slot s: the last position p < length with p mod W = s)."""
    axis = graph[cache].type.names[2]
    window = graph.meta.kv_windows.get(axis)
    if window is None or length <= window:
        return np.arange(length)
    return (length - 1) - (length - 1 - np.arange(window)) % window


def test_packed_documents_attend_only_within_themselves(model) -> None:
    """Changing one document's tokens leaves every other document's logits exactly as they were."""
    name, loaded = model
    feeds, _ = _pack(ROWS)
    built = build_prefill(loaded.config, F32, 2, feeds["ids"].shape[1], documents=3)
    params = built.bind(loaded.checkpoint.load)
    before = ir.interpret(built.graph, feeds, params)["logits"]
    feeds["ids"][0, :4] = [9, 9, 9, 9]  # row 0's first document
    after = ir.interpret(built.graph, feeds, params)["logits"]
    assert not np.allclose(before[0, 0], after[0, 0])
    np.testing.assert_array_equal(before[0, 1:], after[0, 1:], err_msg=name)
    np.testing.assert_array_equal(before[1], after[1], err_msg=name)


def test_packing_takes_no_padding() -> None:
    cfg = load_model("llama-3.2-1b").config
    with pytest.raises(FrontendError, match="a packed prefill takes no padding"):
        build_prefill(cfg, F32, 1, 8, padded=True, documents=2)
