"""Sliding-window layers keep a ring of W slots: the cache stops growing, decode reads at most W
keys, and padded batches decode as each sequence does alone."""

from __future__ import annotations

import numpy as np

from tcp_compiler.frontend.builder import build_decode
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.tiny_models import build, save

F32 = PRECISIONS["f32"]


def test_padded_batch_through_the_ring_equals_each_prompt_alone(tmp_path) -> None:
    model = load_model(save(build("gemma3"), tmp_path))  # window 3, local and global layers
    prompts = [[5, 17, 3, 88, 42, 9, 11], [7, 2, 30, 4]]  # both longer than the window, unequal
    together = generate(model.config, model.checkpoint.load, prompts, F32, 5)
    for b, prompt in enumerate(prompts):
        alone = generate(model.config, model.checkpoint.load, [prompt], F32, 5)
        np.testing.assert_allclose(together.prefill_logits[b], alone.prefill_logits[0], atol=1e-5, rtol=0)
        for step, (a, c) in enumerate(zip(together.decode_logits, alone.decode_logits, strict=True)):
            np.testing.assert_allclose(a[b], c[0], atol=1e-5, rtol=0, err_msg=f"step {step}")


def test_windowed_caches_hold_at_most_the_window() -> None:
    cfg = load_model("gemma-3-1b").config
    windows = {layer.sliding_window for layer in cfg.layers} - {None}
    (window,) = windows
    graph = build_decode(cfg, PRECISIONS["bf16"], 1, 4095).graph
    sizes = {graph[name].type.shape[2] for name in graph.meta.kv_outputs}
    assert sizes == {window, 4096}
    assert graph.meta.kv_sizes(10_000) == {"P": 10_000, "Sk": 10_000, f"Pw{window}": window,
                                           f"Skw{window}": window}  # fmt: skip
    short = build_decode(cfg, PRECISIONS["bf16"], 1, 99).graph
    assert {short[name].type.shape[2] for name in short.meta.kv_outputs} == {100}


def test_padded_batch_through_the_chunk_ring_equals_each_prompt_alone(tmp_path) -> None:
    """Llama 4's chunks of 3 keep the same ring: a new chunk's first position sees itself only,
    whatever the slots still hold of the chunk before."""
    model = load_model(save(build("llama4"), tmp_path))
    prompts = [[5, 17, 3, 88, 42, 9, 11], [7, 2, 30, 4]]  # both longer than a chunk, unequal
    together = generate(model.config, model.checkpoint.load, prompts, F32, 5)
    for b, prompt in enumerate(prompts):
        alone = generate(model.config, model.checkpoint.load, [prompt], F32, 5)
        np.testing.assert_allclose(together.prefill_logits[b], alone.prefill_logits[0], atol=1e-5, rtol=0)
        for step, (a, c) in enumerate(zip(together.decode_logits, alone.decode_logits, strict=True)):
            np.testing.assert_allclose(a[b], c[0], atol=1e-5, rtol=0, err_msg=f"step {step}")


def test_chunked_caches_hold_at_most_the_chunk() -> None:
    """Scout's chunked layers cache one chunk (8192 slots) however long the context; its NoPE
    layers every position."""
    cfg = load_model("llama-4-scout-17b-16e-instruct").config
    (chunk,) = {layer.chunk for layer in cfg.layers} - {None}
    graph = build_decode(cfg, PRECISIONS["bf16"], 1, 9999).graph
    sizes = [graph[name].type.shape[2] for name in graph.meta.kv_outputs]
    assert sizes == [chunk if layer.chunk else 10_000 for layer in cfg.layers for _ in "kv"]
    assert graph.meta.kv_sizes(20_000)[f"Pw{chunk}"] == chunk
