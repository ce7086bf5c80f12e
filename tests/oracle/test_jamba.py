"""Jamba's own parts, each switched off on tcpc's side, miss transformers 5.23.0 (the tiny model
of test_hybrid_families, which checks the whole within 1e-4): the RMSNorms on dt's rank, B and C
(dropped, or without their learned weights as Falcon-Mamba's), and the router's softmax over all
experts with the top-k weights left unnormalised (renormalised over the k instead, or a softmax
over the k logits as gpt-oss and Granite 4 route). Which layers attend and which route to experts
is checked against JambaConfig's own layer lists in tests/test_jamba_config.py; a misread period
or offset also asks for tensors the checkpoint lacks.

Expert counts of one: transformers builds the dense MLP then (no router), and so does tcpc.
Right-padded batches equal single runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tcp_compiler.frontend.model import load_model
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import tcpc_params, transformers_params
from tests.oracle.test_hybrid_families import F32, PROMPT, build


@pytest.fixture(scope="module")
def jamba(tmp_path_factory):
    model = build("jamba")
    directory = tmp_path_factory.mktemp("jamba")
    model.save_pretrained(directory)
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT]), use_cache=False).logits[0, -1].numpy()
    return load_model(directory), theirs


def _ours(loaded, cfg) -> np.ndarray:
    return generate(cfg, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]


# a part switched off: (the config group it lives in, the field, its value when off)
SWITCHED_OFF = {
    "no dt/B/C norms": ("ssm", "bcdt_norm_eps", None),
    "weightless dt/B/C norms": ("ssm", "bcdt_norm_weights", False),
    "renormalised top-k": ("moe", "normalize_top_k", True),
    "softmax over the top-k": ("moe", "softmax_after_top_k", True),
}


def test_as_read_matches_transformers(jamba) -> None:
    loaded, theirs = jamba
    np.testing.assert_allclose(_ours(loaded, loaded.config), theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("part", sorted(SWITCHED_OFF))
def test_each_part_switched_off_misses_transformers(jamba, part: str) -> None:
    loaded, theirs = jamba
    group, field, value = SWITCHED_OFF[part]
    cfg = loaded.config
    off = dataclasses.replace(cfg, **{group: dataclasses.replace(getattr(cfg, group), **{field: value})})
    assert np.abs(_ours(loaded, off) - theirs).max() > 1e-3


def test_one_expert_is_the_dense_mlp(tmp_path) -> None:
    """num_experts 1: every layer's MLP is JambaMLP (no router), in transformers and here."""
    model = build("jamba", num_experts=1, num_experts_per_tok=1)
    model.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config.moe is None and not any(layer.moe for layer in loaded.config.layers)
    assert tcpc_params(loaded.config) == transformers_params(model)
    with torch.no_grad():
        theirs = model(torch.tensor([PROMPT]), use_cache=False).logits[0, -1].numpy()
    np.testing.assert_allclose(_ours(loaded, loaded.config), theirs, atol=1e-4, rtol=0)


def test_batched_padded_prompts_match_single_runs(jamba) -> None:
    """Right-padded prompts of 6, 3 (shorter than the convolution's window) and 5 tokens through
    Mamba, attention and expert layers at once: each row's logits and decode steps are its own
    run's (a padded step leaves the state, dt = 0; attention masks the padded keys)."""
    loaded, _ = jamba
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for row, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[row], single.prefill_logits[0], atol=1e-5)
        for k in range(2):
            np.testing.assert_allclose(batched.decode_logits[k][row], single.decode_logits[k][0], atol=1e-5)
        assert batched.token_matrix[row].tolist() == single.token_matrix[0].tolist()
