"""What each config.json field may hold: its type, that it is finite, and its range, in one table.

Families say which fields they read (`RawConfig.get` / `require`); this table says what a valid
value of each field is, whichever family reads it, so a hostile or mistyped config fails with one
line naming the field and what was expected rather than a traceback, an overflow or a run without
bound. Fields a family reads that are not listed here get the family's own type check.

Upper bounds are far beyond any published model (the largest ones have 126 layers, 16k hidden
size, 256 experts and 262k vocabulary) but low enough that one bad value cannot make the compiler
build a graph without bound:

- MAX_LAYERS: decoder layers; each is built and scheduled, so this bounds the work per run.
- MAX_WIDTH: hidden and MLP sizes; MAX_HEADS, MAX_HEAD_DIM: attention shape.
- MAX_VOCAB, MAX_POSITIONS, MAX_EXPERTS: table sizes.
- MAX_SCALE: RoPE bases and scaling factors (published bases reach 1e6..5e6).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_LAYERS = 1024
MAX_WIDTH = 1 << 20
MAX_HEADS = 1 << 14
MAX_HEAD_DIM = 1 << 14
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 24
MAX_EXPERTS = 1 << 12
MAX_SCALE = 1e12


@dataclass(frozen=True)
class Field:
    """The valid values of one field: `kind` is int, number (int or float), bool, str, object,
    list or numbers (a list of numbers, each in [lo, hi]; longrope's factors); numbers lie in
    [lo, hi] (lo excluded when `lo_open`); `words` are strings a number field
    also takes (`residual_scale = "deepnet"`)."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    words: tuple[str, ...] = ()

    def expected(self) -> str:
        """What a valid value is, for the message: 'an integer from 1 to 1,024', 'a number > 0'."""
        if self.kind in ("int", "number"):
            noun = "an integer" if self.kind == "int" else "a number"
            if self.kind == "int" and self.lo is not None and self.hi is not None:
                text = f"{noun} from {self.lo:,} to {self.hi:,}"
            else:
                bounds = []
                if self.lo is not None:
                    bounds.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
                if self.hi is not None:
                    bounds.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
                text = f"{noun} {' and '.join(bounds)}" if bounds else f"a finite {noun[2:]}"
            return text + "".join(f" or {json.dumps(w)}" for w in self.words)
        if self.kind == "numbers":
            each = Field("number", self.lo, self.hi, self.lo_open, self.hi_open).expected()
            return f"a list of numbers, each {each.removeprefix('a number ')}"
        return {
            "bool": "true or false",
            "str": "a string",
            "object": "an object",
            "list": "a list",
        }[self.kind]

    def accepts(self, value: Any) -> bool:
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "str":
            return isinstance(value, str)
        if self.kind == "object":
            return isinstance(value, dict)
        if self.kind == "list":
            return isinstance(value, list)
        if self.kind == "numbers":
            item = Field("number", self.lo, self.hi, self.lo_open, self.hi_open)
            return isinstance(value, list) and all(not isinstance(x, str) and item.accepts(x) for x in value)
        if isinstance(value, str):
            return value in self.words
        number = int if self.kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)


def _count(hi: int, lo: int = 1) -> Field:
    return Field("int", lo, hi)


def _positive(hi: float = MAX_SCALE) -> Field:
    return Field("number", 0, hi, lo_open=True)


_BOOL, _STR, _OBJECT, _LIST = Field("bool"), Field("str"), Field("object"), Field("list")
_EPS = Field("number", 0, 1, lo_open=True, hi_open=True)
_FRACTION = Field("number", 0, 1, lo_open=True)

FIELDS: dict[str, Field] = {
    # what the model is
    "model_type": _STR,
    "torch_dtype": _STR,
    "dtype": _STR,
    "text_config": _OBJECT,
    # sizes
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), _count(MAX_LAYERS)),
    **dict.fromkeys(
        (
            "hidden_size", "n_embd", "n_embed", "intermediate_size", "ffn_dim", "n_inner",
            "ffn_hidden_size", "moe_intermediate_size", "word_embed_proj_dim", "intermediate_size_mlp",
        ),
        _count(MAX_WIDTH),
    ),  # fmt: skip
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads", "multi_query_group_num"),
        _count(MAX_HEADS),
    ),
    **dict.fromkeys(("head_dim", "kv_channels", "head_size"), _count(MAX_HEAD_DIM)),  # head_size: RWKV-5 / 6
    "head_size_divisor": _count(MAX_HEAD_DIM),  # RWKV-6: ln_x's eps is 1e-5 x head_size_divisor^2
    "rotary_dim": _count(MAX_HEAD_DIM),  # GPT-J: RoPE on the first rotary_dim dims of each head
    # DeepSeek's latent attention
    **dict.fromkeys(("q_lora_rank", "kv_lora_rank"), _count(MAX_WIDTH)),
    **dict.fromkeys(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), _count(MAX_HEAD_DIM)),
    # DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5): keys kept per query, its heads
    "index_topk": _count(MAX_POSITIONS),
    "index_n_heads": _count(MAX_HEADS),
    "index_head_dim": _count(MAX_HEAD_DIM),
    **dict.fromkeys(("index_topk_freq", "index_skip_topk_offset"), _count(MAX_LAYERS, lo=0)),
    "indexer_rope_interleave": _BOOL,
    **dict.fromkeys(("mlp_layer_types", "indexer_types"), _LIST),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), _count(MAX_VOCAB)),
    **dict.fromkeys(
        (
            "max_position_embeddings", "n_positions", "original_max_position_embeddings", "sliding_window",
            "attention_chunk_size",
            "seq_length",
        ),
        _count(MAX_POSITIONS),
    ),  # fmt: skip
    # layer patterns
    "layer_types": _LIST,
    "mlp_only_layers": _LIST,
    "use_sliding_window": _BOOL,
    "max_window_layers": _count(MAX_LAYERS, lo=0),
    "sliding_window_pattern": _count(MAX_LAYERS),
    "_sliding_window_pattern": _count(MAX_LAYERS),
    "decoder_sparse_step": _count(MAX_LAYERS),
    "interleave_moe_layer_step": _count(MAX_LAYERS),  # Llama 4: every step-th layer is MoE
    "moe_layers": _LIST,
    "num_ln_in_parallel_attn": _count(2),
    # experts
    **dict.fromkeys(
        ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok"),
        _count(MAX_EXPERTS),
    ),
    **dict.fromkeys(("n_group", "topk_group"), _count(MAX_EXPERTS)),  # DeepSeek's expert groups
    "n_shared_experts": _count(MAX_EXPERTS, lo=0),  # 0: no shared expert (transformers' MLP of width 0)
    "first_k_dense_replace": _count(MAX_LAYERS, lo=0),  # 0: every layer is MoE
    # ERNIE 4.5's experts: counts, per token, and the layers from start to end (-1: the last) at
    # every interval-th layer; moe_norm_min floors the top-k weights' divisor
    **dict.fromkeys(("moe_num_experts", "moe_k"), _count(MAX_EXPERTS)),
    "moe_num_shared_experts": _count(MAX_EXPERTS, lo=0),
    "moe_layer_start_index": _count(MAX_LAYERS, lo=0),
    "moe_layer_end_index": _count(MAX_LAYERS, lo=-1),
    "moe_layer_interval": _count(MAX_LAYERS),
    "moe_norm_min": Field("number", 0, 1e6),
    "rescale_every": _count(MAX_LAYERS, lo=0),  # RWKV: 0 means no rescaling
    "num_nextn_predict_layers": _count(MAX_LAYERS, lo=0),  # MiMo's multi-token-prediction layers
    # Phi-3-small: its MLP width, block-sparse pattern and dense-layer period (0: none)
    "ff_intermediate_size": _count(MAX_WIDTH),
    **dict.fromkeys(("blocksparse_block_size", "blocksparse_num_local_blocks", "blocksparse_vert_stride"),
                    _count(MAX_POSITIONS)),  # fmt: skip
    "dense_attention_every_n_layers": _count(MAX_LAYERS, lo=0),
    # DeciLM (nemotron-nas) block_configs entries: query heads per KV head, MLP width / hidden x 3/2
    "n_heads_in_group": _count(MAX_HEADS),
    "ffn_mult": Field("number", 0, 1000, lo_open=True),
    "shared_expert_intermediate_size": _count(MAX_WIDTH),
    "moe_shared_expert_intermediate_size": _count(MAX_WIDTH),  # Nemotron-H's one shared expert
    "moe_latent_size": _count(MAX_WIDTH),  # Nemotron 3 Super: the routed experts' width (null: D)
    "routed_scaling_factor": _positive(1e6),
    "norm_topk_prob": _BOOL,
    "moe_layer_freq": _count(MAX_LAYERS),  # DeepSeek: experts on every moe_layer_freq-th layer
    **dict.fromkeys(("topk_method", "scoring_func"), _STR),  # DeepSeek's routing, checked by the family
    "router_jitter_noise": Field("number", 0, 1e6),  # Phi-3.5-MoE's sparsemixer eps; 0 keeps ties only
    **dict.fromkeys(("swiglu_limit", "swiglu_alpha"), _positive(1e6)),  # gpt-oss
    # state-space (Mamba) mixers
    **dict.fromkeys(("state_size", "num_heads", "n_groups", "chunk_size"), _count(MAX_WIDTH)),
    "conv_kernel": _count(1024),
    "expand": _positive(1024),
    "time_step_rank": Field("int", 1, MAX_WIDTH, words=("auto",)),
    "time_step_limit": _LIST,  # [min, max]; max may be Infinity (checked by the reader)
    "mixer_rms_eps": _EPS,
    # the hybrids' Mamba-2 mixers (Bamba, Granite 4, Falcon-H1, Nemotron-H)
    **dict.fromkeys(
        (
            "mamba_n_heads", "mamba_n_groups", "mamba_d_state", "mamba_chunk_size",
            "mamba_num_heads", "mamba_head_dim", "ssm_state_size",  # Nemotron-H's names
        ),
        _count(MAX_WIDTH),
    ),
    "shared_intermediate_size": _count(MAX_WIDTH),  # Granite 4's shared MLP
    # Qwen3-Next's gated DeltaNet layers, RWKV's time mixing
    **dict.fromkeys(
        (
            "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
            "attention_hidden_size",
        ),
        _count(MAX_WIDTH),
    ),
    "linear_conv_kernel_dim": _count(1024),
    "full_attention_interval": _count(MAX_LAYERS),
    "mamba_d_conv": _count(1024),
    "mamba_expand": _positive(1024),
    "mamba_d_head": Field("int", 1, MAX_WIDTH, words=("auto",)),
    # Zamba2's Mamba-2 mixer and shared blocks (mamba_headdim: derived, read as "auto")
    **dict.fromkeys(("n_mamba_heads", "mamba_ngroups", "adapter_rank"), _count(MAX_WIDTH)),
    "num_mem_blocks": _count(MAX_LAYERS),
    "mamba_headdim": Field("int", 1, MAX_WIDTH, words=("auto",)),
    "mamba_d_ssm": _count(MAX_WIDTH),  # Falcon-H1's inner width
    # Falcon-H1's muP multipliers: mlp (gate, down), ssm (in_proj's z, x, B, C, dt spans)
    **dict.fromkeys(("mlp_multipliers", "ssm_multipliers"), Field("numbers", 0, 1e6, lo_open=True)),
    "attn_layer_indices": _LIST,
    # Jamba: dt's rank, and attention / expert layers every period layers from offset
    "mamba_dt_rank": Field("int", 1, MAX_WIDTH, words=("auto",)),
    **dict.fromkeys(("attn_layer_period", "expert_layer_period"), _count(MAX_LAYERS)),
    **dict.fromkeys(("attn_layer_offset", "expert_layer_offset"), _count(MAX_LAYERS, lo=0)),
    # numbers
    **dict.fromkeys(
        (
            "rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", "norm_eps", "norm_epsilon",
            "layernorm_epsilon",
        ),
        _EPS,
    ),
    **dict.fromkeys(("rope_theta", "rope_local_base_freq", "rotary_emb_base"), _positive()),
    "rope_ratio": _positive(1e6),  # ChatGLM: RoPE base 10000 x rope_ratio
    **dict.fromkeys(("factor", "low_freq_factor", "high_freq_factor"), _positive(1e6)),
    **dict.fromkeys(("rotary_pct", "partial_rotary_factor"), _FRACTION),
    "query_pre_attn_scalar": _positive(),
    **dict.fromkeys(("attn_logit_softcapping", "final_logit_softcapping"), _positive(1e6)),
    **dict.fromkeys(
        (
            "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling",
            "lm_head_multiplier", "key_multiplier", "attention_in_multiplier", "attention_out_multiplier",
            "ssm_in_multiplier", "ssm_out_multiplier",  # Falcon-H1's muP
            "logit_scale", "scale_emb", "scale_depth", "dim_model_base",  # MiniCPM's muP: any positive number
        ),
        _positive(1e6),
    ),
    "residual_scale": Field("number", 0, 1e6, lo_open=True, words=("deepnet",)),
    # RoPE
    "rope_scaling": _OBJECT,
    "rope_parameters": _OBJECT,
    "rope_type": _STR,
    "type": _STR,
    **dict.fromkeys(("attention_factor", "beta_fast", "beta_slow"), _positive(1e6)),
    **dict.fromkeys(("mscale", "mscale_all_dim"), Field("number", 0, 1e6)),
    **dict.fromkeys(("short_mscale", "long_mscale"), _positive(1e6)),  # Phi-3.5-MoE's cos/sin scales
    **dict.fromkeys(("short_factor", "long_factor"), Field("numbers", 0, 1e6, lo_open=True)),
    "truncate": _BOOL,
    "no_rope_layers": _LIST,
    "no_rope_layer_interval": _count(MAX_LAYERS),
    # Llama 4's attention temperature tuning on its NoPE layers (attn_temperature_tuning, published
    # as 4 in Scout's config, is read by its truth value as transformers 4.51 read it)
    "floor_scale": _positive(),
    "attn_scale": Field("number", 0, 1e6),
    # names of variants (each family checks the name against its own list)
    **dict.fromkeys(
        (
            "hidden_act", "hidden_activation", "activation", "activation_function",
            "norm", "block", "position", "mlp",
        ),
        _STR,
    ),  # fmt: skip
    # switches
    **dict.fromkeys(
        (
            "attention_bias", "mlp_bias", "lm_head_bias", "tie_word_embeddings", "alibi",
            "new_decoder_architecture", "multi_query", "parallel_attn", "bias", "use_parallel_residual",
            "apply_residual_connection_post_layernorm", "do_layer_norm_before", "enable_bias",
            "_remove_final_layer_norm", "layer_norm_elementwise_affine", "scale_attn_by_inverse_layer_idx",
            "add_cross_attention", "scale_attn_weights", "final_norm", "use_bias", "use_qk_norm",
            "rmsnorm", "post_layer_norm", "add_bias_linear", "add_qkv_bias", "multi_query_attention",
            "use_conv_bias", "residual_in_fp32", "mamba_conv_bias", "mamba_proj_bias",
            "mamba_rms_norm", "mamba_norm_before_gate", "projectors_bias",  # Falcon-H1's
        ),
        _BOOL,
    ),  # fmt: skip
}


def show(value: Any, limit: int = 60) -> str:
    """A JSON value as the message quotes it: JSON spelling, ASCII only (a lone surrogate cannot
    break printing), cut short."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
