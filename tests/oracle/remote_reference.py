"""numpy references for remote-code families (no transformers class), each written from the
published modelling code it names; float64 throughout, whole sequences (a causal model's logits at
position t need no cache: decode steps are checked against the forward over prompt + fed tokens).

- DeciLM / nemotron-nas: `modeling_decilm.py` as published with nvidia/Llama-3_3-Nemotron-Super-49B-v1
  (read from the copy in DeltaVector1/Chat-Prompters, commit 760b19a6890e94fdd3406244b0ece74e73c8d9de):
  DeciLMDecoderLayer, DeciLMAttention, DeciLMMLP, DeciLMLinearAttention, DeciLMLinearMLP,
  `_ffn_mult_to_intermediate_size`.
- Phi-3-small / phi3small: microsoft/Phi-3-small-8k-instruct's `modeling_phi3_small.py`
  (Phi3SmallSelfAttention._split_heads, gegelu, Phi3SmallMLP, Phi3SmallModel, Phi3SmallForCausalLM),
  `positional_embedding.py` (RotaryEmbedding: rotate_half, positions x rope_position_scale) and
  `triton_flash_blocksparse_attn.py` (`_get_sparse_attn_mask`: the per-head block pattern), read
  from copies whose repositories the search index does not name (file ids 7428361816, 6779687675,
  21954023968 of the tool's index), and `configuration_phi3_small.py` (id 7375870458). The 128k
  models' LongRoPE from the same `positional_embedding.py` (id 6779687675: LongRopeConfig,
  RotaryEmbedding.forward's is_longrope branch and _calc_mscale), whose forward picks the factors
  and mscale by the sequence length including the cache. Not reproduced: the head's fill of the
  tokenizer's dummy token ids (tcpc does not apply it either).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

Weights = Mapping[str, np.ndarray]


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rotate_pairs(x: np.ndarray, angle: np.ndarray, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """[S, H, K] rotated by `angle` [S, K/2] (pairs k and k + K/2, transformers' rotate_half), cos and
    sin times `scale` (one number, or one per position)."""
    K = x.shape[-1]
    scale = np.reshape(scale, (-1, 1)) if np.ndim(scale) else scale
    full = np.concatenate([angle, angle], -1)
    cos, sin = np.cos(full) * scale, np.sin(full) * scale
    half = np.concatenate([-x[..., K // 2:], x[..., : K // 2]], -1)
    return x * cos[:, None, :] + half * sin[:, None, :]


def rotate_half_rope(x: np.ndarray, theta: float) -> np.ndarray:
    """[S, H, K] rotated by RoPE at positions 0..S-1."""
    S, _, K = x.shape
    inv = 1.0 / theta ** (np.arange(0, K, 2) / K)
    return rotate_pairs(x, np.arange(S)[:, None] * inv[None, :])


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, allowed: np.ndarray | None = None,
           ) -> np.ndarray:  # fmt: skip
    """Softmax(q k^T * scale) v per head, causal (and `allowed` [H, S, S] where given): q [S, H, K],
    k and v [S, Hkv, K], each KV head shared by H / Hkv consecutive query heads (repeat_kv)."""
    S, H, _ = q.shape
    groups = H // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    scores = np.einsum("shk,thk->hst", q, k) * scale
    mask = np.tril(np.ones((S, S), bool))[None]
    if allowed is not None:
        mask = mask & allowed
    scores = np.where(mask, scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hst,thk->shk", p, v)


# --- DeciLM (nemotron-nas) ----------------------------------------------------------------------


def decilm_ffn_width(ffn_mult: float, hidden: int) -> int:
    """`_ffn_mult_to_intermediate_size`: int(2 x mult x hidden / 3) up to a multiple of 256."""
    n = int(2 * round(ffn_mult, 6) * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def decilm_shapes(config: Mapping) -> dict[str, tuple[int, ...]]:
    """Every parameter DeciLMForCausalLM builds for `config` (no biases: attention_bias and mlp_bias
    false, as the published models have them), by its state-dict name."""
    D, H, V = config["hidden_size"], config["num_attention_heads"], config["vocab_size"]
    K = D // H
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
    for i, block in enumerate(config["block_configs"]):
        pre, attn, ffn = f"model.layers.{i}", block["attention"], block["ffn"]
        if not attn["no_op"]:
            shapes[f"{pre}.input_layernorm.weight"] = (D,)
            if attn["replace_with_linear"]:
                shapes[f"{pre}.self_attn.linear_attn.weight"] = (D, D)
            else:
                kv = H // attn["n_heads_in_group"]
                rows = {"q_proj": H * K, "k_proj": kv * K, "v_proj": kv * K, "o_proj": D}
                shapes.update({f"{pre}.self_attn.{proj}.weight": (n, D) for proj, n in rows.items()})
        if not ffn["no_op"]:
            shapes[f"{pre}.post_attention_layernorm.weight"] = (D,)
            if ffn["replace_with_linear"]:
                shapes[f"{pre}.mlp.linear_mlp.weight"] = (D, D)
            else:
                F = decilm_ffn_width(ffn["ffn_mult"], D)
                shapes.update({f"{pre}.mlp.gate_proj.weight": (F, D), f"{pre}.mlp.up_proj.weight": (F, D),
                               f"{pre}.mlp.down_proj.weight": (D, F)})  # fmt: skip
    return shapes


def decilm_logits(config: Mapping, w: Weights, ids: list[int]) -> np.ndarray:
    """[S, V] logits of DeciLMForCausalLM (default RoPE, silu) for one sequence of token ids."""
    D, H, eps = config["hidden_size"], config["num_attention_heads"], config["rms_norm_eps"]
    K, theta = D // H, config.get("rope_theta", 10000.0)
    x = w["model.embed_tokens.weight"][ids]
    S = len(ids)
    for i, block in enumerate(config["block_configs"]):
        pre, attn, ffn = f"model.layers.{i}", block["attention"], block["ffn"]
        if not attn["no_op"]:
            n = rms_norm(x, w[f"{pre}.input_layernorm.weight"], eps)
            if attn["replace_with_linear"]:
                a = n @ w[f"{pre}.self_attn.linear_attn.weight"].T
            else:
                kv = H // attn["n_heads_in_group"]
                q = (n @ w[f"{pre}.self_attn.q_proj.weight"].T).reshape(S, H, K)
                k = (n @ w[f"{pre}.self_attn.k_proj.weight"].T).reshape(S, kv, K)
                v = (n @ w[f"{pre}.self_attn.v_proj.weight"].T).reshape(S, kv, K)
                o = attend(rotate_half_rope(q, theta), rotate_half_rope(k, theta), v, 1 / math.sqrt(K))
                a = o.reshape(S, D) @ w[f"{pre}.self_attn.o_proj.weight"].T
            x = x + a
        if not ffn["no_op"]:
            n = rms_norm(x, w[f"{pre}.post_attention_layernorm.weight"], eps)
            if ffn["replace_with_linear"]:
                m = n @ w[f"{pre}.mlp.linear_mlp.weight"].T
            else:
                gate, up = n @ w[f"{pre}.mlp.gate_proj.weight"].T, n @ w[f"{pre}.mlp.up_proj.weight"].T
                m = (silu(gate) * up) @ w[f"{pre}.mlp.down_proj.weight"].T
            x = x + m
    return rms_norm(x, w["model.norm.weight"], eps) @ w["lm_head.weight"].T


# --- Phi-3-small (phi3small) --------------------------------------------------------------------


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gegelu(x: np.ndarray, limit: float) -> np.ndarray:
    """Even columns through quick GELU (clamped above), odd ones + 1 (clamped both ways)."""
    a_gelu, a_linear = np.minimum(x[..., ::2], limit), np.clip(x[..., 1::2], -limit, limit)
    return a_gelu / (1.0 + np.exp(-1.702 * a_gelu)) * (a_linear + 1)


def phi3small_sparse(config: Mapping, S: int) -> np.ndarray:
    """[H, S, S] the block pattern of `_get_sparse_attn_mask` (heterogeneous heads unless
    blocksparse_homo_head_pattern), expanded to tokens."""
    H, block = config["num_attention_heads"], config["blocksparse_block_size"]
    local, stride = config["blocksparse_num_local_blocks"], config["blocksparse_vert_stride"]
    blocks = -(-S // block)
    qb, kb = np.arange(blocks)[:, None], np.arange(blocks)[None]
    step = 0 if config["blocksparse_homo_head_pattern"] else max(1, int(stride / H))
    stripes = [(kb + h * step + 1) % stride == 0 for h in range(H)]
    pattern = np.stack([(qb >= kb) & ((qb - kb < local) | stripe) for stripe in stripes])
    return np.kron(pattern, np.ones((block, block), bool))[:, :S, :S]


def phi3small_shapes(config: Mapping) -> dict[str, tuple[int, ...]]:
    """Every parameter Phi3SmallForCausalLM builds (the LM head tied to the embedding, once)."""
    D, H, V = config["hidden_size"], config["num_attention_heads"], config["vocab_size"]
    Hkv = config["num_key_value_heads"]
    K, F = D // H, config["ff_intermediate_size"]
    shapes = {"model.embed_tokens.weight": (V, D), "model.final_layernorm.weight": (D,),
              "model.final_layernorm.bias": (D,)}  # fmt: skip
    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}"
        shapes.update({
            f"{pre}.input_layernorm.weight": (D,), f"{pre}.input_layernorm.bias": (D,),
            f"{pre}.self_attn.query_key_value.weight": ((H + 2 * Hkv) * K, D),
            f"{pre}.self_attn.query_key_value.bias": ((H + 2 * Hkv) * K,),
            f"{pre}.self_attn.dense.weight": (D, D), f"{pre}.self_attn.dense.bias": (D,),
            f"{pre}.post_attention_layernorm.weight": (D,), f"{pre}.post_attention_layernorm.bias": (D,),
            f"{pre}.mlp.up_proj.weight": (2 * F, D), f"{pre}.mlp.up_proj.bias": (2 * F,),
            f"{pre}.mlp.down_proj.weight": (D, F), f"{pre}.mlp.down_proj.bias": (D,),
        })  # fmt: skip
    return shapes


def phi3small_rotation(config: Mapping, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Angles [S, K/2] and cos/sin scales [S] of positions 0..S-1, position p rotated in a forward
    over lengths[p] tokens (the cache included): RotaryEmbedding's plain branch (positions x
    rope_position_scale), or with rope_scaling its longrope branch (short factors and short_mscale
    up to original_max_position_embeddings, long ones and long_mscale past it; a key in the cache
    keeps the rotation of the forward that wrote it)."""
    K = config["hidden_size"] // config["num_attention_heads"]
    base, exponents = config["rope_embedding_base"], np.arange(0, K, 2) / K
    positions = np.arange(len(lengths), dtype=np.float64)
    longrope = config.get("rope_scaling")
    if longrope is None:
        inv = 1.0 / base**exponents
        return (positions * config["rope_position_scale"])[:, None] * inv[None, :], np.ones(len(lengths))
    original = longrope["original_max_position_embeddings"]
    ratio = config["max_position_embeddings"] / original
    angles, scales = [], []
    for p, length in enumerate(lengths):
        if length > original:
            factors, mscale = longrope["long_factor"], longrope.get("long_mscale", -1)
            default = 1.0 if ratio <= 1.0 else math.sqrt(1 + math.log(ratio) / math.log(original))
        else:
            factors, mscale, default = longrope["short_factor"], longrope.get("short_mscale", -1), 1.0
        angles.append(p / (np.asarray(factors) * base**exponents))
        scales.append(mscale if mscale > 0 else default)
    return np.array(angles), np.array(scales)


def phi3small_logits(
    config: Mapping, w: Weights, ids: list[int], lengths: list[int] | None = None
) -> np.ndarray:
    """[S, V] logits of Phi3SmallForCausalLM (muP scaling on) for one sequence of token ids, position
    p computed in a forward over lengths[p] tokens (default: the whole sequence in one forward)."""
    D, H, Hkv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    K, G, eps, S = D // H, H // Hkv, config["layer_norm_epsilon"], len(ids)
    every = config["dense_attention_every_n_layers"]
    angle, rope_scale = phi3small_rotation(config, lengths or [S] * S)
    x = w["model.embed_tokens.weight"][ids] * config["mup_embedding_multiplier"]
    sparse = phi3small_sparse(config, S)
    scale = config["mup_attn_multiplier"] / K if config["mup_use_scaling"] else 1 / math.sqrt(K)
    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}"
        n = layer_norm(x, w[f"{pre}.input_layernorm.weight"], w[f"{pre}.input_layernorm.bias"], eps)
        qkv = n @ w[f"{pre}.self_attn.query_key_value.weight"].T + w[f"{pre}.self_attn.query_key_value.bias"]
        groups = qkv.reshape(S, Hkv, G + 2, K)  # per KV head: its G query heads, its key, its value
        q, k, v = groups[:, :, :G].reshape(S, H, K), groups[:, :, G], groups[:, :, G + 1]
        dense = every and (i + 1) % every == 0
        o = attend(rotate_pairs(q, angle, rope_scale), rotate_pairs(k, angle, rope_scale), v,
                   scale, None if dense else sparse)  # fmt: skip
        x = x + o.reshape(S, D) @ w[f"{pre}.self_attn.dense.weight"].T + w[f"{pre}.self_attn.dense.bias"]
        post = f"{pre}.post_attention_layernorm"
        n = layer_norm(x, w[f"{post}.weight"], w[f"{post}.bias"], eps)
        up = n @ w[f"{pre}.mlp.up_proj.weight"].T + w[f"{pre}.mlp.up_proj.bias"]
        down = gegelu(up, config["gegelu_limit"]) @ w[f"{pre}.mlp.down_proj.weight"].T
        x = x + down + w[f"{pre}.mlp.down_proj.bias"]
    x = layer_norm(x, w["model.final_layernorm.weight"], w["model.final_layernorm.bias"], eps)
    return x @ w["model.embed_tokens.weight"].T / config["mup_width_multiplier"]
