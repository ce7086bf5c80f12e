"""RWKV-5 "Eagle" (remote code, issue 29) against a numpy reference written from the published
modelling code: huggingface/transformers, src/transformers/models/rwkv5/modeling_rwkv5.py at commit
f4713523018003f4cdde943dad0b653e2bd35de6 (the Rwkv5ForCausalLM the hub's RWKV/rwkv-5-world-1b5
ships as modeling_rwkv5.py; its `rwkv_linear_attention_v5` loop, RwkvSelfAttention,
RwkvFeedForward, the block's pre_ln / ln1 / ln2, ln_out and head), on a tiny random-weight model:

- prefill plus 4 decode steps within 1e-4 of the reference (which decodes from its own state),
  greedy tokens equal; decode from the carried state equals the full recompute;
- matmul FLOPs: our contractions equal the reference's linear layers' count (its head on every
  position, ours on the last), and our `scan` counts at least the reference's per-step matmuls;
- state bytes per sequence fixed at every context; parameter counts equal the tensor shapes the
  published __init__ creates, tiny and for the bundled RWKV-5 World 1.5B;
- each part RWKV-5 adds bites: the reference without the bonus (time_faaaa), without the decay,
  without the GroupNorm (ln_x) or without the gate misses ours by far more than the tolerance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.families.rwkv5 import DEFAULTS
from tcp_compiler.frontend.model import BUNDLED, load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.decode_match import assert_prefill_and_decode_match
from tests.oracle.param_counts import tcpc_params

F32 = PRECISIONS["f32"]
PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
CONFIG = dict(model_type="rwkv5", architectures=["Rwkv5ForCausalLM"], vocab_size=97, hidden_size=32,
              head_size=8, num_hidden_layers=3, layer_norm_epsilon=1e-5, torch_dtype="float32")  # fmt: skip
PARTS = ("bonus", "decay", "group norm", "gate")


def shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The tensors Rwkv5ForCausalLM.__init__ creates for `cfg`, by checkpoint name: heads are
    hidden / head_size, the channel mixing int(3.5 hidden / 32) x 32 wide (Rwkv5Config drops
    intermediate_size), ln_x a GroupNorm over hidden channels, block 0's pre_ln."""
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    H, F = D // cfg["head_size"], int((D * 3.5) // 32 * 32)
    out = {"rwkv.embeddings.weight": (V, D), "head.weight": (V, D)}
    for norm in ("rwkv.ln_out", "rwkv.blocks.0.pre_ln"):
        out[f"{norm}.weight"] = out[f"{norm}.bias"] = (D,)
    for i in range(cfg["num_hidden_layers"]):
        p = f"rwkv.blocks.{i}"
        for n in ("ln1", "ln2", "attention.ln_x"):
            out[f"{p}.{n}.weight"] = out[f"{p}.{n}.bias"] = (D,)
        out[f"{p}.attention.time_decay"] = out[f"{p}.attention.time_faaaa"] = (H, cfg["head_size"])
        for n in ("key", "value", "receptance", "gate"):
            out[f"{p}.attention.time_mix_{n}"] = (1, 1, D)
            out[f"{p}.attention.{n}.weight"] = (D, D)
        out[f"{p}.attention.output.weight"] = (D, D)
        for n in ("key", "receptance"):
            out[f"{p}.feed_forward.time_mix_{n}"] = (1, 1, D)
        out[f"{p}.feed_forward.key.weight"] = (F, D)
        out[f"{p}.feed_forward.receptance.weight"] = (D, D)
        out[f"{p}.feed_forward.value.weight"] = (D, F)
    return out


def random_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor random; norm weights around 1, the token-shift mixes in [0, 1]."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in shapes(cfg).items():
        w = 0.3 * rng.standard_normal(shape)
        if name.endswith("weight") and any(f"{n}.weight" in name for n in ("ln", "pre_ln", "ln_x")):
            w += 1.0
        if "time_mix" in name:
            w = rng.uniform(0, 1, shape)
        if name.endswith("time_decay"):  # w = exp(-exp(d)) from about 0.2 to 0.9
            w = rng.uniform(-2.5, 0.5, shape)
        weights[name] = w.astype(np.float32)
    return weights


class Reference:
    """The published forward in numpy (float32, so no rescaling: the code rescales fp16 / bf16
    weights only); `off` names parts to leave out, to show each bites. `flops` tallies the linear
    layers' matmuls, `step_flops` the recurrence's two per-step matmuls (k^T v, r (S + u k^T v))."""

    def __init__(self, weights: dict[str, np.ndarray], cfg: dict, off: Iterable[str] = ()) -> None:
        self.w, self.cfg, self.off = weights, cfg, set(off)
        self.D, self.K = cfg["hidden_size"], cfg["head_size"]
        self.H = self.D // self.K
        self.flops = self.step_flops = 0

    def new_state(self) -> list[dict[str, np.ndarray]]:
        zeros = np.zeros(self.D, np.float32)
        return [{"att": zeros, "kv": np.zeros((self.H, self.K, self.K), np.float32), "ffn": zeros}
                for _ in range(self.cfg["num_hidden_layers"])]  # fmt: skip

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        w = self.w[name]
        self.flops += 2 * x.shape[0] * w.shape[0] * w.shape[1]
        return x @ w.T

    def layer_norm(self, x: np.ndarray, prefix: str, eps: float) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * self.w[f"{prefix}.weight"] + self.w[f"{prefix}.bias"]

    def forward(self, tokens: list[int], state: list[dict]) -> np.ndarray:
        eps = self.cfg["layer_norm_epsilon"]
        h = self.layer_norm(self.w["rwkv.embeddings.weight"][tokens], "rwkv.blocks.0.pre_ln", eps)
        for i, s in enumerate(state):
            p = f"rwkv.blocks.{i}"
            h = h + self.time_mix(self.layer_norm(h, f"{p}.ln1", eps), f"{p}.attention", s)
            h = h + self.channel_mix(self.layer_norm(h, f"{p}.ln2", eps), f"{p}.feed_forward", s)
        return self.linear(self.layer_norm(h, "rwkv.ln_out", 1e-5), "head.weight")

    def shifted(self, x: np.ndarray, s: dict, key: str) -> np.ndarray:
        prev = np.concatenate([s[key][None], x[:-1]])
        s[key] = x[-1]
        return prev

    def mixed(self, x: np.ndarray, prev: np.ndarray, name: str) -> np.ndarray:
        m = self.w[name][0, 0]
        return x * m + prev * (1 - m)

    def time_mix(self, x: np.ndarray, p: str, s: dict) -> np.ndarray:
        T, H, K = len(x), self.H, self.K
        prev = self.shifted(x, s, "att")
        r, k, v, g = (self.linear(self.mixed(x, prev, f"{p}.time_mix_{n}"), f"{p}.{n}.weight")
                      for n in ("receptance", "key", "value", "gate"))  # fmt: skip
        g = g / (1 + np.exp(-g))
        r, k, v = (a.reshape(T, H, K) for a in (r, k, v))
        decay = np.exp(-np.exp(self.w[f"{p}.time_decay"]))[:, :, None]
        if "decay" in self.off:
            decay = np.ones_like(decay)
        u = self.w[f"{p}.time_faaaa"][:, :, None]
        if "bonus" in self.off:
            u = np.zeros_like(u)
        out = np.zeros((T, H, K), np.float32)
        for t in range(T):
            at = k[t][:, :, None] * v[t][:, None, :]  # [H, K, V]: k_t^T v_t per head
            out[t] = np.einsum("hk,hkv->hv", r[t], u * at + s["kv"])
            s["kv"] = at + decay * s["kv"]
            self.step_flops += 4 * H * K * K
        if "group norm" not in self.off:
            mean = out.mean(-1, keepdims=True)
            var = ((out - mean) ** 2).mean(-1, keepdims=True)
            out = (out - mean) / np.sqrt(var + 1e-5)
            out = out.reshape(T, -1) * self.w[f"{p}.ln_x.weight"] + self.w[f"{p}.ln_x.bias"]
        out = out.reshape(T, -1) * (1.0 if "gate" in self.off else g)
        return self.linear(out, f"{p}.output.weight")

    def channel_mix(self, x: np.ndarray, p: str, s: dict) -> np.ndarray:
        prev = self.shifted(x, s, "ffn")
        k = np.maximum(self.linear(self.mixed(x, prev, f"{p}.time_mix_key"), f"{p}.key.weight"), 0) ** 2
        r = self.linear(self.mixed(x, prev, f"{p}.time_mix_receptance"), f"{p}.receptance.weight")
        return self.linear(k, f"{p}.value.weight") / (1 + np.exp(-r))


def reference_logits(ref: Reference, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The reference's last-position logits for the prompt, then one per fed token from its state."""
    state = ref.new_state()
    logits = [ref.forward(prompt, state)[-1]]
    logits += [ref.forward([t], state)[-1] for t in tokens]
    return logits


def saved(directory: Path, config: dict, weights: dict[str, np.ndarray]):
    """The tiny model written as a hub checkpoint (config.json, model.safetensors), loaded by tcpc."""
    (directory / "config.json").write_text(json.dumps(config))
    save_file(weights, str(directory / "model.safetensors"))
    return load_model(directory)


@pytest.fixture(scope="module")
def eagle(tmp_path_factory):
    weights = random_weights(CONFIG)
    return weights, saved(tmp_path_factory.mktemp("rwkv5"), CONFIG, weights)


def ours(loaded, prompt: list[int], steps: int = STEPS):
    return generate(loaded.config, loaded.checkpoint.load, [prompt], F32, steps)


def assert_matches_the_reference(loaded, reference) -> None:
    """Prefill plus STEPS decode steps within 1e-4 of `reference` decoding from its own state."""
    assert_prefill_and_decode_match(loaded, lambda p, t: reference_logits(reference, p, t), PROMPT, STEPS)


def assert_decode_from_the_carried_state_equals_the_full_recompute(loaded) -> None:
    result = ours(loaded, PROMPT)
    sequence = PROMPT + result.token_matrix[0].tolist()
    for step in range(STEPS):
        whole = ours(loaded, sequence[: len(PROMPT) + step + 1], 0)
        np.testing.assert_allclose(result.decode_logits[step][0], whole.prefill_logits[0], atol=1e-5,
                                   err_msg=f"step {step}")  # fmt: skip


def assert_the_part_bites(loaded, without, part: str) -> None:
    """`without` (the reference with `part` switched off) misses our logits, which match the whole
    reference, by far more than the tolerance, in prefill and in decode."""
    result = ours(loaded, PROMPT, 1)
    mine = [result.prefill_logits[0], result.decode_logits[0][0]]
    token = result.token_matrix[0].tolist()[:1]
    for a, b in zip(mine, reference_logits(without, PROMPT, token), strict=True):
        assert np.abs(a - b).max() > 1e-2, part


def test_prefill_and_decode_match_the_reference(eagle) -> None:
    weights, loaded = eagle
    assert_matches_the_reference(loaded, Reference(weights, CONFIG))


def test_decode_from_the_carried_state_equals_the_full_recompute(eagle) -> None:
    assert_decode_from_the_carried_state_equals_the_full_recompute(eagle[1])


@pytest.mark.parametrize("part", PARTS)
def test_each_rwkv5_part_bites(eagle, part: str) -> None:
    weights, loaded = eagle
    assert_the_part_bites(loaded, Reference(weights, CONFIG, off=[part]), part)


def test_state_is_fixed_at_every_context(eagle) -> None:
    """Per layer: the [4 heads, 8, 8] state, the lagged k and v (32 each) and the two token
    shifts' previous inputs (32 each), the same at any context."""
    _, loaded = eagle
    cfg = loaded.config
    assert cfg.state_elements() == 3 * (4 * 8 * 8 + 2 * 32 + 2 * 32)
    for past in (8, 800):
        graph = build_decode(cfg, F32, 1, past).graph
        assert sum(graph[o].type.nbytes for o in graph.meta.kv_outputs) == cfg.state_elements() * 4


def test_parameter_counts_equal_the_published_shapes(eagle) -> None:
    """Tiny and the bundled RWKV-5 World 1.5B: the shapes the published __init__ creates from the
    config, summed, equal the tensors our graph binds."""
    weights, loaded = eagle
    assert tcpc_params(loaded.config) == sum(w.size for w in weights.values())
    published = {**DEFAULTS, **json.loads((BUNDLED / "rwkv-5-world-1b5.json").read_text())}
    count = sum(int(np.prod(shape)) for shape in shapes(published).values())
    assert tcpc_params(load_model("rwkv-5-world-1b5").config) == count == 1_577_754_624


@pytest.mark.parametrize("seq", [1, 7])
def test_projection_flops_equal_the_reference_matmuls(eagle, seq) -> None:
    """Every linear is a contraction here and a matmul there; the reference's head runs on every
    position, ours on the last. The recurrence is one `scan` per layer, counting at least the
    reference's two per-step matmuls."""
    weights, loaded = eagle
    ref = Reference(weights, CONFIG)
    ref.forward(list(range(seq)), ref.new_state())
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    costs = ir.analyze(graph).per_node
    contractions = sum(nc.cost.flops for nc in costs if nc.node.kind in CONTRACTIONS)
    head_elsewhere = 2 * CONFIG["hidden_size"] * CONFIG["vocab_size"] * (seq - 1)
    assert contractions + head_elsewhere == ref.flops
    scans = [nc for nc in costs if nc.node.kind == "scan"]
    assert len(scans) == CONFIG["num_hidden_layers"]
    assert sum(nc.cost.flops for nc in scans) >= ref.step_flops


def test_bad_head_sizes_are_refused_in_one_line(tmp_path) -> None:
    refused = (
        ({"head_size": 5}, "head_size: 5 does not divide hidden_size 32"),
        ({"attention_hidden_size": 16}, "attention_hidden_size: 16 is not hidden_size 32"),
    )
    for fields, message in refused:
        (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **fields}))
        with pytest.raises(FrontendError, match=message):
            load_model(tmp_path)


def test_padding_and_chips_that_split_no_head_are_refused_in_one_line(eagle) -> None:
    _, loaded = eagle
    with pytest.raises(FrontendError, match=r"RWKV's 4 heads do not split over 8 chips"):
        build_decode(loaded.config, F32, 1, 6, chips=8)
    with pytest.raises(FrontendError, match="RWKV blocks take no padded batches"):
        build_prefill(loaded.config, F32, 2, 6, padded=True)


def tensor_parallel_matches_one_chip(loaded, chips: int, heads: int) -> None:
    """Whole heads per chip (their projections' rows, decay, bonus and ln_x; the output's columns),
    the channel mixing's key rows and value columns: one chip's logits, two all_reduces a block,
    and each chip carries its heads' share of the state."""
    one = ours(loaded, PROMPT, 2)
    split = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 2, chips=chips)
    for a, b in zip([one.prefill_logits, *one.decode_logits], [split.prefill_logits, *split.decode_logits],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5)
    graph = build_decode(loaded.config, F32, 1, 6, chips=chips).graph
    reduced = {n.name for n in graph.of_kind("all_reduce")}
    assert {"l0.output.sum", "l0.ffn_value.sum"} <= reduced
    assert graph["l0.ssm_state"].type.size("H") == heads // chips
    cached = sum(graph[o].type.nbytes for o in graph.meta.kv_outputs)
    assert cached == loaded.config.state_elements(chips=chips) * 4 < loaded.config.state_elements() * 4


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(eagle, chips: int) -> None:
    tensor_parallel_matches_one_chip(eagle[1], chips, 4)
