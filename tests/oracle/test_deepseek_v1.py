"""DeepSeek-MoE V1 (`model_type: deepseek`, remote code transformers does not ship) against a
numpy reference written from its published modelling code: deepseek-ai/deepseek-moe-16b-base's
modeling_deepseek.py, read in the copy at BZX667/CMoE `modeling_deepseek.py`, commit
33fb11fd82e0dca6a5cd07785c20fc43b5630f22 (DeepseekAttention, MoEGate, DeepseekMoE,
DeepseekDecoderLayer). The tiny model makes each part bite: GQA with attention biases, a dense
first layer (first_k_dense_replace 1), MoE only on every second layer after it (moe_layer_freq 2),
softmax top-3 of 8 experts renormalised (norm_topk_prob), two shared experts.

The reference recomputes the whole sequence for every step (no cache), so tcpc's cached decode is
checked against the same logits; its matmuls count their own FLOPs (2 x M x N x K), as
FlopCounterMode counts the published model's eager forward.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

import ir
from ir.ops.moe import CONTRACTIONS
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate

CONFIG = {
    "architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "vocab_size": 97,
    "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 2, "first_k_dense_replace": 1,
    "moe_layer_freq": 2, "norm_topk_prob": True, "scoring_func": "softmax", "attention_bias": True,
    "rms_norm_eps": 1e-6, "rope_theta": 100.0, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float32",
}  # fmt: skip
PROMPT = [5, 17, 3, 88, 42, 9]
F32 = PRECISIONS["f32"]


def moe_layer(cfg: dict, i: int) -> bool:
    """DeepseekDecoderLayer's rule for an MoE MLP."""
    return i >= cfg["first_k_dense_replace"] and i % cfg["moe_layer_freq"] == 0


def random_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    D, H, Hkv, V = (
        cfg["hidden_size"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["vocab_size"],
    )
    K = D // H

    def w(*shape: int, centre: float = 0.0) -> np.ndarray:
        return (centre + 0.1 * rng.standard_normal(shape)).astype(np.float32)

    def mlp(prefix: str, width: int) -> dict[str, np.ndarray]:
        return {f"{prefix}.gate_proj.weight": w(width, D), f"{prefix}.up_proj.weight": w(width, D),
                f"{prefix}.down_proj.weight": w(D, width)}  # fmt: skip

    out = {
        "model.embed_tokens.weight": w(V, D),
        "model.norm.weight": w(D, centre=1.0),
        "lm_head.weight": w(V, D),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out.update(
            {
                f"{p}.input_layernorm.weight": w(D, centre=1.0),
                f"{p}.post_attention_layernorm.weight": w(D, centre=1.0),
            }
        )
        for name, rows in (("q", H * K), ("k", Hkv * K), ("v", Hkv * K)):
            out.update(
                {f"{p}.self_attn.{name}_proj.weight": w(rows, D), f"{p}.self_attn.{name}_proj.bias": w(rows)}
            )
        out.update({f"{p}.self_attn.o_proj.weight": w(D, H * K), f"{p}.self_attn.o_proj.bias": w(D)})
        if not moe_layer(cfg, i):
            out.update(mlp(f"{p}.mlp", cfg["intermediate_size"]))
            continue
        out[f"{p}.mlp.gate.weight"] = w(cfg["n_routed_experts"], D)
        for e in range(cfg["n_routed_experts"]):
            out.update(mlp(f"{p}.mlp.experts.{e}", cfg["moe_intermediate_size"]))
        out.update(mlp(f"{p}.mlp.shared_experts", cfg["moe_intermediate_size"] * cfg["n_shared_experts"]))
    return out  # fmt: skip


class Reference:
    """The published model's eager forward in float32 numpy, counting its matmul FLOPs."""

    def __init__(self, cfg: dict, weights: dict[str, np.ndarray]) -> None:
        self.cfg, self.w, self.flops = cfg, weights, 0

    def mm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.flops += 2 * int(np.prod(a.shape[:-1])) * a.shape[-1] * int(np.prod(b.shape[1:]))
        return a @ b

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = self.mm(x, self.w[f"{name}.weight"].T)
        bias = self.w.get(f"{name}.bias")
        return y if bias is None else y + bias

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        variance = (x * x).mean(-1, keepdims=True)
        return self.w[f"{name}.weight"] * (x / np.sqrt(variance + np.float32(self.cfg["rms_norm_eps"])))

    def mlp(self, x: np.ndarray, prefix: str) -> np.ndarray:
        gate = self.linear(x, f"{prefix}.gate_proj")
        return self.linear(
            gate / (1 + np.exp(-gate)) * self.linear(x, f"{prefix}.up_proj"), f"{prefix}.down_proj"
        )

    def moe(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """MoEGate: softmax over the experts, top-k, renormalised (+1e-20) when norm_topk_prob and
        k > 1; DeepseekMoE: the chosen experts on their tokens only, plus the shared experts."""
        k = self.cfg["num_experts_per_tok"]
        logits = self.mm(x, self.w[f"{prefix}.gate.weight"].T)
        scores = np.exp(logits - logits.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        top = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
        weights = np.take_along_axis(scores, top, -1)
        if k > 1 and self.cfg["norm_topk_prob"]:
            weights = weights / (weights.sum(-1, keepdims=True) + np.float32(1e-20))
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            for slot in range(k):
                out[t] += weights[t, slot] * self.mlp(x[t : t + 1], f"{prefix}.experts.{top[t, slot]}")[0]
        return out + self.mlp(x, f"{prefix}.shared_experts")

    def attention(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """DeepseekAttention: rotate_half RoPE on q and k, GQA, softmax(q k^T / sqrt(K) + causal)."""
        cfg = self.cfg
        S, H, Hkv = x.shape[0], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        K = cfg["hidden_size"] // H
        q = self.linear(x, f"{prefix}.q_proj").reshape(S, H, K).transpose(1, 0, 2)
        k = self.linear(x, f"{prefix}.k_proj").reshape(S, Hkv, K).transpose(1, 0, 2)
        v = self.linear(x, f"{prefix}.v_proj").reshape(S, Hkv, K).transpose(1, 0, 2)
        inv = (1.0 / np.float32(cfg["rope_theta"]) ** (np.arange(0, K, 2, dtype=np.float32) / K)).astype(
            np.float32
        )
        freqs = np.arange(S, dtype=np.float32)[:, None] * inv[None]
        cos, sin = np.cos(np.concatenate([freqs, freqs], -1)), np.sin(np.concatenate([freqs, freqs], -1))

        def rotate(t: np.ndarray) -> np.ndarray:
            half = np.concatenate([-t[..., K // 2 :], t[..., : K // 2]], -1)
            return t * cos + half * sin

        q, k = rotate(q), rotate(k)
        k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)
        scores = np.einsum("hsk,htk->hst", q, k) / np.float32(np.sqrt(K))
        self.flops += 2 * H * S * S * K
        scores = np.where(np.tril(np.ones((S, S), bool)), scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.einsum("hst,htk->hsk", probs, v)
        self.flops += 2 * H * S * S * K
        return self.linear(out.transpose(1, 0, 2).reshape(S, H * K), f"{prefix}.o_proj")

    def last_logits(self, ids: list[int]) -> np.ndarray:
        x = self.w["model.embed_tokens.weight"][ids]
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"model.layers.{i}"
            x = x + self.attention(self.norm(x, f"{p}.input_layernorm"), f"{p}.self_attn")
            h = self.norm(x, f"{p}.post_attention_layernorm")
            x = x + (self.moe(h, f"{p}.mlp") if moe_layer(self.cfg, i) else self.mlp(h, f"{p}.mlp"))
        return self.linear(self.norm(x, "model.norm")[-1:], "lm_head")[0]


def _saved(tmp_path, cfg: dict = CONFIG):
    weights = random_weights(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file(weights, str(tmp_path / "model.safetensors"))
    return load_model(tmp_path), Reference(cfg, weights)


def test_prefill_and_decode_match_the_published_code(tmp_path) -> None:
    loaded, reference = _saved(tmp_path)
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 4)
    tokens = result.token_matrix[0].tolist()
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    for step, logits in enumerate(ours):
        theirs = reference.last_logits(PROMPT + tokens[:step])
        np.testing.assert_allclose(logits, theirs, atol=1e-4, rtol=0, err_msg=f"step {step}")
        assert int(np.argmax(logits)) == tokens[step]
    assert np.abs(ours[0]).max() > 0.05
    assert [layer.moe for layer in loaded.config.layers] == [False, False, True, False]


@pytest.mark.parametrize("seq", [1, 7])
def test_matmul_flops_equal_the_published_codes(tmp_path, seq: int) -> None:
    loaded, reference = _saved(tmp_path)
    reference.last_logits(list(range(1, seq + 1)))
    graph = build_prefill(loaded.config, F32, 1, seq).graph
    ours = sum(nc.cost.flops for nc in ir.analyze(graph).per_node
               if nc.node.kind in CONTRACTIONS and not nc.node.name.endswith(".rot"))  # fmt: skip
    assert ours == reference.flops


@pytest.mark.parametrize("chips", [2, 4])
def test_sharded_generation_matches_one_chip(tmp_path, chips: int) -> None:
    loaded, _ = _saved(tmp_path)
    one = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 4)
    many = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 4, chips=chips)
    np.testing.assert_allclose(many.prefill_logits, one.prefill_logits, atol=1e-5)
    for a, b in zip(many.decode_logits, one.decode_logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert many.token_matrix.tolist() == one.token_matrix.tolist()


def test_parameter_count_equals_the_published_models(tmp_path) -> None:
    loaded, reference = _saved(tmp_path)
    built = build_prefill(loaded.config, PRECISIONS["bf16"], 1, 1)
    assert sum(p.type.numel for p in built.checkpoint_params()) == sum(w.size for w in reference.w.values())


def test_batched_padded_prefill_matches_single_runs(tmp_path) -> None:
    loaded, _ = _saved(tmp_path)
    prompts = [PROMPT, [7, 1, 60], [11, 12, 13, 14, 15]]
    batched = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 2)
    for b, prompt in enumerate(prompts):
        single = generate(loaded.config, loaded.checkpoint.load, [prompt], F32, 2)
        np.testing.assert_allclose(batched.prefill_logits[b], single.prefill_logits[0], atol=1e-5)
        assert batched.token_matrix[b].tolist() == single.token_matrix[0].tolist()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scoring_func": "sigmoid"}, "scoring_func: expected 'softmax', got 'sigmoid'"),
        ({"rope_scaling": {"type": "yarn", "factor": 2.0}}, "type 'yarn' is not supported for deepseek"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok (9) exceeds the 8 experts"),
        ({"moe_layer_freq": 0}, "moe_layer_freq: expected an integer from 1"),
        ({"n_shared_experts": -1}, "n_shared_experts: expected an integer from 0"),
    ],
)
def test_bad_fields_are_one_line_errors(change: dict, message: str) -> None:
    with pytest.raises(FrontendError, match=re.escape(message)) as e:
        read_model_config(RawConfig({**CONFIG, **change}, "config.json"), "m")
    assert "\n" not in str(e.value) and str(e.value).startswith("config.json: ")


def test_a_config_without_routed_experts_is_dense() -> None:
    """DeepseekDecoderLayer builds an MoE MLP only where n_routed_experts is set."""
    dense = {k: v for k, v in CONFIG.items() if k != "n_routed_experts"}
    cfg = read_model_config(RawConfig(dense, "config.json"), "m")
    assert cfg.moe is None and not any(layer.moe for layer in cfg.layers)
