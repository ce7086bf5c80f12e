"""RWKV-6 "Finch" (remote code, issue 29) against a numpy reference written from the published
modelling code: huggingface/transformers, src/transformers/models/rwkv6/modeling_rwkv6.py at commit
328031b302f8c5d7ef2cd8ac04d80fefdcdcfe0f (Rwkv6SelfAttention.extract_key_value and forward,
Rwkv6FeedForward, Rwkv6Block, Rwkv6Model), its recurrence `naive_recurrent_rwkv6` in wkv6.py at
commit 4b0238f4d70cae752ed8f044be15ed3052a84db5 and Rwkv6Config (configuration_rwkv6.py at
6ae432b0872c2987693c8d0ca7917f0d80c1d5ca), on a tiny random-weight model. The same checks as
RWKV-5's (tests/oracle/test_rwkv5.py), and the parts RWKV-6 adds bite: the data-dependent mixes
(the time_maa LoRA) and the data-dependent decay (the time_decay LoRA).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tests.oracle.param_counts import tcpc_params
from tests.oracle.test_rwkv5 import (
    F32,
    Reference,
    assert_decode_from_the_carried_state_equals_the_full_recompute,
    assert_matches_the_reference,
    assert_the_part_bites,
    saved,
    tensor_parallel_matches_one_chip,
)  # fmt: skip

CONFIG = dict(model_type="rwkv6", architectures=["Rwkv6ForCausalLM"], vocab_size=97, hidden_size=32,
              head_size=8, head_size_divisor=2, num_hidden_layers=3, layer_norm_epsilon=1e-5,
              torch_dtype="float32")  # fmt: skip
MIX, DECAY = 32, 64  # the LoRA widths the published code takes below hidden_size 4096
PARTS = ("mix lora", "decay lora", "bonus", "group norm", "gate")
NORMS = ("ln1", "ln2", "ln_out", "pre_ln", "ln_x")


def shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The tensors Rwkv6ForCausalLM.__init__ creates for `cfg`, by checkpoint name."""
    D, V = cfg["hidden_size"], cfg["vocab_size"]
    H, F = D // cfg["head_size"], int((D * 3.5) // 32 * 32)
    mix, decay = (64, 128) if D == 4096 else (MIX, DECAY)
    out = {"rwkv.embeddings.weight": (V, D), "head.weight": (V, D)}
    for norm in ("rwkv.ln_out", "rwkv.blocks.0.pre_ln"):
        out[f"{norm}.weight"] = out[f"{norm}.bias"] = (D,)
    for i in range(cfg["num_hidden_layers"]):
        p, a = f"rwkv.blocks.{i}", f"rwkv.blocks.{i}.attention"
        for n in ("ln1", "ln2", "attention.ln_x"):
            out[f"{p}.{n}.weight"] = out[f"{p}.{n}.bias"] = (D,)
        for n in "xwkvrg":
            out[f"{a}.time_maa_{n}"] = (1, 1, D)
        out[f"{a}.time_maa_w1"], out[f"{a}.time_maa_w2"] = (D, 5 * mix), (5, mix, D)
        out[f"{a}.time_decay"], out[f"{a}.time_faaaa"] = (1, 1, D), (H, cfg["head_size"])
        out[f"{a}.time_decay_w1"], out[f"{a}.time_decay_w2"] = (D, decay), (decay, D)
        for n in ("receptance", "key", "value", "gate", "output"):
            out[f"{a}.{n}.weight"] = (D, D)
        out[f"{p}.feed_forward.time_maa_k"] = out[f"{p}.feed_forward.time_maa_r"] = (1, 1, D)
        out[f"{p}.feed_forward.key.weight"] = (F, D)
        out[f"{p}.feed_forward.receptance.weight"] = (D, D)
        out[f"{p}.feed_forward.value.weight"] = (D, F)
    return out


def random_weights(cfg: dict, seed: int = 1) -> dict[str, np.ndarray]:
    """Every tensor random: norm weights around 1, mixes in [0, 1], LoRAs large enough to move
    the mixes and the decay (decay about exp(-exp(-2.5 .. 0.5)) before its LoRA)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in shapes(cfg).items():
        w = 0.3 * rng.standard_normal(shape)
        if name.endswith("weight") and any(f"{n}.weight" in name for n in NORMS):
            w += 1.0
        if "time_maa_" in name and name[-2:] not in ("w1", "w2"):
            w = rng.uniform(0, 1, shape)
        if name.endswith("time_decay"):
            w = rng.uniform(-2.5, 0.5, shape)
        weights[name] = w.astype(np.float32)
    return weights


class Finch(Reference):
    """The published RWKV-6 forward in numpy (float32: no rescaling); `off` as RWKV-5's plus
    "mix lora" (the mixes without their LoRA: time_maa_* alone) and "decay lora" (time_decay
    alone). `flops` counts every matmul but the recurrence's (the LoRAs' too)."""

    def __init__(self, weights, cfg, off=()) -> None:
        super().__init__(weights, cfg, off)
        self.eps = 1e-5 * cfg["head_size_divisor"] ** 2

    def matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        self.flops += 2 * x.shape[0] * w.shape[0] * w.shape[1]
        return x @ w

    def time_mix(self, x: np.ndarray, p: str, s: dict) -> np.ndarray:
        T, H, K, w = len(x), self.H, self.K, self.w
        xx = self.shifted(x, s, "att") - x
        lora_in = x + xx * w[f"{p}.time_maa_x"][0, 0]
        hidden = np.tanh(self.matmul(lora_in, w[f"{p}.time_maa_w1"])).reshape(T, 5, -1)
        deltas = [self.matmul(hidden[:, j], w[f"{p}.time_maa_w2"][j]) for j in range(5)]
        if "mix lora" in self.off:
            deltas = [np.zeros_like(d) for d in deltas]
        dw, dk, dv, dr, dg = deltas
        xw, xk, xv, xr, xg = (x + xx * (w[f"{p}.time_maa_{n}"][0, 0] + d)
                              for n, d in zip("wkvrg", (dw, dk, dv, dr, dg), strict=True))  # fmt: skip
        r, k, v = (self.linear(a, f"{p}.{n}.weight")
                   for a, n in ((xr, "receptance"), (xk, "key"), (xv, "value")))  # fmt: skip
        g = self.linear(xg, f"{p}.gate.weight")
        g = g / (1 + np.exp(-g))
        lora = self.matmul(np.tanh(self.matmul(xw, w[f"{p}.time_decay_w1"])), w[f"{p}.time_decay_w2"])
        decay = w[f"{p}.time_decay"][0] + (0 * lora if "decay lora" in self.off else lora)  # [T, D]
        decay = np.exp(-np.exp(decay)).reshape(T, H, K)
        u = w[f"{p}.time_faaaa"][:, :, None] * (0.0 if "bonus" in self.off else 1.0)
        r, k, v = (a.reshape(T, H, K) for a in (r, k, v))
        out = np.zeros((T, H, K), np.float32)
        for t in range(T):
            kv = k[t][:, :, None] * v[t][:, None, :]
            out[t] = ((s["kv"] + u * kv) * r[t][:, :, None]).sum(-2)
            s["kv"] = s["kv"] * decay[t][:, :, None] + kv
            self.step_flops += 4 * H * K * K
        if "group norm" not in self.off:
            mean = out.mean(-1, keepdims=True)
            var = ((out - mean) ** 2).mean(-1, keepdims=True)
            out = (out - mean) / np.sqrt(var + self.eps)
            out = out.reshape(T, -1) * w[f"{p}.ln_x.weight"] + w[f"{p}.ln_x.bias"]
        out = out.reshape(T, -1) * (1.0 if "gate" in self.off else g)
        return self.linear(out, f"{p}.output.weight")

    def channel_mix(self, x: np.ndarray, p: str, s: dict) -> np.ndarray:
        xx = self.shifted(x, s, "ffn") - x
        k = self.linear(x + xx * self.w[f"{p}.time_maa_k"][0, 0], f"{p}.key.weight")
        r = self.linear(x + xx * self.w[f"{p}.time_maa_r"][0, 0], f"{p}.receptance.weight")
        return self.linear(np.maximum(k, 0) ** 2, f"{p}.value.weight") / (1 + np.exp(-r))


@pytest.fixture(scope="module")
def finch(tmp_path_factory):
    weights = random_weights(CONFIG)
    return weights, saved(tmp_path_factory.mktemp("rwkv6"), CONFIG, weights)


def test_prefill_and_decode_match_the_reference(finch) -> None:
    weights, loaded = finch
    assert_matches_the_reference(loaded, Finch(weights, CONFIG))


def test_decode_from_the_carried_state_equals_the_full_recompute(finch) -> None:
    assert_decode_from_the_carried_state_equals_the_full_recompute(finch[1])


@pytest.mark.parametrize("part", PARTS)
def test_each_rwkv6_part_bites(finch, part: str) -> None:
    weights, loaded = finch
    assert_the_part_bites(loaded, Finch(weights, CONFIG, off=[part]), part)


def test_state_is_fixed_at_every_context(finch) -> None:
    """Per layer: the [4 heads, 8, 8] state, the lagged k, v and decay (32 each) and the two token
    shifts' previous inputs (32 each), the same at any context."""
    _, loaded = finch
    cfg = loaded.config
    assert cfg.state_elements() == 3 * (4 * 8 * 8 + 3 * 32 + 2 * 32)
    for past in (8, 800):
        graph = build_decode(cfg, F32, 1, past).graph
        assert sum(graph[o].type.nbytes for o in graph.meta.kv_outputs) == cfg.state_elements() * 4


def test_parameter_counts_equal_the_published_shapes(finch, tmp_path) -> None:
    """Tiny, and RWKV-6 World 1.6B's sizes (24 layers, 2048 wide, vocab 65536, heads of 64) and a
    4096-wide model's (the published code's wider LoRAs) from the shapes __init__ creates."""
    weights, loaded = finch
    assert tcpc_params(loaded.config) == sum(w.size for w in weights.values())
    for hidden, layers, want in ((2048, 24, 1_599_873_024), (4096, 2, None)):
        cfg = {**CONFIG, "hidden_size": hidden, "num_hidden_layers": layers, "vocab_size": 65536,
               "head_size": 64, "head_size_divisor": 8}  # fmt: skip
        count = sum(int(np.prod(shape)) for shape in shapes(cfg).values())
        assert want is None or count == want
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        assert tcpc_params(load_model(tmp_path).config) == count


@pytest.mark.parametrize("seq", [1, 7])
def test_projection_flops_equal_the_reference_matmuls(finch, seq) -> None:
    """Every linear and LoRA matmul is a contraction here; the reference's head runs on every
    position, ours on the last. The recurrence is one `scan` per layer."""
    weights, loaded = finch
    ref = Finch(weights, CONFIG)
    ref.forward(list(range(seq)), ref.new_state())
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    costs = ir.analyze(graph).per_node
    contractions = sum(nc.cost.flops for nc in costs if nc.node.kind in CONTRACTIONS)
    head_elsewhere = 2 * CONFIG["hidden_size"] * CONFIG["vocab_size"] * (seq - 1)
    assert contractions + head_elsewhere == ref.flops
    scans = [nc for nc in costs if nc.node.kind == "scan"]
    assert len(scans) == CONFIG["num_hidden_layers"]
    assert sum(nc.cost.flops for nc in scans) >= ref.step_flops


@pytest.mark.parametrize("chips", [2, 4])
def test_tensor_parallel_equals_one_chip(finch, chips: int) -> None:
    """RWKV-5's split, with the decay LoRA's output columns cut by heads; every chip computes
    the (hidden-wide) token-shift LoRA whole."""
    tensor_parallel_matches_one_chip(finch[1], chips, 4)
