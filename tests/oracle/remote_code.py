"""Numpy references for families transformers does not ship (remote code), written here from each
family's published modelling code, read but not copied:

- `exaone` (EXAONE 3.0 / 3.5): the hub's modeling_exaone.py / configuration_exaone.py
  (LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct) are not reachable from here; read through LG's own
  conversion of these checkpoints to EXAONE 4, lgai-exaone/transformers
  src/transformers/models/exaone4/convert_old_exaone_to_exaone4_compatible.py at
  aad0b7c87f46f126d69d172d756c35852cb456ba (the name map, and that the block is EXAONE 4's with
  pre-norms and no q/k norm: a Llama block), the copy of configuration_exaone.py vLLM keeps
  (field names, `num_layers`, `layer_norm_epsilon`, `activation_function`, the 4 x hidden MLP
  default) and an EXAONE 3.5 configuration_exaone.py (defaults, rope_scaling types).
- `internlm2` (internlm/internlm2_5-7b-chat modeling_internlm2.py): read in the copy
  NanSang2000/S1mpleAgent modeling_internlm2.py at 0143463e4bc3708426dc7125751d76a3be063334:
  `wqkv` rows per KV head as (its G query heads, its key, its value), `wo`, `feed_forward.w1`
  (gate) / `w3` (up) / `w2` (down), `attention_norm` / `ffn_norm`, `tok_embeddings`, `output`;
  `bias` on wqkv and wo; dynamic NTK: the cos/sin table rebuilt for the cache's length once it
  passes max_position_embeddings, keys rotated as they are written to the cache.
- `minicpm` (openbmb/MiniCPM-2B-sft-bf16, MiniCPM-MoE-8x2B modeling_minicpm.py): read in the
  copy wxthu/nas_tuner modeling_minicpm.py at 316794f27329462e7e899a75a126972a6e44074b (the same
  MiniCPM block: embeddings times `scale_emb`, each branch times scale_depth / sqrt(layers) before
  the residual, the final hidden state divided by hidden / dim_model_base before the LM head),
  and the MoE layer as vLLM and MLC-LLM load it: a `gate` linear, experts `experts.{e}.w1` (gate)
  / `w3` (up) / `w2` (down), top-k of the softmax renormalised (the softmax of the top-k logits).

The reference runs in float64 with its own KV cache (prefill, then one token at a time), so a
step's keys keep the rotation they were written with, as in the published code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class Sizes:
    """The geometry every remote family has, under its own field names."""

    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    layers: int
    max_positions: int
    eps: float
    theta: float
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def exaone_sizes(raw: dict) -> Sizes:
    """ExaoneConfig's reading of a config, its defaults included."""
    hidden = raw.get("hidden_size", 2048)
    heads = raw.get("num_attention_heads", 32)
    return Sizes(
        raw.get("vocab_size", 102400), hidden, heads, raw.get("num_key_value_heads") or heads,
        raw.get("intermediate_size") or 4 * hidden, raw.get("num_layers", 32),
        raw.get("max_position_embeddings", 2048), raw.get("layer_norm_epsilon", 1e-5),
        raw.get("rope_theta", 10000.0), raw.get("tie_word_embeddings", True),
    )  # fmt: skip


def llama_like_sizes(raw: dict, tied: bool, eps: float, vocab: int, intermediate: int) -> Sizes:
    """InternLM2Config / MiniCPMConfig (both Llama's config with other defaults)."""
    heads = raw.get("num_attention_heads", 32)
    return Sizes(
        raw.get("vocab_size", vocab), raw.get("hidden_size", 4096), heads,
        raw.get("num_key_value_heads") or heads, raw.get("intermediate_size", intermediate),
        raw.get("num_hidden_layers", 32), raw.get("max_position_embeddings", 2048),
        raw.get("rms_norm_eps", eps), raw.get("rope_theta", 10000.0),
        raw.get("tie_word_embeddings", tied),
    )  # fmt: skip


def internlm2_sizes(raw: dict) -> Sizes:
    return llama_like_sizes(raw, tied=False, eps=1e-6, vocab=103168, intermediate=11008)


def minicpm_sizes(raw: dict) -> Sizes:
    return llama_like_sizes(raw, tied=True, eps=1e-6, vocab=32000, intermediate=11008)


# -- the published modules' parameters: name -> shape ------------------------------------------


def exaone_shapes(raw: dict) -> dict[str, tuple[int, ...]]:
    s = exaone_sizes(raw)
    d, k = s.hidden, s.head_dim
    shapes = {"transformer.wte.weight": (s.vocab, d), "transformer.ln_f.weight": (d,)}
    for i in range(s.layers):
        p = f"transformer.h.{i}"
        shapes |= {f"{p}.ln_1.weight": (d,), f"{p}.ln_2.weight": (d,)}
        for n, rows in (("q", s.heads * k), ("k", s.kv_heads * k), ("v", s.kv_heads * k)):
            shapes[f"{p}.attn.attention.{n}_proj.weight"] = (rows, d)
        shapes[f"{p}.attn.attention.out_proj.weight"] = (d, s.heads * k)
        shapes |= {
            f"{p}.mlp.c_fc_0.weight": (s.intermediate, d),
            f"{p}.mlp.c_fc_1.weight": (s.intermediate, d),
        }
        shapes[f"{p}.mlp.c_proj.weight"] = (d, s.intermediate)
    if not s.tied:
        shapes["lm_head.weight"] = (s.vocab, d)
    return shapes


def internlm2_shapes(raw: dict) -> dict[str, tuple[int, ...]]:
    s = internlm2_sizes(raw)
    d, k, bias = s.hidden, s.head_dim, raw.get("bias", True)
    shapes = {"model.tok_embeddings.weight": (s.vocab, d), "model.norm.weight": (d,)}
    for i in range(s.layers):
        p = f"model.layers.{i}"
        shapes |= {f"{p}.attention_norm.weight": (d,), f"{p}.ffn_norm.weight": (d,)}
        shapes[f"{p}.attention.wqkv.weight"] = ((s.heads + 2 * s.kv_heads) * k, d)
        shapes[f"{p}.attention.wo.weight"] = (d, s.heads * k)
        if bias:
            shapes |= {
                f"{p}.attention.wqkv.bias": ((s.heads + 2 * s.kv_heads) * k,),
                f"{p}.attention.wo.bias": (d,),
            }
        shapes |= {
            f"{p}.feed_forward.w1.weight": (s.intermediate, d),
            f"{p}.feed_forward.w3.weight": (s.intermediate, d),
        }
        shapes[f"{p}.feed_forward.w2.weight"] = (d, s.intermediate)
    if not s.tied:
        shapes["output.weight"] = (s.vocab, d)
    return shapes


def minicpm_shapes(raw: dict) -> dict[str, tuple[int, ...]]:
    s = minicpm_sizes(raw)
    d, k, f, experts = s.hidden, s.head_dim, s.intermediate, raw.get("num_experts", 0)
    shapes = {"model.embed_tokens.weight": (s.vocab, d), "model.norm.weight": (d,)}
    for i in range(s.layers):
        p = f"model.layers.{i}"
        shapes |= {f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,)}
        for n, rows in (("q", s.heads * k), ("k", s.kv_heads * k), ("v", s.kv_heads * k)):
            shapes[f"{p}.self_attn.{n}_proj.weight"] = (rows, d)
        shapes[f"{p}.self_attn.o_proj.weight"] = (d, s.heads * k)
        if experts:
            shapes[f"{p}.mlp.gate.weight"] = (experts, d)
            for e in range(experts):
                q = f"{p}.mlp.experts.{e}"
                shapes |= {f"{q}.w1.weight": (f, d), f"{q}.w3.weight": (f, d), f"{q}.w2.weight": (d, f)}
        else:
            shapes |= {f"{p}.mlp.gate_proj.weight": (f, d), f"{p}.mlp.up_proj.weight": (f, d)}
            shapes[f"{p}.mlp.down_proj.weight"] = (d, f)
    if not s.tied:
        shapes["lm_head.weight"] = (s.vocab, d)
    return shapes


SHAPES: dict[str, Callable[[dict], dict[str, tuple[int, ...]]]] = {
    "exaone": exaone_shapes,
    "internlm2": internlm2_shapes,
    "minicpm": minicpm_shapes,
}


def random_checkpoint(raw: dict, directory: Path, seed: int = 0) -> Weights:
    """The published module's parameters, 0.1 * randn (norm scales around 1), saved with the
    config as a checkpoint directory."""
    rng = np.random.default_rng(seed)
    weights = {
        name: (0.1 * rng.standard_normal(shape) + float("norm" in name or ".ln_" in name)).astype(np.float32)
        for name, shape in SHAPES[raw["model_type"]](raw).items()
    }  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw))
    save_file(weights, str(directory / "model.safetensors"))
    return weights


# -- the forward pass -------------------------------------------------------------------------


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _rotate(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """rotate_half RoPE: element j pairs with j + K/2. x [T, H, K]."""
    freqs = positions[:, None] * inv_freq[None, :]
    cos, sin = np.cos(np.concatenate([freqs, freqs], -1)), np.sin(np.concatenate([freqs, freqs], -1))
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


@dataclass
class Block:
    """One family's parts, as functions of the weights: the reference is the shared Llama-shaped
    loop below with these filled in from each family's published code."""

    qkv: Callable[[Weights, int, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
    out: Callable[[Weights, int, np.ndarray], np.ndarray]
    ffn: Callable[[Weights, int, np.ndarray], np.ndarray]
    norms: tuple[str, str]  # pre-attention and pre-FFN norm names, with {i}
    embed: str
    final_norm: str
    head: str
    inv_freq: Callable[[int], np.ndarray]  # the table for a cache of that many positions
    embed_scale: float = 1.0
    branch_scale: float = 1.0
    head_divisor: float = 1.0


class Reference:
    """Prefill then decode, one token at a time, through a per-layer KV cache."""

    def __init__(self, sizes: Sizes, block: Block, weights: Weights) -> None:
        self.s, self.b = sizes, block
        self.w = {n: a.astype(np.float64) for n, a in weights.items()}
        self.cache: list[tuple[np.ndarray, np.ndarray]] = []

    def step(self, tokens: list[int]) -> np.ndarray:
        """Logits at the last of `tokens`, which follow the cached ones."""
        s, b, w = self.s, self.b, self.w
        past = self.cache[0][0].shape[0] if self.cache else 0
        positions = np.arange(past, past + len(tokens), dtype=np.float64)
        inv_freq = b.inv_freq(past + len(tokens))
        x = w[b.embed][tokens] * b.embed_scale
        new_cache = []
        for i in range(s.layers):
            h = _rms(x, w[b.norms[0].format(i=i)], s.eps)
            q, k, v = b.qkv(w, i, h)
            q, k = _rotate(q, positions, inv_freq), _rotate(k, positions, inv_freq)
            if self.cache:
                k = np.concatenate([self.cache[i][0], k])
                v = np.concatenate([self.cache[i][1], v])
            new_cache.append((k, v))
            group = s.heads // s.kv_heads
            kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhk,shk->hqs", q, kk) / math.sqrt(s.head_dim)
            visible = np.arange(k.shape[0])[None, :] <= (past + np.arange(len(tokens)))[:, None]
            scores = np.where(visible[None], scores, -np.inf)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            attn = np.einsum("hqs,shk->qhk", p, vv).reshape(len(tokens), -1)
            x = x + b.out(w, i, attn) * b.branch_scale
            x = x + b.ffn(w, i, _rms(x, w[b.norms[1].format(i=i)], s.eps)) * b.branch_scale
        self.cache = new_cache
        last = _rms(x[-1], w[b.final_norm], s.eps) / b.head_divisor
        return (w[b.embed] if s.tied else w[b.head]) @ last


def _linear(w: Weights, name: str, x: np.ndarray, bias: bool = False) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    return y + w[f"{name}.bias"] if bias else y


def _gated(w: Weights, gate: str, up: str, down: str, x: np.ndarray) -> np.ndarray:
    return _linear(w, down, _silu(_linear(w, gate, x)) * _linear(w, up, x))


def _default_inv_freq(theta: float, dim: int) -> np.ndarray:
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def exaone_reference(raw: dict, weights: Weights) -> Reference:
    s = exaone_sizes(raw)
    k = s.head_dim
    scaling = raw.get("rope_scaling") or {}
    assert scaling.get("rope_type", "default") in ("default", "llama3"), "the tests use default or llama3"

    def inv_freq(_: int) -> np.ndarray:
        inv = _default_inv_freq(s.theta, k)
        if scaling.get("rope_type") != "llama3":
            return inv
        # Llama 3.1's scaling, as transformers' _compute_llama3_parameters (the published code calls it)
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > original / low, inv / factor, inv)
        smooth = (original / wavelen - low) / (high - low)
        medium = (wavelen <= original / low) & (wavelen >= original / high)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)

    def qkv(w: Weights, i: int, h: np.ndarray):
        p, t = f"transformer.h.{i}.attn.attention", h.shape[0]
        return tuple(_linear(w, f"{p}.{n}_proj", h).reshape(t, -1, k) for n in "qkv")  # type: ignore[return-value]

    block = Block(
        qkv=qkv,
        out=lambda w, i, a: _linear(w, f"transformer.h.{i}.attn.attention.out_proj", a),
        ffn=lambda w, i, x: _gated(
            w, *(f"transformer.h.{i}.mlp.{n}" for n in ("c_fc_0", "c_fc_1", "c_proj")), x
        ),
        norms=("transformer.h.{i}.ln_1.weight", "transformer.h.{i}.ln_2.weight"),
        embed="transformer.wte.weight",
        final_norm="transformer.ln_f.weight",
        head="lm_head.weight",
        inv_freq=inv_freq,
    )
    return Reference(s, block, weights)


def internlm2_reference(raw: dict, weights: Weights) -> Reference:
    s = internlm2_sizes(raw)
    k, group, bias = s.head_dim, s.heads // s.kv_heads, raw.get("bias", True)
    scaling = raw.get("rope_scaling") or {}

    def inv_freq(length: int) -> np.ndarray:
        """The published table: built for max_position_embeddings; past it (dynamic) rebuilt for
        the cache's length with base * (factor * length / max - (factor - 1)) ** (K / (K - 2));
        linear divides the positions by the factor, which is the frequencies here."""
        base = s.theta
        if scaling.get("type") == "dynamic" and length > s.max_positions:
            factor = scaling["factor"]
            base = base * (factor * length / s.max_positions - (factor - 1)) ** (k / (k - 2))
        inv = _default_inv_freq(base, k)
        return inv / scaling["factor"] if scaling.get("type") == "linear" else inv

    def qkv(w: Weights, i: int, h: np.ndarray):
        t = h.shape[0]
        fused = _linear(w, f"model.layers.{i}.attention.wqkv", h, bias).reshape(t, s.kv_heads, group + 2, k)
        return fused[:, :, :group].reshape(t, s.heads, k), fused[:, :, group], fused[:, :, group + 1]

    block = Block(
        qkv=qkv,
        out=lambda w, i, a: _linear(w, f"model.layers.{i}.attention.wo", a, bias),
        ffn=lambda w, i, x: _gated(w, *(f"model.layers.{i}.feed_forward.{n}" for n in ("w1", "w3", "w2")), x),
        norms=("model.layers.{i}.attention_norm.weight", "model.layers.{i}.ffn_norm.weight"),
        embed="model.tok_embeddings.weight",
        final_norm="model.norm.weight",
        head="output.weight",
        inv_freq=inv_freq,
    )
    return Reference(s, block, weights)


def minicpm_reference(raw: dict, weights: Weights) -> Reference:
    s = minicpm_sizes(raw)
    k, experts, top_k = s.head_dim, raw.get("num_experts", 0), raw.get("num_experts_per_tok", 2)

    def qkv(w: Weights, i: int, h: np.ndarray):
        p, t = f"model.layers.{i}.self_attn", h.shape[0]
        return tuple(_linear(w, f"{p}.{n}_proj", h).reshape(t, -1, k) for n in "qkv")  # type: ignore[return-value]

    def ffn(w: Weights, i: int, x: np.ndarray) -> np.ndarray:
        p = f"model.layers.{i}.mlp"
        if not experts:
            return _gated(w, f"{p}.gate_proj", f"{p}.up_proj", f"{p}.down_proj", x)
        logits = _linear(w, f"{p}.gate", x)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            chosen = np.argsort(-logits[t])[:top_k]
            weights_t = np.exp(logits[t, chosen] - logits[t, chosen].max())
            weights_t /= weights_t.sum()
            for e, g in zip(chosen, weights_t, strict=True):
                q = f"{p}.experts.{e}"
                out[t] += g * _gated(w, f"{q}.w1", f"{q}.w3", f"{q}.w2", x[t : t + 1])[0]
        return out

    block = Block(
        qkv=qkv,
        out=lambda w, i, a: _linear(w, f"model.layers.{i}.self_attn.o_proj", a),
        ffn=ffn,
        norms=("model.layers.{i}.input_layernorm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
        embed="model.embed_tokens.weight",
        final_norm="model.norm.weight",
        head="lm_head.weight",
        inv_freq=lambda _: _default_inv_freq(s.theta, k),
        embed_scale=raw.get("scale_emb", 1),
        branch_scale=raw.get("scale_depth", 1) / math.sqrt(s.layers),
        head_divisor=s.hidden / raw.get("dim_model_base", 1),
    )
    return Reference(s, block, weights)


REFERENCES: dict[str, Callable[[dict, Weights], Reference]] = {
    "exaone": exaone_reference,
    "internlm2": internlm2_reference,
    "minicpm": minicpm_reference,
}


def reference_logits(raw: dict, weights: Weights, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The prompt's last logits, then one per fed token."""
    ref = REFERENCES[raw["model_type"]](raw, weights)
    out = [ref.step(prompt)]
    for t in tokens:
        out.append(ref.step([t]))
    return out
