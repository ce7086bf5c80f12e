"""The generate loop: prefill and decode graphs driven through the IR interpreter.

It exists to prove the graphs compute what the model computes (against transformers) and to
give users logits and tokens from real checkpoints; it is a reference, not a fast runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import ir
from tcp_compiler.errors import FrontendError, TcpcError
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.runtime.sampling import SamplingParams, StopState, sample


@dataclass
class Generation:
    prefill_logits: np.ndarray  # [B, V] at each prompt's last token
    decode_logits: list[np.ndarray] = field(default_factory=list)  # one [B, V] per decode step
    tokens: list[np.ndarray] = field(default_factory=list)  # one [B] per generated position

    @property
    def token_matrix(self) -> np.ndarray:
        return np.stack(self.tokens, axis=1) if self.tokens else np.zeros((len(self.prefill_logits), 0), int)


class NonFiniteError(TcpcError):
    """A run whose numbers went NaN or infinite (NaN weights, huge scales, extreme RoPE factors):
    names the step and the weight or the first op at fault, instead of sampling from NaN logits."""


def generate(
    config: ModelConfig,
    tensors: Callable[[str], np.ndarray],
    prompts: Sequence[Sequence[int]],
    precision: Precision,
    decode_steps: int,
    sampling: SamplingParams | None = None,
    chips: int = 1,
    pp: int = 1,
) -> Generation:
    """Prefill the (right-padded) prompts, then up to `decode_steps` decode steps.

    Stops early only when every sequence has met an EOS / stop id of `sampling`. With `chips` > 1
    the graphs are tensor-parallel and run SPMD, one rank per chip with its own weight shards and
    KV caches; every rank ends with the full logits, and rank 0's are the ones returned. With
    `pp` > 1 the layers split into pipeline stages (tcp_compiler.frontend.stages), each a group of
    `chips` ranks: a stage's ranks run their graph and pass the hidden state to the next stage's.
    """
    stages = pipeline_stages(config, pp)
    lengths = _check_prompts(config, prompts)
    sampling = sampling or SamplingParams(max_tokens=decode_steps + 1)
    rng = np.random.default_rng(sampling.seed)
    weights = _Memo(tensors)
    batch, seq = len(prompts), int(lengths.max())
    padded = bool((lengths != seq).any())
    ids = np.zeros((batch, seq), np.int32)
    for b, prompt in enumerate(prompts):
        ids[b, : len(prompt)] = prompt
    prefills = [build_prefill(config, precision, batch, seq, padded, chips, stage=s) for s in stages]
    feeds = {"ids": ids, **({"lengths": lengths} if padded else {})}
    outs = _run_stages(prefills, [[feeds] * chips for _ in stages], weights, "prefill")
    result = Generation(outs[-1][0]["logits"])
    history = [list(p) for p in prompts]
    stop = StopState(sampling, batch)
    token = _next(outs[-1][0]["logits"], sampling, history, rng, result, stop)
    sources = [m.graph for m in prefills]  # the graphs whose outputs hold each stage's caches
    for step in range(decode_steps):
        if stop.all_finished:
            break
        past = seq + step
        decodes = [build_decode(config, precision, batch, past, chips, stage=s) for s in stages]
        shared = {"ids": token[:, None].astype(np.int32), "pos": (lengths + step).astype(np.int32)}
        stage_feeds = [
            [{**shared, **_grown_caches(src, out)} for out in stage_outs]
            for src, stage_outs in zip(sources, outs, strict=True)
        ]
        outs = _run_stages(decodes, stage_feeds, weights, f"decode step {step + 1}")
        sources = [m.graph for m in decodes]
        result.decode_logits.append(outs[-1][0]["logits"])
        token = _next(outs[-1][0]["logits"], sampling, history, rng, result, stop)
    return result


def _check_prompts(config: ModelConfig, prompts: Sequence[Sequence[int]]) -> np.ndarray:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise FrontendError("every prompt needs at least one token id")
    for p in prompts:
        bad = [t for t in p if not 0 <= int(t) < config.vocab]
        if bad:
            raise FrontendError(f"prompt id {bad[0]} is outside the vocabulary [0, {config.vocab})")
    return np.array([len(p) for p in prompts], np.int32)


def _next(logits, sampling, history, rng, result: Generation, stop: StopState) -> np.ndarray:
    token = sample(logits, sampling, history, rng)
    for b, t in enumerate(token):
        history[b].append(int(t))
    result.tokens.append(token)
    stop.update(token)
    return token


def _grown_caches(graph: ir.Graph, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One rank's caches from the last step (the outputs `graph` declares as its cache) as the
    next decode's inputs (`{name}_in`), one slot longer along the KV axis (a sliding window's
    ring stops at its window: the next position overwrites the oldest slot); a cache without a
    KV axis (a Mamba layer's state and convolution window) passes as it is."""
    grown = {}
    meta = graph.meta
    for name in meta.kv_outputs:
        t = graph[name].type
        axis = next((i for i, a in enumerate(t.names) if a in meta.kv_axes), None)
        if axis is None:
            grown[f"{name}_in"] = out[name]
            continue
        size = t.shape[axis]
        more = int(size < meta.kv_windows.get(t.names[axis], size + 1))
        pad = [(0, more) if i == axis else (0, 0) for i in range(t.rank)]
        grown[f"{name}_in"] = np.pad(out[name], pad)
    return grown


def _run_stages(
    models: list[ModelGraph], feeds: list[list[dict]], weights: _Memo, step: str
) -> list[list[dict]]:
    """Each stage's ranks' outputs, stage after stage: rank r of a stage receives the hidden state
    rank r of the stage before sent. Feeds the graph does not take (ids after the first stage) are
    dropped. Every op's result and the logits must be finite (NonFiniteError names `step`)."""
    outs: list[list[dict]] = []
    sent = ""  # the previous stage's send of its hidden state
    for model, stage_feeds in zip(models, feeds, strict=True):
        taken = {n.name for n in model.graph.of_kind("input")}
        ranks = [{k: v for k, v in f.items() if k in taken} for f in stage_feeds]
        if outs:
            received = model.graph.meta.received  # the input that takes the hidden state
            ranks = [{**f, received: prev[sent]} for f, prev in zip(ranks, outs[-1], strict=True)]
        try:
            outs.append(_run(model, ranks, weights))
        except (ir.NonFiniteError, NonFiniteError) as e:
            raise NonFiniteError(f"{step}: {e}") from None
        sent = next((n.name for n in model.graph.of_kind("send")), "")
    logits = outs[-1][0].get("logits")
    if logits is not None and not np.isfinite(logits).all():
        raise NonFiniteError(f"{step}: the logits are not finite, so no token can be sampled from them")
    return outs


def _run(model: ModelGraph, feeds: list[dict], weights: _Memo) -> list[dict[str, np.ndarray]]:
    """Every rank's outputs, each rank bound to its own weight shards."""
    with np.errstate(all="ignore"):  # a table gone non-finite (extreme RoPE factors) is named as it runs
        params = [model.bind(weights, rank) for rank in range(model.chips)]
    return ir.interpret_spmd(model.graph, feeds, params, finite=True)


class _Memo:
    """Loads each checkpoint tensor once across all the graphs of one generation, and checks once
    that its values are finite (a NaN weight would otherwise surface as NaN logits)."""

    def __init__(self, load: Callable[[str], np.ndarray]) -> None:
        self.load, self.cache = load, {}

    def __call__(self, name: str) -> np.ndarray:
        if name not in self.cache:
            value = self.load(name)
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                bad = int(value.size - np.isfinite(value).sum())
                raise NonFiniteError(f"tensor {name!r}: {bad:,} of its {value.size:,} values are not finite")
            self.cache[name] = value
        return self.cache[name]
