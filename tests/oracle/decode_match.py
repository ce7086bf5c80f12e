"""The oracle suites' first check, in one place: our prefill plus `steps` greedy decode steps,
each within 1e-4 of a reference's logits for the same tokens, greedy tokens equal. Only the
reference differs between families (how transformers decodes from its own cache or state), so
each suite passes its own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tcp_compiler.frontend.model import Model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate

# (prompt, the tokens fed after it) -> the last position's logits for the prompt, then one per token
Reference = Callable[[list[int], list[int]], list[np.ndarray]]


def assert_prefill_and_decode_match(
    loaded: Model, reference: Reference, prompt: list[int], steps: int, label: str = ""
) -> None:
    """Fails at the first step whose logits differ from the reference's past 1e-4, or whose greedy
    token is not the argmax; and when the reference's logits are too small to tell a bug from noise."""
    result = generate(loaded.config, loaded.checkpoint.load, [prompt], PRECISIONS["f32"], steps)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    tokens = result.token_matrix[0].tolist()
    theirs = reference(prompt, tokens[:steps])
    assert len(theirs) == steps + 1, f"{label}: the reference gave {len(theirs)} logits for {steps} steps"
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{label} step {step}")
        assert int(np.argmax(a)) == tokens[step], f"{label} step {step}: greedy token"
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"
