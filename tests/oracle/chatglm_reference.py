"""A numpy reference of ChatGLM2/3 and GLM-4-9B-chat, written from THUDM's published modelling code
(remote code; transformers ships no `chatglm` model), with tiny random checkpoints in its tensor
names and layouts.

Source: github.com/THUDM/language_filter_chatglm3, modeling_chatglm.py at commit
fc4c6766f9fc1023794afd66e894924992ab1c75 (ChatGLM3-6B's modelling file): RotaryEmbedding,
apply_rotary_pos_emb, RMSNorm, CoreAttention, SelfAttention, MLP, GLMBlock, GLMTransformer,
Embedding, ChatGLMModel, ChatGLMForConditionalGeneration. `rope_ratio` (GLM-4-9B-chat,
ChatGLM3-6B-32k) multiplies RotaryEmbedding's base 10000, as their published files do
(`base = base * self.rope_ratio`). Parameter shapes are the ones those modules construct;
`apply_query_key_layer_scaling` multiplies and divides the scores by the layer number, which
changes nothing numerically, and the torch >= 2 path uses plain 1/sqrt(kv_channels).

The reference runs in float64 and counts the FLOPs of its matrix products (2 m n k each) as
torch's FlopCounterMode counts an eager run's, the LM head on the last position only
(`return_last_logit`, as generation runs it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

# ChatGLM3-style tiny config: 2 KV groups for 4 query heads, heads 16 wide (kv_channels, not
# hidden / heads = 8) so RoPE turns 8 dims in interleaved pairs, QKV bias, rope_ratio far from 1.
TINY = dict(
    model_type="chatglm",
    architectures=["ChatGLMModel"],
    num_layers=3,
    padded_vocab_size=96,
    vocab_size=96,
    hidden_size=32,
    ffn_hidden_size=48,
    kv_channels=16,
    num_attention_heads=4,
    multi_query_attention=True,
    multi_query_group_num=2,
    seq_length=64,
    layernorm_epsilon=1e-5,
    rmsnorm=True,
    add_qkv_bias=True,
    add_bias_linear=False,
    apply_residual_connection_post_layernorm=False,
    post_layer_norm=True,
    rope_ratio=0.01,
    original_rope=True,
    tie_word_embeddings=False,
    torch_dtype="float32",
)
# chatglm_groups_as_heads: multi_query_attention with as many groups as query heads, whose q, k
# and v still split in blocks (all q rows, then k, then v), not per head.
# chatglm_switches: every switch the other way: one KV head per query head (per-head q, k, v
# rows), LayerNorm with bias, biases on every linear, residuals from the norms' outputs, no final
# norm.
VARIANTS = {
    "chatglm": TINY,
    "chatglm_groups_as_heads": dict(TINY, multi_query_group_num=4),
    "chatglm_switches": dict(
        TINY,
        multi_query_attention=False,
        rmsnorm=False,
        add_qkv_bias=False,
        add_bias_linear=True,
        apply_residual_connection_post_layernorm=True,
        post_layer_norm=False,
    ),
}


def parameter_shapes(c: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter ChatGLMForConditionalGeneration builds for config `c`, by name."""
    heads, head_dim, hidden, ffn = (
        c["num_attention_heads"],
        c["kv_channels"],
        c["hidden_size"],
        c["ffn_hidden_size"],
    )
    groups = c["multi_query_group_num"] if c["multi_query_attention"] else heads
    qkv = (heads + 2 * groups) * head_dim
    linear_bias = c["add_bias_linear"]
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.embedding.word_embeddings.weight": (c["padded_vocab_size"], hidden)
    }

    def norm(name: str) -> None:
        shapes[f"{name}.weight"] = (hidden,)
        if not c["rmsnorm"]:
            shapes[f"{name}.bias"] = (hidden,)

    def linear(name: str, out: int, inp: int, bias: bool) -> None:
        shapes[f"{name}.weight"] = (out, inp)
        if bias:
            shapes[f"{name}.bias"] = (out,)

    for i in range(c["num_layers"]):
        pre = f"transformer.encoder.layers.{i}."
        norm(pre + "input_layernorm")
        linear(pre + "self_attention.query_key_value", qkv, hidden, linear_bias or c["add_qkv_bias"])
        linear(pre + "self_attention.dense", hidden, heads * head_dim, linear_bias)
        norm(pre + "post_attention_layernorm")
        linear(pre + "mlp.dense_h_to_4h", 2 * ffn, hidden, linear_bias)
        linear(pre + "mlp.dense_4h_to_h", hidden, ffn, linear_bias)
    if c["post_layer_norm"]:
        norm("transformer.encoder.final_layernorm")
    shapes["transformer.output_layer.weight"] = (c["padded_vocab_size"], hidden)
    return shapes


def random_checkpoint(c: dict, directory: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """0.1 * randn weights (norm scales around 1) saved with the config as a checkpoint folder."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in parameter_shapes(c).items():
        w = 0.1 * rng.standard_normal(shape)
        if "layernorm" in name and name.endswith(".weight"):
            w += 1.0
        weights[name] = w.astype(np.float32)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(c))
    return weights


class Reference:
    """ChatGLMForConditionalGeneration's forward for one sequence with its KV cache, in float64."""

    def __init__(self, c: dict, weights: dict[str, np.ndarray]) -> None:
        self.c, self.w = c, {k: v.astype(np.float64) for k, v in weights.items()}
        self.flops = 0
        self.cache: list[tuple[np.ndarray, np.ndarray] | None] = [None] * c["num_layers"]
        self.length = 0

    def _mm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.flops += 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * int(np.prod(a.shape[:-2]))
        return a @ b

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = self._mm(x, self.w[f"{name}.weight"].T)
        bias = self.w.get(f"{name}.bias")
        return y if bias is None else y + bias

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        eps, w = self.c["layernorm_epsilon"], self.w[f"{name}.weight"]
        if self.c["rmsnorm"]:  # RMSNorm
            return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))
        mean = x.mean(-1, keepdims=True)  # torch.nn.LayerNorm
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w + self.w[f"{name}.bias"]

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """apply_rotary_pos_emb: x [s, heads, hd]; RotaryEmbedding(hd // 2) rotates its first
        hd // 2 dims in pairs (x0, x1), (x2, x3), ..."""
        n_elem = self.c["kv_channels"] // 2
        base = 10000 * self.c["rope_ratio"]
        theta = 1.0 / (base ** (np.arange(0, n_elem, 2, dtype=np.float64) / n_elem))
        angle = positions[:, None] * theta[None, :]  # [s, n_elem / 2]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        rot_dim = 2 * theta.size
        rot, rest = x[..., :rot_dim], x[..., rot_dim:]
        pairs = rot.reshape(*rot.shape[:-1], rot_dim // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1).reshape(rot.shape)
        return np.concatenate([out, rest], axis=-1)

    def _attention(self, i: int, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        c = self.c
        heads, hd = c["num_attention_heads"], c["kv_channels"]
        groups = c["multi_query_group_num"] if c["multi_query_attention"] else heads
        pre = f"transformer.encoder.layers.{i}.self_attention"
        mixed = self._linear(x, f"{pre}.query_key_value")
        s = x.shape[0]
        if c["multi_query_attention"]:
            q, k, v = np.split(mixed, [heads * hd, (heads + groups) * hd], axis=-1)
            q, k, v = q.reshape(s, heads, hd), k.reshape(s, groups, hd), v.reshape(s, groups, hd)
        else:  # [s, heads, 3 hd] split along the last dim
            q, k, v = np.split(mixed.reshape(s, heads, 3 * hd), 3, axis=-1)
        q, k = self._rope(q, positions), self._rope(k, positions)
        if self.cache[i] is not None:
            k, v = np.concatenate([self.cache[i][0], k]), np.concatenate([self.cache[i][1], v])
        self.cache[i] = (k, v)
        k, v = np.repeat(k, heads // groups, axis=1), np.repeat(v, heads // groups, axis=1)  # expand groups
        scores = self._mm(q.transpose(1, 0, 2), k.transpose(1, 2, 0)) / math.sqrt(hd)  # [heads, s, sk]
        sk = k.shape[0]
        causal = np.arange(sk)[None, :] <= (sk - s + np.arange(s))[:, None]
        scores = np.where(causal[None], scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = self._mm(probs, v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(s, heads * hd)
        return self._linear(context, f"{pre}.dense")

    def _block(self, i: int, h: np.ndarray, positions: np.ndarray) -> np.ndarray:
        pre = f"transformer.encoder.layers.{i}."
        post_ln = self.c["apply_residual_connection_post_layernorm"]
        ln = self._norm(h, pre + "input_layernorm")
        h2 = (ln if post_ln else h) + self._attention(i, ln, positions)
        ln2 = self._norm(h2, pre + "post_attention_layernorm")
        gate, up = np.split(self._linear(ln2, pre + "mlp.dense_h_to_4h"), 2, axis=-1)
        swiglu = gate / (1 + np.exp(-gate)) * up
        return (ln2 if post_ln else h2) + self._linear(swiglu, pre + "mlp.dense_4h_to_h")

    def forward(self, ids: list[int]) -> np.ndarray:
        """Logits at the last of `ids`, fed after the tokens already cached."""
        positions = np.arange(self.length, self.length + len(ids), dtype=np.float64)
        self.length += len(ids)
        h = self.w["transformer.embedding.word_embeddings.weight"][ids]
        for i in range(self.c["num_layers"]):
            h = self._block(i, h, positions)
        if self.c["post_layer_norm"]:
            h = self._norm(h, "transformer.encoder.final_layernorm")
        return self._linear(h[-1:], "transformer.output_layer")[0]


def greedy(
    c: dict, weights: dict[str, np.ndarray], prompt: list[int], steps: int
) -> tuple[list[np.ndarray], list[int]]:
    """The prompt's logits and `steps` greedy decode steps' (each feeding the previous argmax)."""
    ref = Reference(c, weights)
    logits = [ref.forward(prompt)]
    tokens = [int(np.argmax(logits[0]))]
    for _ in range(steps):
        logits.append(ref.forward([tokens[-1]]))
        tokens.append(int(np.argmax(logits[-1])))
    return logits, tokens


def prefill_flops(c: dict, weights: dict[str, np.ndarray], seq: int) -> int:
    """The reference's matrix-product FLOPs for a prompt of `seq` tokens."""
    ref = Reference(c, weights)
    ref.forward(list(range(seq)))
    return ref.flops
