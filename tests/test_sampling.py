"""Host sampling chain: checked against transformers' own logits processors, then behaviour tests.

transformers and torch are imported unguarded on purpose: without them the oracle cannot run, and
that must fail the suite rather than skip it. The oracle runs in float64 (the dtype process_logits
computes in) so threshold decisions compare like for like.
"""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from tcp_compiler.runtime.sampling import (
    SamplingError,
    SamplingParams,
    StopState,
    make_rng,
    process_logits,
    sample,
)

B, V = 3, 50
ORACLE_SEEDS = range(60)
KINDS = ("normal", "ties", "flat", "huge", "tiny", "masked")

ORACLE_PARAMS = {
    "rep_penalty": SamplingParams(repetition_penalty=1.3),
    "rep_reward": SamplingParams(repetition_penalty=0.7),
    "temperature_cold": SamplingParams(temperature=0.35),
    "temperature_hot": SamplingParams(temperature=1.8),
    "top_k_1": SamplingParams(temperature=1.0, top_k=1),
    "top_k_7": SamplingParams(temperature=1.0, top_k=7),
    "top_k_over_vocab": SamplingParams(temperature=1.0, top_k=V + 10),
    "top_p_0.9": SamplingParams(temperature=1.0, top_p=0.9),
    "top_p_0.5": SamplingParams(temperature=1.0, top_p=0.5),
    "top_p_tiny": SamplingParams(temperature=1.0, top_p=1e-6),
    "top_p_underflow": SamplingParams(temperature=1.0, top_p=1e-300),
    "min_p_0.05": SamplingParams(temperature=1.0, min_p=0.05),
    "min_p_0.5": SamplingParams(temperature=1.0, min_p=0.5),
    "min_p_1": SamplingParams(temperature=1.0, min_p=1.0),
    "all": SamplingParams(temperature=0.7, top_k=20, top_p=0.8, min_p=0.05, repetition_penalty=1.2),
    "all_hot": SamplingParams(temperature=2.5, top_k=40, top_p=0.95, min_p=0.02, repetition_penalty=0.8),
    "all_tight": SamplingParams(temperature=0.2, top_k=3, top_p=0.3, min_p=0.6, repetition_penalty=2.0),
    "greedy_filters": SamplingParams(top_k=5, top_p=0.6, min_p=0.1, repetition_penalty=1.5),
}


def random_logits(seed: int, kind: str) -> np.ndarray:
    """[B, V] float32 logits of one flavour: continuous, heavily tied, flat, extreme scale, or masked."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        x = rng.normal(0.0, rng.choice([0.5, 2.0, 6.0]), (B, V))
    elif kind == "ties":
        x = rng.integers(-3, 4, (B, V)) * rng.choice([0.5, 1.0])
    elif kind == "flat":
        x = np.full((B, V), rng.normal())
        x[1, rng.integers(V)] += 1.0  # one leader over a flat field
        x[2, rng.choice(V, 5, replace=False)] += 2.0  # a tied group of leaders
    elif kind == "huge":
        x = rng.normal(0.0, 1e4, (B, V))
    elif kind == "tiny":
        x = rng.normal(0.0, 1e-3, (B, V))
    else:
        x = rng.normal(0.0, 3.0, (B, V))
        x[rng.random((B, V)) < 0.3] = -np.inf
        x[:, 0] = rng.normal(size=B)  # every row keeps a finite entry
    return x.astype(np.float32)


def random_history(seed: int) -> list[list[int]]:
    """Ragged histories with repeats and a few ids past the vocabulary (ignored, as in transformers)."""
    rng = np.random.default_rng(10_000 + seed)
    return [rng.integers(0, V + 5, rng.integers(0, 13)).tolist() for _ in range(B)]


def hf_chain(params: SamplingParams) -> LogitsProcessorList:
    """The transformers processors process_logits stands for, in generate()'s order."""
    chain = LogitsProcessorList()
    if params.repetition_penalty != 1.0:
        chain.append(RepetitionPenaltyLogitsProcessor(float(params.repetition_penalty)))
    if params.temperature not in (0.0, 1.0):
        chain.append(TemperatureLogitsWarper(float(params.temperature)))
    if params.top_k:
        chain.append(TopKLogitsWarper(params.top_k, min_tokens_to_keep=1))
    if params.top_p < 1.0:
        chain.append(TopPLogitsWarper(params.top_p, min_tokens_to_keep=1))
    if params.min_p > 0.0:
        chain.append(MinPLogitsWarper(params.min_p, min_tokens_to_keep=1))
    return chain


def hf_process(logits: np.ndarray, params: SamplingParams, history: list[list[int]]) -> np.ndarray:
    """Runs the chain on torch; ragged histories are padded with id V, which transformers ignores."""
    width = max(1, *(len(h) for h in history))
    ids = torch.tensor([h + [V] * (width - len(h)) for h in history], dtype=torch.long)
    scores = torch.from_numpy(logits.astype(np.float64))
    return hf_chain(params)(ids, scores).numpy()


def filters_off(params: SamplingParams) -> SamplingParams:
    return replace(params, top_k=0, top_p=1.0, min_p=0.0)


def assert_matches_hf(ours: np.ndarray, theirs: np.ndarray, tie_groups: np.ndarray) -> bool:
    """Finite values within 1e-5 and the same -inf pattern; returns True if a tie was cut differently.

    torch.sort is not stable, so when top-p cuts through a run of equal scores transformers drops an
    arbitrary subset of that run. There the pattern must agree in count per run of equal pre-filter
    scores (`tie_groups`); everywhere else it must agree exactly.
    """
    assert ours.dtype == np.float64 and ours.shape == theirs.shape
    assert not np.isnan(ours).any() and not np.isposinf(ours).any()
    ours_cut, theirs_cut = np.isneginf(ours), np.isneginf(theirs)
    kept = ~ours_cut & ~theirs_cut
    np.testing.assert_allclose(ours[kept], theirs[kept], rtol=0, atol=1e-5)
    if np.array_equal(ours_cut, theirs_cut):
        return False
    for b in range(len(ours)):
        for value in np.unique(tie_groups[b]):
            group = tie_groups[b] == value
            assert ours_cut[b, group].sum() == theirs_cut[b, group].sum(), f"row {b}, score {value}"
    return True


# --------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("name", ORACLE_PARAMS)
def test_process_logits_matches_transformers(name: str) -> None:
    params = ORACLE_PARAMS[name]
    tie_cuts = 0
    for seed in ORACLE_SEEDS:
        logits, history = random_logits(seed, KINDS[seed % len(KINDS)]), random_history(seed)
        ours = process_logits(logits, params, history)
        pre = process_logits(logits, filters_off(params), history)
        tie_cuts += assert_matches_hf(ours, hf_process(logits, params, history), pre)
    if "top_p" not in name and not name.startswith(("all", "greedy")):
        assert tie_cuts == 0  # only top-p depends on the order of tied scores


def test_oracle_exercises_top_p_cutting_through_ties() -> None:
    """A flat row under top_p=0.5 keeps exactly half the vocabulary in both; we keep the lowest ids."""
    logits = np.zeros((1, 8), dtype=np.float32)
    params = SamplingParams(temperature=1.0, top_p=0.5)
    ours = process_logits(logits, params, [[]])
    no_ids = torch.zeros(1, 1, dtype=torch.long)
    theirs = TopPLogitsWarper(0.5)(no_ids, torch.zeros(1, 8, dtype=torch.float64))
    assert np.isfinite(ours).sum() == torch.isfinite(theirs).sum().item() == 4
    assert np.isfinite(ours[0, :4]).all()


def test_repetition_penalty_applies_once_per_id_and_ignores_out_of_vocab() -> None:
    logits = np.array([[2.0, -2.0, 0.0, 1.0]])
    out = process_logits(logits, SamplingParams(repetition_penalty=2.0), [[0, 0, 0, 1, 2, 9]])
    np.testing.assert_array_equal(out, [[1.0, -4.0, 0.0, 1.0]])


# --------------------------------------------------------------------------- selection


def test_greedy_is_argmax_of_logits() -> None:
    rng = np.random.default_rng(0)
    for seed in range(30):
        logits = random_logits(seed, KINDS[seed % len(KINDS)])
        tokens = sample(logits, SamplingParams(), [[]] * B, rng)
        assert tokens.dtype == np.int64
        np.testing.assert_array_equal(tokens, np.argmax(logits, axis=-1))


def test_greedy_with_filters_matches_transformers_greedy() -> None:
    """transformers skips the warpers when not sampling; our filters never change the (first) argmax."""
    params = ORACLE_PARAMS["greedy_filters"]
    for seed in ORACLE_SEEDS:
        logits, history = random_logits(seed, KINDS[seed % len(KINDS)]), random_history(seed)
        penalized = hf_process(logits, SamplingParams(repetition_penalty=params.repetition_penalty), history)
        expected = torch.argmax(torch.from_numpy(penalized), dim=-1).numpy()
        np.testing.assert_array_equal(sample(logits, params, history, np.random.default_rng()), expected)


def test_sampling_is_deterministic_for_a_seed() -> None:
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=42)
    logits = np.tile(random_logits(1, "normal")[:1], (500, 1))
    history = [[]] * 500
    first = sample(logits, params, history, make_rng(params))
    again = sample(logits, params, history, make_rng(params))
    other = sample(logits, replace(params, seed=43), history, make_rng(replace(params, seed=43)))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_top_k_1_always_returns_the_argmax() -> None:
    rng = np.random.default_rng(7)
    for seed in range(20):
        logits = random_logits(seed, "normal")  # continuous, so the maximum is unique
        params = SamplingParams(temperature=rng.uniform(0.1, 5.0), top_k=1)
        for _ in range(20):
            np.testing.assert_array_equal(sample(logits, params, [[]] * B, rng), np.argmax(logits, axis=-1))


# Upper 0.1% points of the chi-square distribution, by degrees of freedom.
CHI2_999 = {2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515}


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, top_k=5),
        SamplingParams(temperature=1.3, top_p=0.9, repetition_penalty=1.5),
        SamplingParams(temperature=1.0, min_p=0.1),
    ],
)
def test_empirical_distribution_matches_softmax(params: SamplingParams) -> None:
    draws = 20_000
    logits = np.array([[2.0, 1.0, 0.5, 0.0, -1.5, 2.6]])
    history = [[0, 5]]
    probs = np.exp(process_logits(logits, params, history)[0])
    probs /= probs.sum()
    tokens = sample(np.repeat(logits, draws, axis=0), params, history * draws, np.random.default_rng(2024))
    counts = np.bincount(tokens, minlength=logits.shape[1])
    live = probs > 0
    assert counts[~live].sum() == 0
    expected = probs[live] * draws
    chi2 = float((((counts[live] - expected) ** 2) / expected).sum())
    assert chi2 < CHI2_999[int(live.sum()) - 1], (chi2, counts, expected)


# --------------------------------------------------------------------------- min_tokens_to_keep


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0, top_k=1),
        SamplingParams(temperature=1.0, top_p=1e-9),
        SamplingParams(temperature=1.0, top_p=1e-300),  # 1 - top_p rounds to 1: only the guard keeps one
        SamplingParams(temperature=1.0, min_p=1.0),
        SamplingParams(temperature=0.01, top_k=1, top_p=1e-9, min_p=1.0, repetition_penalty=3.0),
        SamplingParams(top_p=1e-9, min_p=1.0),
    ],
)
def test_filters_never_remove_every_token(params: SamplingParams) -> None:
    rng = np.random.default_rng(99)
    for seed in range(120):
        logits, history = random_logits(seed, KINDS[seed % len(KINDS)]), random_history(seed)
        out = process_logits(logits, params, history)
        best = np.argmax(process_logits(logits, filters_off(params), history), axis=-1)
        assert np.isfinite(out[np.arange(B), best]).all()
        tokens = sample(logits, params, history, rng)
        assert np.isfinite(out[np.arange(B), tokens]).all()


# --------------------------------------------------------------------------- stopping


def run_steps(state: StopState, steps: list[list[int]]) -> None:
    for tokens in steps:
        state.update(np.array(tokens))


def test_stop_state_keeps_eos_and_drops_stop_tokens_per_sequence() -> None:
    state = StopState(SamplingParams(eos_ids=(2,), stop_ids=(7,), max_tokens=10), 3)
    run_steps(state, [[5, 5, 5], [2, 7, 6], [9, 9, 6], [9, 9, 2]])
    assert state.kept(0) == [5, 2]  # eos kept, nothing after it
    assert state.kept(1) == [5]  # stop token dropped, nothing after it
    assert state.kept(2) == [5, 6, 6, 2]
    np.testing.assert_array_equal(state.finished, [True, True, True])
    assert state.all_finished


def test_stop_state_respects_max_tokens_independently() -> None:
    state = StopState(SamplingParams(eos_ids=(0,), stop_ids=(1,), max_tokens=3), 3)
    run_steps(state, [[4, 4, 4], [4, 0, 4]])
    np.testing.assert_array_equal(state.finished, [False, True, False])
    assert not state.all_finished
    run_steps(state, [[4, 4, 1], [8, 8, 8]])
    assert state.all_finished
    # sequence 2's stop token is dropped but still counts as its third generated token
    assert [state.kept(b) for b in range(3)] == [[4, 4, 4], [4, 0], [4, 4]]


def test_stop_state_with_zero_max_tokens_starts_finished() -> None:
    state = StopState(SamplingParams(max_tokens=0), 2)
    assert state.all_finished and state.kept(0) == [] and state.kept(1) == []


def test_stop_state_finished_is_a_copy_and_shape_is_checked() -> None:
    state = StopState(SamplingParams(max_tokens=1), 2)
    state.finished[:] = True
    assert not state.all_finished
    with pytest.raises(SamplingError, match="tokens must have shape"):
        state.update(np.array([1, 2, 3]))


def test_generate_loop_terminates_within_max_tokens() -> None:
    params = SamplingParams(temperature=1.0, top_k=10, eos_ids=(3,), stop_ids=(4,), max_tokens=12, seed=5)
    rng, state = make_rng(params), StopState(params, B)
    history = random_history(0)
    for _ in range(params.max_tokens):
        tokens = sample(random_logits(int(rng.integers(1 << 30)), "ties"), params, history, rng)
        state.update(tokens)
        history = [h + [int(t)] for h, t in zip(history, tokens, strict=True)]
    assert state.all_finished
    for b in range(B):
        kept = state.kept(b)
        assert len(kept) <= params.max_tokens and 4 not in kept and 3 not in kept[:-1]


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.5),
        ("temperature", float("nan")),
        ("temperature", float("inf")),
        ("top_k", -1),
        ("top_k", 2.5),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", -0.1),
        ("min_p", -0.01),
        ("min_p", 1.01),
        ("repetition_penalty", 0.0),
        ("repetition_penalty", -1.2),
        ("max_tokens", -1),
        ("max_tokens", True),
        ("eos_ids", (-1,)),
        ("stop_ids", [1, 2]),
    ],
)
def test_bad_parameters_raise_one_line_errors(field: str, value: object) -> None:
    with pytest.raises(SamplingError, match=f"^{field} must be ") as info:
        SamplingParams(**{field: value})
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_overlapping_eos_and_stop_ids_are_rejected() -> None:
    with pytest.raises(SamplingError, match="eos_ids and stop_ids must be disjoint"):
        SamplingParams(eos_ids=(1, 2), stop_ids=(2,))


@pytest.mark.parametrize(
    ("logits", "history", "message"),
    [
        (np.zeros(4), [[]], "shape"),
        (np.array([[0.0, np.nan]]), [[]], "NaN"),
        (np.array([[0.0, np.inf]]), [[]], r"\+inf"),
        (np.array([[0.0, 1.0], [-np.inf, -np.inf]]), [[], []], "row 1 has no finite entry"),
        (np.zeros((2, 4)), [[]], "history has 1 sequences"),
    ],
)
def test_bad_inputs_raise(logits: np.ndarray, history: list[list[int]], message: str) -> None:
    with pytest.raises(SamplingError, match=message):
        process_logits(logits, SamplingParams(), history)


def test_negative_history_id_is_rejected() -> None:
    with pytest.raises(SamplingError, match=r"history\[0\] contains the negative token id -3"):
        process_logits(np.zeros((1, 4)), SamplingParams(repetition_penalty=1.1), [[1, -3]])


def test_module_does_not_import_torch_or_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tcp_compiler.runtime.sampling; "
        "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
