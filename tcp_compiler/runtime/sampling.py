"""Host-side sampling: last-position logits -> next token, matching Hugging Face's logits processors.

The chain mirrors what `transformers` applies in `generate()`: repetition penalty, then temperature,
top-k, top-p and min-p, each with `min_tokens_to_keep=1`. It is pure numpy so the runtime does not
depend on torch; tests/test_sampling.py checks it against transformers itself.

Scores are computed in float64. Where Hugging Face's result depends on the order of tied scores
(top-p cuts through a run of equal scores, and torch.sort is not stable), the lower token id is kept,
so the kept count matches Hugging Face and greedy decoding equals the argmax of the penalized logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SamplingError", "SamplingParams", "StopState", "make_rng", "process_logits", "sample"]


class SamplingError(ValueError):
    """Bad sampling parameters or inputs; the message is one line naming the culprit."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding settings; the defaults turn every processor off and decode greedily."""

    temperature: float = 0.0  # 0 means greedy (argmax); > 0 samples
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0.0 = off
    repetition_penalty: float = 1.0  # 1.0 = off
    max_tokens: int = 16
    eos_ids: tuple[int, ...] = ()  # generation of a sequence ends after emitting one of these
    stop_ids: tuple[int, ...] = ()  # like eos_ids but the stop token is not kept in the output
    seed: int | None = None

    def __post_init__(self) -> None:
        """Rejects out-of-range values up front, so a bad request fails before any device work."""
        _require("temperature", self.temperature, _is_real, lambda v: v >= 0, ">= 0 (0 = greedy)")
        _require("top_k", self.top_k, _is_int, lambda v: v >= 0, "an integer >= 0 (0 = off)")
        _require("top_p", self.top_p, _is_real, lambda v: 0 < v <= 1, "in (0, 1] (1 = off)")
        _require("min_p", self.min_p, _is_real, lambda v: 0 <= v <= 1, "in [0, 1] (0 = off)")
        _require("repetition_penalty", self.repetition_penalty, _is_real, lambda v: v > 0, "> 0 (1 = off)")
        _require("max_tokens", self.max_tokens, _is_int, lambda v: v >= 0, "an integer >= 0")
        _check_ids("eos_ids", self.eos_ids)
        _check_ids("stop_ids", self.stop_ids)
        overlap = sorted(set(self.eos_ids) & set(self.stop_ids))
        if overlap:
            raise SamplingError(f"eos_ids and stop_ids must be disjoint, both contain {overlap}")

    @property
    def greedy(self) -> bool:
        """Temperature 0 selects argmax decoding."""
        return self.temperature == 0


def _is_real(value: object) -> bool:
    """A finite int or float; bools, strings, NaN and inf are rejected."""
    number = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    return number and bool(np.isfinite(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _require(
    field: str, value: object, kind: Callable[[object], bool], in_range: Callable[[Any], bool], expected: str
) -> None:
    """Raises the one-line error naming the field; the type check runs first so NaN or "1" fail cleanly."""
    if not (kind(value) and in_range(value)):
        raise SamplingError(f"{field} must be {expected}, got {value!r}")


def _check_ids(field: str, ids: object) -> None:
    ok = isinstance(ids, tuple) and all(_is_int(i) and i >= 0 for i in ids)
    if not ok:
        raise SamplingError(f"{field} must be a tuple of non-negative token ids, got {ids!r}")


def make_rng(params: SamplingParams) -> np.random.Generator:
    """The generator the generate loop should thread through `sample`, seeded from the request."""
    return np.random.default_rng(params.seed)


# --------------------------------------------------------------------------- processing


def process_logits(
    logits: np.ndarray, params: SamplingParams, history: Sequence[Sequence[int]]
) -> np.ndarray:
    """[B, V] float logits -> [B, V] float64 processed scores (-inf for filtered tokens).

    Hugging Face's order: repetition penalty on the ids in history[b] (the prompt and the tokens
    generated so far; ids >= V are ignored as Hugging Face does), then temperature (skipped when
    greedy), top-k, top-p and min-p. Every filter keeps at least the best token.
    """
    scores = _as_scores(logits)
    if len(history) != scores.shape[0]:
        raise SamplingError(f"history has {len(history)} sequences but logits has {scores.shape[0]} rows")
    if params.repetition_penalty != 1.0:
        scores = _repetition_penalty(scores, history, params.repetition_penalty)
    if not params.greedy and params.temperature != 1.0:
        scores = scores / params.temperature
    if params.top_k > 0:
        scores = _top_k(scores, params.top_k)
    if params.top_p < 1.0:
        scores = _top_p(scores, params.top_p)
    if params.min_p > 0.0:
        scores = _min_p(scores, params.min_p)
    return scores


def _as_scores(logits: np.ndarray) -> np.ndarray:
    """Float64 copy of the logits; NaN, +inf or an all -inf row would make every later step meaningless."""
    scores = np.array(logits, dtype=np.float64)
    if scores.ndim != 2:
        raise SamplingError(f"logits must have shape [B, V], got shape {scores.shape}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise SamplingError("logits must not contain NaN or +inf")
    dead = np.flatnonzero(~np.isfinite(scores).any(axis=-1))
    if dead.size:
        raise SamplingError(f"logits row {int(dead[0])} has no finite entry")
    return scores


def _repetition_penalty(scores: np.ndarray, history: Sequence[Sequence[int]], penalty: float) -> np.ndarray:
    """Each seen id is penalized once: positive scores divided, negative ones multiplied (CTRL paper)."""
    out = scores.copy()
    vocab = scores.shape[1]
    for b, ids in enumerate(history):
        seen = np.unique(np.asarray(ids, dtype=np.int64))
        if seen.size and seen[0] < 0:
            raise SamplingError(f"history[{b}] contains the negative token id {int(seen[0])}")
        seen = seen[seen < vocab]
        values = out[b, seen]
        out[b, seen] = np.where(values < 0, values * penalty, values / penalty)
    return out


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Drops scores below the k-th largest; ties with it all survive, so more than k may remain."""
    vocab = scores.shape[1]
    k = min(k, vocab)
    kth = np.partition(scores, vocab - k, axis=-1)[:, vocab - k, None]
    return np.where(scores < kth, -np.inf, scores)


def _top_p(scores: np.ndarray, top_p: float) -> np.ndarray:
    """Drops the least likely tokens whose cumulative mass (from the bottom) stays <= 1 - top_p.

    Sums ascending like Hugging Face so the float rounding at the cut matches; the best token is
    always kept (min_tokens_to_keep=1).
    """
    order = _ascending_lower_id_last(scores)
    cumulative = np.cumsum(_softmax(np.take_along_axis(scores, order, axis=-1)), axis=-1)
    drop_sorted = cumulative <= 1 - top_p
    drop_sorted[:, -1] = False
    drop = np.empty_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=-1)
    return np.where(drop, -np.inf, scores)


def _ascending_lower_id_last(scores: np.ndarray) -> np.ndarray:
    """Argsort ascending; among equal scores the lower id sorts later, so it is cut last."""
    vocab = scores.shape[1]
    return vocab - 1 - np.argsort(scores[:, ::-1], axis=-1, kind="stable")


def _min_p(scores: np.ndarray, min_p: float) -> np.ndarray:
    """Drops tokens whose probability is below min_p times the top probability."""
    probs = _softmax(scores)
    drop = probs < min_p * probs.max(axis=-1, keepdims=True)
    drop[np.arange(len(drop)), probs.argmax(axis=-1)] = False
    return np.where(drop, -np.inf, scores)


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- selection


def sample(
    logits: np.ndarray,
    params: SamplingParams,
    history: Sequence[Sequence[int]],
    rng: np.random.Generator,
) -> np.ndarray:
    """[B, V] -> [B] int64 next tokens: argmax when greedy, else a draw from softmax(processed scores).

    Greedy decoding consumes nothing from `rng`; sampling consumes one uniform per row.
    """
    scores = process_logits(logits, params, history)
    if params.greedy:
        return np.argmax(scores, axis=-1).astype(np.int64)
    return _draw(_softmax(scores), rng)


def _draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Inverse-CDF draw per row; clamped so rounding can never pick a zero-probability tail token."""
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random(len(probs)) * cdf[:, -1]
    picked = (cdf <= u[:, None]).sum(axis=-1)
    last_live = probs.shape[1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=-1)
    return np.minimum(picked, last_live).astype(np.int64)


# --------------------------------------------------------------------------- stopping


class StopState:
    """Per-sequence finish flags and kept tokens, so the generate loop stays a few lines.

    A sequence finishes after an eos id (kept), a stop id (dropped) or `max_tokens` generated tokens
    (stop tokens count towards the limit). Tokens passed for finished sequences are ignored.
    """

    def __init__(self, params: SamplingParams, batch_size: int) -> None:
        self._eos = frozenset(params.eos_ids)
        self._stop = frozenset(params.stop_ids)
        self._max_tokens = params.max_tokens
        self._generated = np.zeros(batch_size, dtype=np.int64)
        self._finished = np.full(batch_size, params.max_tokens == 0)
        self._kept: list[list[int]] = [[] for _ in range(batch_size)]

    def update(self, tokens: np.ndarray | Sequence[int]) -> None:
        """Records one decode step's [B] tokens."""
        tokens = np.asarray(tokens)
        if tokens.shape != self._finished.shape:
            raise SamplingError(f"tokens must have shape {self._finished.shape}, got {tokens.shape}")
        for b in np.flatnonzero(~self._finished):
            self._step(int(b), int(tokens[b]))

    def _step(self, b: int, token: int) -> None:
        self._generated[b] += 1
        if token in self._stop:
            self._finished[b] = True
            return
        self._kept[b].append(token)
        if token in self._eos or self._generated[b] >= self._max_tokens:
            self._finished[b] = True

    @property
    def finished(self) -> np.ndarray:
        """[B] bool copy, so callers cannot un-finish a sequence by accident."""
        return self._finished.copy()

    @property
    def all_finished(self) -> bool:
        return bool(self._finished.all())

    def kept(self, b: int) -> list[int]:
        """Output tokens of sequence b: eos kept, stop token dropped, nothing after the finish."""
        return list(self._kept[b])
