"""A model's architecture, normalised from a Hugging Face config.json.

Family modules (tcp_compiler.frontend.families) read the raw JSON into one `ModelConfig`; the graph
builder knows nothing of JSON field names. Both the transformers 5 names (`rope_parameters`,
`layer_types`) and the older ones (`rope_theta`, `rope_scaling`, `sliding_window_pattern`) are read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from simulator.files import read_input
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend import json_input
from tcp_compiler.frontend.layout import IDENTITY, TensorMap
from tcp_compiler.frontend.schema import FIELDS, show

NormKind = Literal["rms", "layer"]
BlockKind = Literal["pre", "post", "parallel"]
PositionKind = Literal["rope", "learned", "alibi", "sinusoidal", "none"]
MlpKind = Literal["gated", "plain"]
# relu2: relu(x)^2 (Nemotron-H); xielu: xIELU with trainable scalars per MLP (Apertus; the IR op xielu)
Activation = Literal["silu", "gelu_tanh", "gelu", "relu", "relu2", "xielu"]
QkNorm = Literal["none", "per_head", "all_heads", "each_head", "l2", "rotated"]
RopeKind = Literal["default", "linear", "llama3", "yarn", "dynamic", "longrope"]
Scoring = Literal["softmax", "sigmoid"]
GroupScore = Literal["top2_sum", "max"]
# A layer's attention or feed-forward part: the model's own, skipped (nothing, not even its norm),
# or one bias-free [D, D] linear after its norm (DeciLM's no_op and replace_with_linear)
LayerPart = Literal["standard", "skip", "linear"]
Mixer = Literal["attention", "mamba", "deltanet", "rwkv"]
SsmKind = Literal["mamba", "mamba2", "gated_delta", "rwkv4", "rwkv5", "rwkv6"]
# Mamba-2's output gate and norm: rms(y * silu(z)) (Mamba-2's gated norm), rms(y) * silu(z)
# (Falcon-H1's norm_before_gate) or y * silu(z) without a norm (Falcon-H1 without mamba_rms_norm)
GatedNorm = Literal["gated", "norm_then_gate", "none"]


def check_mode(value: object, mode: object, what: str) -> None:
    """A FrontendError unless `value` is one of the Literal type `mode`'s values: a family that
    reads a config into a mode the builder does not know fails where it reads it."""
    allowed = get_args(mode)
    if value not in allowed:
        raise FrontendError(f"{what} {value!r} is not one of {', '.join(map(str, allowed))}")


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding: base and frequency scaling, as transformers' rope_type computes it
    (default, linear, llama3, yarn, dynamic, longrope).

    Dynamic NTK and longrope depend on the sequence length: transformers recomputes inv_freq when
    a forward's largest position + 1 passes max_position_embeddings (dynamic) or
    original_max_position_embeddings (longrope: the long factors replace the short ones). A graph
    here has a static length, so its table is computed for that length (`positions`, the prefill
    length or a decode step's cache length): the same frequencies transformers uses for that step,
    with keys already in the cache keeping the rotation they were written with, as there.
    """

    theta: float
    kind: RopeKind = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192
    attention_factor: float = 1.0  # yarn / longrope: cos and sin scaled by it (so scores by its square)
    beta_fast: float = 32.0  # yarn: the ramp between extrapolated and interpolated frequencies
    beta_slow: float = 1.0
    truncate: bool = True  # yarn: the ramp's ends rounded outwards to whole dims
    max_positions: int = 0  # dynamic: max_position_embeddings, the length scaling starts past
    short_factor: tuple[float, ...] = ()  # longrope: per-frequency divisors up to original_max_positions
    long_factor: tuple[float, ...] = ()  # longrope: past it
    # Phi-3.5-MoE's long_mscale: the cos/sin scale past original_max_positions (attention_factor,
    # its short_mscale, up to it); None: attention_factor throughout
    long_attention_factor: float | None = None
    source: str = field(default="", compare=False)  # key path of its parameters, for messages

    def check_factors(self, raw: RawConfig, rotary: int) -> None:
        """longrope's factor lists hold one entry per rotated pair (`rotary` / 2), as transformers
        reads them: refused at config load, naming the file and field, not at the first table."""
        for name, factors in (("short_factor", self.short_factor), ("long_factor", self.long_factor)):
            if self.kind == "longrope" and len(factors) != rotary // 2:
                raise raw.fail(
                    f"{self.source}.{name}: expected {rotary // 2} entries (one per pair of the "
                    f"{rotary} rotary dims), got {len(factors)}"
                )

    def __post_init__(self) -> None:
        check_mode(self.kind, RopeKind, "rope_type")

    def inv_freq(self, head_dim: int, positions: int = 0) -> np.ndarray:
        """Inverse frequencies (float32, as transformers computes them) for pairs of `head_dim`, for a
        sequence of `positions` tokens (only dynamic and longrope depend on it)."""
        if self.kind == "dynamic" and positions > self.max_positions:
            return _default_inv_freq(_dynamic_base(self, head_dim, positions), head_dim)
        if self.kind == "longrope":
            return _longrope_inv_freq(self, head_dim, positions)
        if self.kind == "yarn":
            return _yarn_inv_freq(self, head_dim)
        inv = _default_inv_freq(np.float32(self.theta), head_dim)
        if self.kind == "linear":
            return (inv / np.float32(self.factor)).astype(np.float32)
        if self.kind == "llama3":
            return _llama3_scaling(inv, self)
        return inv

    def table(self, head_dim: int, positions: int) -> np.ndarray:
        """[positions, head_dim/2, 2, 2] rotation matrices: out[t] = sum_r table[p, kp, r, t] * in[r].

        Element kp of a head vector pairs with kp + head_dim/2 (transformers' rotate_half). yarn
        and longrope scale cos and sin by their attention factor (Phi-3.5-MoE's longrope by its
        long one past the original context), as transformers does.
        """
        freqs = np.arange(positions, dtype=np.float32)[:, None] * self.inv_freq(head_dim, positions)[None, :]
        cos, sin = np.cos(freqs), np.sin(freqs)
        factor = self.attention_factor
        if self.long_attention_factor is not None and positions > self.original_max_positions:
            factor = self.long_attention_factor
        if factor != 1.0:
            scale = np.float32(factor)
            cos, sin = cos * scale, sin * scale
        table = np.empty((positions, head_dim // 2, 2, 2), dtype=np.float32)
        table[..., 0, 0], table[..., 0, 1] = cos, sin
        table[..., 1, 0], table[..., 1, 1] = -sin, cos
        return table


def _default_inv_freq(base: np.float32, head_dim: int) -> np.ndarray:
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (base**exponents)).astype(np.float32)


def _llama3_scaling(inv: np.ndarray, rope: Rope) -> np.ndarray:
    """Llama 3.1's frequency-dependent scaling: long wavelengths slowed by `factor`, smooth between
    (no band between when the two freq factors are equal, as in Llama 4 Scout's config)."""
    low_wavelen = rope.original_max_positions / rope.low_freq_factor
    high_wavelen = rope.original_max_positions / rope.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_wavelen, inv / rope.factor, inv)
    if rope.high_freq_factor == rope.low_freq_factor:
        return scaled.astype(np.float32)
    smooth = (rope.original_max_positions / wavelen - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _dynamic_base(rope: Rope, dim: int, positions: int) -> np.float32:
    """Dynamic NTK's base for a sequence of `positions` > max_positions tokens, in float32 as
    transformers computes it from a tensor length."""
    if dim <= 2:
        raise FrontendError(f"dynamic RoPE needs more than 2 rotary dims, got {dim}")
    f32 = np.float32
    ratio = f32(rope.factor) * f32(positions) / f32(rope.max_positions) - f32(rope.factor - 1)
    return f32(f32(rope.theta) * ratio ** f32(dim / (dim - 2)))


def _yarn_inv_freq(rope: Rope, dim: int) -> np.ndarray:
    """YaRN (Peng et al.): frequencies that turn fewer than beta_slow times over the original
    context are interpolated (divided by factor), those turning more than beta_fast times kept,
    a linear ramp over the dims between."""

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(rope.original_max_positions / (rotations * 2 * math.pi))) / (
            2 * math.log(rope.theta)
        )

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    pos_freqs = np.float32(rope.theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    extrapolated = np.float32(1.0) / pos_freqs
    interpolated = np.float32(1.0) / (np.float32(rope.factor) * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
    keep = np.float32(1.0) - ramp
    return (interpolated * (np.float32(1.0) - keep) + extrapolated * keep).astype(np.float32)


def _longrope_inv_freq(rope: Rope, dim: int, positions: int) -> np.ndarray:
    """LongRoPE: each frequency divided by its own factor, the long set past the original context."""
    factors = rope.long_factor if positions > rope.original_max_positions else rope.short_factor
    if len(factors) != dim // 2:
        raise FrontendError(
            f"longrope factors have {len(factors)} entries, but {dim} rotary dims need {dim // 2}"
        )
    shape = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.array(factors, np.float32) * np.float32(rope.theta) ** shape)).astype(
        np.float32
    )


@dataclass(frozen=True)
class Moe:
    """Mixture of experts: routing and where the expert weights live in a checkpoint."""

    experts: int
    top_k: int
    intermediate: int
    normalize_top_k: bool
    router_name: str  # format with {i}
    expert_names: tuple[str, str, str]  # gate, up, down; format with {i} and {e}
    router_bias: bool = False  # gpt-oss: the router is a linear with a bias
    softmax_after_top_k: bool = False  # gpt-oss: top-k of the router logits, softmax over those k
    expert_bias: bool = False  # gpt-oss: every expert projection adds a bias (the weight's .bias twin)
    scoring: Scoring = "softmax"  # over all experts, or DeepSeek's independent sigmoid scores
    correction_bias_name: str | None = None  # DeepSeek: added to pick experts, not to weigh them
    groups: int = 1  # DeepSeek's n_group: experts pick among the best topk_groups groups only
    topk_groups: int = 1
    # a group's rank: the sum of its two best scores (DeepSeek-V3) or its best one (DeepSeek-V2)
    group_score: GroupScore = "top2_sum"
    routed_scale: float = 1.0  # DeepSeek's routed_scaling_factor on the routing weights
    # ERNIE 4.5's moe_norm_min: the top-k weights are divided by max(their sum, this) (0: their sum)
    normalize_floor: float = 0.0
    weights_input: bool = False  # Llama 4: each routed row is scaled by its weight before its expert
    # Phi-3.5-MoE's sparsemixer (router_jitter_noise): the top 2 experts, each weighed by a softmax
    # over the experts scoring within 2 x eps (relative) of it; None: other routing
    sparsemixer_eps: float | None = None
    shared: SharedExpert | None = None
    gated: bool = True  # down(act(gate) * up); False: down(act(up)), Nemotron-H's experts and shared one
    # Nemotron 3 Super's moe_latent_size: the routed experts run in this width, between a projection
    # from the hidden size and one back (names with {i}: in, out); None: none
    latent: int | None = None
    latent_names: tuple[str, str] = ("", "")

    def __post_init__(self) -> None:
        check_mode(self.scoring, Scoring, "expert scoring")
        check_mode(self.group_score, GroupScore, "expert group score")


@dataclass(frozen=True)
class SharedExpert:
    """An MLP every token runs beside the routed experts (Qwen2-MoE, DeepSeek), gated or not as the
    experts are (Moe.gated), optionally scaled by sigmoid(x . gate) (Qwen2-MoE's shared_expert_gate)."""

    intermediate: int
    names: tuple[str, str, str]  # gate, up, down; format with {i}
    gate_name: str | None = None  # [1, D]; format with {i}


@dataclass(frozen=True)
class Mla:
    """DeepSeek's multi-head latent attention: queries through an optional low-rank q_a/q_b pair,
    keys and values from one compressed latent per token (kv_lora_rank) plus one rotary key shared
    by all heads (qk_rope_head_dim); the cache holds those two, not per-head K/V."""

    q_lora_rank: int | None
    kv_lora_rank: int
    nope_dim: int  # qk_nope_head_dim: the part of each head's query/key without RoPE
    rope_dim: int  # qk_rope_head_dim
    v_dim: int  # v_head_dim


@dataclass(frozen=True)
class Dsa:
    """DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5): each query scores every
    key with `heads` small heads of `head_dim` (queries from MLA's q LoRA, one LayerNorm'd key per
    token, RoPE on the first qk_rope_head_dim dims, in `interleave`d pairs or rotate-half) and
    attends to its `topk` best keys only. Layers in `shared` run no indexer: they reuse the
    selection of the nearest layer before them that does (GLM's cross-layer sharing)."""

    topk: int
    heads: int
    head_dim: int
    interleave: bool
    shared: frozenset[int] = frozenset()


@dataclass(frozen=True)
class BlockSparse:
    """Phi-3-small's block-sparse attention: keys and queries in blocks of `block` positions; a
    query block sees the `local` blocks up to its own and every key block b with
    (b + offset(h) + 1) mod `vert_stride` == 0, causally. Heads share offset 0 (`homo_heads`) or
    head h of `heads` has offset h x max(1, vert_stride // heads), each head its own vertical stripes."""

    block: int
    local: int
    vert_stride: int
    heads: int
    homo_heads: bool = False

    def offset(self, head: int) -> int:
        """Head `head`'s (of all the model's query heads) shift of the vertical stripes, in blocks."""
        return 0 if self.homo_heads else head * max(1, int(self.vert_stride / self.heads))


@dataclass(frozen=True)
class Ssm:
    """A Mamba mixer (a selective state-space layer): its sizes and variant, as the layers whose
    `Layer.mixers` include "mamba" or "deltanet" build it (frontend/builder/ssm.py), and of RWKV blocks
    (frontend/builder/rwkv.py).

    Mamba-1 (`kind` "mamba"): every one of the `inner` channels has its own [state] decay (A_log
    [inner, state]), dt comes through a rank-`dt_rank` x_proj / dt_proj pair, and the output is
    gated by silu(z) before out_proj. Mamba-2 ("mamba2"): one scalar decay per head of `head_dim`
    channels, B and C shared by the heads of each of `groups` groups, dt one per head straight from
    in_proj, and a gated RMSNorm over each group's channels before out_proj. Qwen3-Next's gated
    DeltaNet ("gated_delta", layers whose mixer is "deltanet"): `heads` value heads of `head_dim`
    channels (inner = heads x head_dim), `groups` query/key heads of `state` channels each shared by
    heads / groups value heads; the state is [heads, state, head_dim]. RWKV-4 ("rwkv4", layers whose
    mixer is "rwkv"): `inner` WKV channels, each with a numerator and a denominator state (state 1,
    two scans); its token shifts carry one previous input (conv_kernel 2) of `token_shift` channels
    beside the WKV's lagged inputs. RWKV-5 ("rwkv5", mixer "rwkv" too): `heads` heads of `head_dim`
    channels (inner = heads x head_dim), each a [state = head_dim keys, head_dim values] matrix
    state; token shifts and lagged key and value inputs as RWKV-4's. RWKV-6 ("rwkv6"): RWKV-5's with
    data-dependent token-shift mixes and decay through LoRAs of widths `mix_rank` and `decay_rank`;
    it lags its decay too.
    """

    kind: SsmKind
    inner: int  # expand x hidden: channels of x and of the gate z
    state: int  # N: state entries per channel (Mamba-1) or per head channel (Mamba-2)
    conv_kernel: int  # width of the causal depthwise convolution
    dt_rank: int = 0  # Mamba-1: the low-rank dt projection's width
    heads: int = 0  # Mamba-2: inner = heads x head_dim
    head_dim: int = 0
    groups: int = 1  # Mamba-2: heads / groups heads share one B and one C
    conv_bias: bool = True
    proj_bias: bool = False  # in_proj's bias (use_bias), and out_proj's unless out_bias says
    out_bias: bool | None = None  # out_proj's bias where it has its own switch (Falcon-H1's projectors_bias)
    dt_min: float = 0.0  # Mamba-2's time_step_limit: the prefill's chunked scan clamps dt to it
    dt_max: float = math.inf
    bcdt_norm_eps: float | None = None  # Falcon-Mamba: weightless RMSNorms on B, C and dt's rank
    bcdt_norm_weights: bool = False  # Jamba: those RMSNorms scale by learned weights
    norm_eps: float = 1e-5  # Mamba-2's gated RMSNorm; RWKV-5 / 6: the GroupNorm ln_x
    chunk: int = 256  # Mamba-2's chunk_size (the chunked scan's chunk in transformers)
    activation: Activation = "silu"  # after the convolution (hidden_act; Nemotron-H's mamba_hidden_act)
    token_shift: int = 0  # RWKV: the channels its time- and channel-mixing token shifts carry
    rescale_every: int = 0  # RWKV: the hidden state halves after every n-th block (transformers' eval)
    mix_rank: int = 0  # RWKV-6: the token-shift LoRA's width (time_maa_w1 / w2)
    decay_rank: int = 0  # RWKV-6: the decay LoRA's width (time_decay_w1 / w2)
    gated_norm: GatedNorm = "gated"  # Mamba-2: how the output gate and its norm combine
    # Falcon-H1's muP multipliers: on the mixer's input, its output, and each span of in_proj's
    # output (z, x, B, C, dt; () for none)
    in_scale: float = 1.0
    out_scale: float = 1.0
    projection_scales: tuple[float, ...] = ()
    # the gated DeltaNet's input projections: Qwen3-Next fuses them per key head (in_proj_qkvz,
    # in_proj_ba); Qwen3.5 keeps in_proj_qkv (all q, then k, then v rows), in_proj_z, in_proj_b
    # and in_proj_a apart
    fused_projections: bool = True

    def __post_init__(self) -> None:
        check_mode(self.kind, SsmKind, "ssm")
        check_mode(self.activation, Activation, "activation")
        check_mode(self.gated_norm, GatedNorm, "gated norm")
        if self.projection_scales and (self.kind != "mamba2" or len(self.projection_scales) != 5):
            raise FrontendError("in_proj's span multipliers are Mamba-2's five (z, x, B, C, dt)")

    @property
    def has_out_bias(self) -> bool:
        """Whether out_proj adds a bias: its own switch, else in_proj's."""
        return self.proj_bias if self.out_bias is None else self.out_bias

    @property
    def conv_channels(self) -> int:
        """Channels of the convolution: x (and Mamba-2's B and C, or DeltaNet's q and k, which go
        through it too)."""
        if self.rwkv:  # RWKV-4's exp(k) and exp(k) v (RWKV-5's k and v, RWKV-6's decay too) of the
            # step before, and the token shifts
            return (3 if self.kind == "rwkv6" else 2) * self.inner + self.token_shift
        return self.inner + (0 if self.kind == "mamba" else 2 * self.groups * self.state)

    @property
    def rwkv(self) -> bool:
        """An RWKV block's time mixing (builder/rwkv.py), not a Mamba or DeltaNet mixer."""
        return self.kind in ("rwkv4", "rwkv5", "rwkv6")

    @property
    def state_elements(self) -> int:
        """One sequence's recurrent state in one layer: inner x state entries (RWKV: a numerator
        and a denominator per channel)."""
        return self.inner * self.state * (2 if self.kind == "rwkv4" else 1)

    @property
    def window_elements(self) -> int:
        """One sequence's convolution window in one layer: the last conv_kernel - 1 inputs."""
        return self.conv_channels * (self.conv_kernel - 1)

    def elements_on(self, chips: int) -> int:
        """One sequence's state and window in one layer on one of `chips` tensor-parallel chips:
        a share of what splits with the channels or heads; RWKV's token shifts (the previous
        hidden-wide inputs) are whole on every chip."""
        whole = self.token_shift * (self.conv_kernel - 1)
        return (self.state_elements + self.window_elements - whole) // chips + whole


@dataclass(frozen=True)
class Window:
    """The keys a query sees beyond causality: the last `size` positions (a sliding window) or,
    `chunked`, those of its own block of `size` positions from a multiple of `size` (Llama 4's
    chunked attention). Either way decode needs at most `size` keys: the cache is a ring of
    `size` slots."""

    size: int
    chunked: bool = False


@dataclass(frozen=True)
class Temperature:
    """Llama 4's attention temperature tuning: queries at position p scaled by
    1 + scale * ln(1 + floor((p + 1) / floor_scale)), so attention sharpens with the context."""

    floor_scale: float
    scale: float

    def table(self, positions: int) -> np.ndarray:
        """[positions] float32 factors, as transformers computes them."""
        p = np.arange(positions, dtype=np.float32)
        steps = np.floor((p + np.float32(1.0)) / np.float32(self.floor_scale))
        return (np.log1p(steps) * np.float32(self.scale) + np.float32(1.0)).astype(np.float32)


@dataclass(frozen=True)
class Layer:
    """What varies from layer to layer: the attention window, its RoPE (None without RoPE), dense or
    MoE MLP, and Llama 4's per-layer attention options; its mixer (attention, or a Mamba layer or
    Qwen3-Next's gated DeltaNet of ModelConfig.ssm, or an RWKV block: time mixing, then channel
    mixing, its own feed-forward block) and the mixers that run beside it (Falcon-H1's attention
    and Mamba-2 mixer side by side: the layer keeps both caches); which parts the layer has (a
    skipped attention: an MLP-only layer, as Nemotron-H's and DeciLM's; a skipped ffn: pure Mamba
    blocks, Nemotron-H's mixer layers) or replaces by a linear (DeciLM), and, in DeciLM's searched
    stacks, their sizes."""

    sliding_window: int | None
    rope: Rope | None
    rope_name: str
    moe: bool
    mixer: Mixer = "attention"
    chunk: int | None = None  # Llama 4's chunked attention: keys of the query's own chunk only
    qk_norm: bool = True  # the model's q/k norm applies here (Llama 4 norms its RoPE layers only)
    temperature: Temperature | None = None  # Llama 4 scales its NoPE layers' queries by position
    attention: LayerPart = "standard"
    ffn: LayerPart = "standard"
    kv_heads: int | None = None  # this layer's KV heads where they differ from the model's
    intermediate: int | None = None  # its MLP width where it differs from the model's
    block_sparse: BlockSparse | None = None  # its attention's block-sparse pattern (None: dense)
    # mixers that run beside `mixer` on the same normed input, their outputs summed (Falcon-H1:
    # attention and a Mamba-2 mixer in every layer), each keeping its own cache
    beside: tuple[Mixer, ...] = ()
    shared: int | None = None  # Zamba2: this layer runs the model's shared blocks' n-th use first

    def __post_init__(self) -> None:
        for mixer in self.mixers:
            check_mode(mixer, Mixer, "mixer")
        if len(set(self.mixers)) != len(self.mixers) or "rwkv" in self.beside:
            raise FrontendError(f"parallel mixers must differ and exclude RWKV blocks, got {self.mixers}")
        if sum(mixer != "attention" for mixer in self.mixers) > 1:
            raise FrontendError(f"a layer runs at most one recurrent mixer, got {self.mixers}")
        check_mode(self.attention, LayerPart, "layer attention")
        check_mode(self.ffn, LayerPart, "layer feed-forward")
        if self.sliding_window is not None and self.chunk is not None:
            raise FrontendError("a layer slides or attends in chunks, not both")

    @property
    def window(self) -> Window | None:
        """The layer's sliding window or chunk; None when it attends to every past position."""
        if self.chunk is not None:
            return Window(self.chunk, chunked=True)
        return None if self.sliding_window is None else Window(self.sliding_window)

    @property
    def mixers(self) -> tuple[Mixer, ...]:
        """Every mixer the layer runs: its own, then those beside it."""
        return (self.mixer, *self.beside)

    @property
    def recurrent(self) -> bool:
        """Whether one of the layer's mixers carries a fixed-size state of ModelConfig.ssm (Mamba,
        DeltaNet, RWKV), beside or instead of attention's KV cache."""
        return any(mixer != "attention" for mixer in self.mixers)

    @property
    def attends(self) -> bool:
        """Whether the layer runs attention, and so keeps a KV cache (not a purely recurrent
        layer, nor a layer whose attention is skipped or replaced; a Zamba2 layer's shared block
        attends)."""
        return ("attention" in self.mixers and self.attention == "standard") or self.shared is not None


@dataclass(frozen=True)
class SharedBlocks:
    """Zamba2's shared transformer blocks: `blocks` of them, stored once, used in turn by the
    layers whose `Layer.shared` is set (use n runs block n mod blocks, with low-rank adapters of its
    own on the shared MLP's gate and up, and on q, k and v with `attention_adapters`). A block
    reads the hidden state joined to the embeddings (2 x hidden wide) and its output goes through
    the layer's own [hidden, hidden] linear before the layer's Mamba mixer."""

    blocks: int
    rank: int  # adapter_rank
    attention_adapters: bool
    first_layers: tuple[int, ...]  # the layer whose checkpoint names hold each block's weights

    def prefix(self, use: int) -> str:
        """Where use `use`'s block keeps its weights: transformers saves each block under the
        first layer using it."""
        return f"model.layers.{self.first_layers[use % self.blocks]}.shared_transformer"

    def adapters(self, use: int) -> dict[str, tuple[str, str, str]]:
        """Use `use`'s adapters, canonical names: projection weight -> (A, B, the role of x A^T).
        The MLP's gate and up halves share A (gate_up_proj_adapter_list.{use}.0) and split B (the
        family's Chunk rules); q, k and v have their own (linear_q_adapter_list.{use}, ...) with
        `attention_adapters`."""
        pre = self.prefix(use)
        mlp = f"{pre}.feed_forward.gate_up_proj_adapter_list.{use}"
        found = {
            f"{pre}.feed_forward.{part}_proj.weight":
                (f"{mlp}.0.weight", f"{mlp}.1.{part}.weight", "mlp_adapter")
            for part in ("gate", "up")
        }  # fmt: skip
        for n in "qkv" if self.attention_adapters else "":
            a = f"{pre}.self_attn.linear_{n}_adapter_list.{use}"
            found[f"{pre}.self_attn.{n}_proj.weight"] = (f"{a}.0.weight", f"{a}.1.weight", f"{n}_adapter")
        return found


@dataclass(frozen=True)
class Norms:
    """Which norms a block has and how they normalise."""

    eps: float
    kind: NormKind = "rms"  # RMSNorm (weight) or LayerNorm (weight and bias)
    bias: bool = True  # LayerNorm's bias; Cohere's LayerNorms have none
    offset: float = 0.0  # Gemma's RMSNorm scales by (1 + w)
    embed: bool = False  # BLOOM: LayerNorm right after the embedding
    final: bool = True  # OPT's post-LN models have none
    final_eps: float | None = None  # the final norm's own eps (RWKV's ln_out keeps LayerNorm's 1e-5)
    sandwich: bool = False  # Gemma: norms after attention and MLP as well as before
    pre: bool = True  # False with sandwich: OLMo 2 norms only the branch outputs
    parallel: Literal[1, 2] = 2  # parallel blocks: 2 norms (GPT-NeoX) or 1 shared (Falcon-7B)

    def __post_init__(self) -> None:
        check_mode(self.kind, NormKind, "norm")
        check_mode(self.parallel, Literal[1, 2], "parallel block norms")


@dataclass(frozen=True)
class Residual:
    """How a layer's branches join the residual stream."""

    block: BlockKind = "pre"  # pre: x + f(norm(x)); post: norm(x + f(x)); parallel: x + attn + mlp
    scale: float = 1.0  # DeepNet's alpha: alpha * x + f(x)
    branch_scale: float = 1.0  # Granite's residual_multiplier: x + m * f(x)
    from_norm: bool = False  # BLOOM's apply_residual_connection_post_layernorm

    def __post_init__(self) -> None:
        check_mode(self.block, BlockKind, "block")


@dataclass(frozen=True)
class Positions:
    """How positions enter: RoPE on each layer's Q and K (Layer.rope), an absolute table added to
    the embedding, ALiBi's bias on the scores, or none."""

    kind: PositionKind = "rope"
    rotary_dim: int | None = None  # RoPE on the first rotary_dim of each head (GPT-NeoX); None: all
    # RoPE rotates pairs (x0, x1), (x2, x3), ... (GPT-J, Cohere, DeepSeek's rope_interleave), not
    # (x_k, x_k+K/2) (rotate_half)
    interleave: bool = False
    alibi_scale: float = 1.0  # Falcon scales the ALiBi bias with the scores (1/sqrt(head_dim)), BLOOM not

    def __post_init__(self) -> None:
        check_mode(self.kind, PositionKind, "position")


@dataclass(frozen=True)
class Attention:
    """What varies in (non-latent) attention beyond its sizes."""

    qkv_bias: bool = False
    out_bias: bool = False  # bias on the output projection
    # RMSNorm on q and k: per head, or over all heads' H x K (OLMo 2); each_head: Cohere's LayerNorm
    # (without bias) over each head's K with a weight of that head's own, [H, K]; l2: Llama 4's
    # RMSNorm over each head's K without a weight, after RoPE, on the layers whose Layer.qk_norm is set;
    # rotated: HunYuan's RMSNorm (with a weight, as per_head) over each head's K after RoPE
    qk_norm: QkNorm = "none"
    scale: float | None = None  # on the scores; default 1/sqrt(head_dim)
    softcap: float | None = None  # Gemma 2: scores -> cap * tanh(scores / cap) before the mask
    sinks: bool = False  # gpt-oss: a learned logit per head joins each softmax's denominator
    output_gate: bool = False  # Qwen3-Next: q_proj also gives a gate per head; out * sigmoid(gate)
    # Falcon-H1's muP multipliers: on attention's input, on its output (after o_proj), on the keys
    in_scale: float = 1.0
    out_scale: float = 1.0
    key_scale: float = 1.0

    def __post_init__(self) -> None:
        check_mode(self.qk_norm, QkNorm, "q/k norm")


@dataclass(frozen=True)
class Mlp:
    """The dense MLP (and the experts' activation)."""

    activation: Activation  # an IR unary op, or relu2 (relu, squared)
    kind: MlpKind = "gated"  # gated: down(act(gate) * up); plain: down(act(up))
    bias: bool = False
    # the clamped SwiGLU of gpt-oss's experts and Phi-3-small's gegelu (builder.ffn); None: act(gate) * up
    swiglu_limit: float | None = None
    swiglu_alpha: float = 1.0  # its sigmoid gain: gate * sigmoid(alpha * gate)
    gate_scale: float = 1.0  # Falcon-H1's mlp_multipliers: act(gate * this) * up, then down * down_scale
    down_scale: float = 1.0

    def __post_init__(self) -> None:
        check_mode(self.activation, Activation, "activation")
        check_mode(self.kind, MlpKind, "mlp")


@dataclass(frozen=True)
class Embedding:
    """The token embedding and the LM head that may share its table."""

    scale: float | None = None
    # Gemma multiplies by sqrt(hidden) held in the embedding's dtype (transformers builds the
    # normalizer as a tensor of that dtype): sqrt(1152) = 33.94 becomes 34.0 in bf16.
    scale_in_table_dtype: bool = False
    tied: bool = False  # the LM head is the embedding table
    logits_divisor: float = 1.0  # Granite's logits_scaling: logits / it
    logits_scale: float = 1.0  # Falcon-H1's lm_head_multiplier: logits * it
    logits_softcap: float | None = None  # Gemma 2: cap * tanh(logits / cap)
    head_bias: bool = False  # GPT-J, Phi: the (untied) LM head adds lm_head.bias

    def __post_init__(self) -> None:
        if self.tied and self.head_bias:
            raise FrontendError("an LM head tied to the embedding table has no bias of its own")


@dataclass(frozen=True)
class ModelConfig:
    """A model's sizes, its layers, and each part's variant as a group of its own."""

    name: str
    family: str
    vocab: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    layers: tuple[Layer, ...]
    norms: Norms
    mlp: Mlp
    residual: Residual = Residual()
    positions: Positions = Positions()
    attention: Attention = Attention()
    embedding: Embedding = Embedding()
    moe: Moe | None = None
    mla: Mla | None = None  # DeepSeek's latent attention instead of per-head K/V
    dsa: Dsa | None = None  # DeepSeek Sparse Attention's indexer over the latent attention (mla)
    ssm: Ssm | None = None  # the mixer of the recurrent layers (Layer.recurrent: Mamba, DeltaNet, RWKV)
    shared: SharedBlocks | None = None  # Zamba2's shared transformer blocks (Layer.shared)
    max_positions: int = 0
    dtype: str = "bfloat16"
    tensors: TensorMap = IDENTITY  # where the canonical weight names live in the checkpoint
    # MiMo's multi-token-prediction layers (num_nextn_predict_layers): the checkpoint holds them,
    # generation neither runs nor loads them (weight_shapes.unrun_shapes counts them)
    mtp_layers: int = 0

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    def kv_heads_of(self, layer: Layer) -> int:
        """Layer `layer`'s KV heads: its own, else the model's."""
        return layer.kv_heads if layer.kv_heads is not None else self.kv_heads

    def intermediate_of(self, layer: Layer) -> int:
        """Layer `layer`'s MLP width: its own, else the model's."""
        return layer.intermediate if layer.intermediate is not None else self.intermediate

    def state_elements(self, layers: range | None = None, chips: int = 1) -> int:
        """Cached elements one sequence holds at any context length in `layers` (all by default):
        every recurrent (Mamba, DeltaNet or RWKV) layer's state and convolution window, on one of
        `chips` tensor-parallel chips; 0 without them."""
        if self.ssm is None:
            return 0
        chosen = self.layers if layers is None else [self.layers[i] for i in layers]
        per_layer = self.ssm.elements_on(chips)
        return per_layer * sum(layer.recurrent for layer in chosen)

    @property
    def scale(self) -> float:
        scale = self.attention.scale
        return scale if scale is not None else self.head_dim**-0.5

    @property
    def rotary(self) -> int:
        """Head dims RoPE rotates: head_dim, fewer for partial rotary, 0 without RoPE."""
        if self.positions.kind != "rope":
            return 0
        dim = self.positions.rotary_dim
        return dim if dim is not None else self.head_dim


MAX_CONFIG_BYTES = 4 << 20  # published config.json files are a few KB; a larger one is not a config


class RawConfig:
    """A config.json's fields, checked as they are read: each against its entry in
    frontend.schema.FIELDS (type, finite, range), so errors name the file, the field's key path
    (`text_config.rope_scaling.factor`) and what was expected."""

    def __init__(self, data: Mapping[str, Any], source: str, family: str = "", prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.family = family
        self.prefix = prefix  # key path of this object within the file, "" or ending in "."

    @staticmethod
    def load(path: Path) -> RawConfig:
        """Reads a config.json whole, bounded in size (MAX_CONFIG_BYTES) and nesting depth."""
        try:
            data = json_input.loads(read_input(path, MAX_CONFIG_BYTES, "config.json files"))
        except OSError as e:
            raise FrontendError(f"{path}: cannot read: {e.strerror}") from None
        except ValueError as e:
            raise FrontendError(f"{path}: not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise FrontendError(f"{path}: expected a JSON object, got {type(data).__name__}")
        return RawConfig(data, str(path))

    def nested(self, key: str) -> RawConfig:
        """The object under `key`, whose fields' errors name `key.field`."""
        value = self.get(key, kind=dict)
        return RawConfig(value or {}, self.source, self.family, f"{self.prefix}{key}.")

    def path(self, key: str) -> str:
        """The key path of field `key` within the file, as messages name it."""
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None, kind: type | tuple[type, ...] | None = None) -> Any:
        value = self.data.get(key)
        if value is None:
            return default
        self._check(key, value, kind)
        return value

    def require(self, key: str, kind: type | tuple[type, ...] = int) -> Any:
        if self.data.get(key) is None:
            raise FrontendError(
                f"{self.source}: missing field '{self.path(key)}' (needed for {self.family} models)"
            )
        value = self.data[key]
        self._check(key, value, kind)
        return value

    def _check(self, key: str, value: Any, kind: type | tuple[type, ...] | None) -> None:
        """The schema's rule for `key` when it has one, else the reader's `kind` (numbers positive
        and finite)."""
        rule = FIELDS.get(key)
        if rule is not None:
            if not rule.accepts(value):
                raise self.fail(f"{self.path(key)}: expected {rule.expected()}, got {show(value)}")
            return
        if kind is None:
            return
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            kinds = (*kinds, int)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.fail(f"{self.path(key)}: expected {names}, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{self.path(key)}: expected a finite number, got {show(value)}")
        if kinds in ((int,), (float,), (float, int), (int, float)) and value <= 0:
            raise self.fail(f"{self.path(key)}: expected a number > 0, got {show(value)}")

    def fail(self, message: str) -> FrontendError:
        return FrontendError(f"{self.source}: {message}")


def read_rope(
    raw: RawConfig,
    layer_type: str | None = None,
    default_theta: float = 10000.0,
    aliases: Mapping[str, str] | None = None,
) -> Rope:
    """RoPE from `rope_parameters` (transformers 5, per layer type for Gemma 3) or the old fields,
    each value checked against the schema under its own key path (`rope_scaling.factor`).
    `aliases` renames rope types a family reads as another (Phi-3's "su" is longrope)."""
    nested = False
    if raw.has("rope_parameters"):
        params = raw.nested("rope_parameters")
        if layer_type is not None and params.has(layer_type):
            params, nested = params.nested(layer_type), True
    else:
        scaling = raw.nested("rope_scaling")
        data = dict(scaling.data)
        data.setdefault("rope_theta", raw.get("rope_theta", default_theta))
        params = RawConfig(data, raw.source, raw.family, scaling.prefix)
    kind = params.get("rope_type", params.get("type", "default"))
    kind = (aliases or {}).get(kind, kind)
    theta = float(params.get("rope_theta", raw.get("rope_theta", default_theta)))
    if kind == "default":
        return Rope(theta)
    if kind == "linear":
        return Rope(theta, "linear", float(params.require("factor", float)))
    if kind == "llama3":
        rope = Rope(
            theta,
            "llama3",
            float(params.require("factor", float)),
            float(params.require("low_freq_factor", float)),
            float(params.require("high_freq_factor", float)),
            int(params.require("original_max_position_embeddings")),
        )
        if rope.high_freq_factor < rope.low_freq_factor:  # equal: no band between (Llama 4 Scout)
            raise params.fail(
                f"{params.path('high_freq_factor')}: expected a number >= low_freq_factor "
                f"({rope.low_freq_factor:g}), got {rope.high_freq_factor:g}"
            )
        return rope
    if kind == "yarn":
        return _read_yarn(raw, params, theta, nested)
    if kind == "dynamic":
        return Rope(
            theta, "dynamic", float(params.require("factor", float)), max_positions=_max_positions(raw)
        )
    if kind == "longrope":
        return _read_longrope(raw, params, theta, nested)
    where = params.prefix.rstrip(".") or "rope parameters"
    raise raw.fail(
        f"{where}: rope_type '{kind}' is not supported "
        f"(supported: default, linear, llama3, yarn, dynamic, longrope)"
    )


def _max_positions(raw: RawConfig) -> int:
    if not raw.has("max_position_embeddings"):
        raise raw.fail(
            f"missing field '{raw.path('max_position_embeddings')}' (the length RoPE scaling starts from)"
        )
    return int(raw.get("max_position_embeddings"))


def _original_max(raw: RawConfig, params: RawConfig, nested: bool) -> int:
    """The pretraining context yarn and longrope scale from, as transformers' standardize_rope_params
    picks it: a top-level original_max_position_embeddings wins (Phi-3 keeps it there), then the
    RoPE parameters' own, then max_position_embeddings."""
    if not nested and raw.has("original_max_position_embeddings"):
        return int(raw.get("original_max_position_embeddings"))
    if params.has("original_max_position_embeddings"):
        return int(params.get("original_max_position_embeddings"))
    return _max_positions(raw)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _read_yarn(raw: RawConfig, params: RawConfig, theta: float, nested: bool) -> Rope:
    """YaRN: its factor (required, as transformers requires it), ramp (beta_fast, beta_slow,
    truncate) and attention factor: given, or from mscale / mscale_all_dim (DeepSeek), or
    0.1 ln(factor) + 1. The original context (original_max_position_embeddings, else
    max_position_embeddings) may exceed max_position_embeddings: transformers accepts that too."""
    factor = float(params.require("factor", float))
    original = _original_max(raw, params, nested)
    if theta <= 1.0:
        raise params.fail(f"{params.path('rope_theta')}: yarn needs a base > 1, got {theta:g}")
    attention = params.get("attention_factor")
    if attention is None:
        mscale, all_dims = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and all_dims:
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, all_dims)
        else:
            attention = _yarn_mscale(factor)
    beta_fast, beta_slow = float(params.get("beta_fast", 32.0)), float(params.get("beta_slow", 1.0))
    if beta_fast < beta_slow:
        raise params.fail(
            f"{params.path('beta_fast')}: expected a number >= beta_slow ({beta_slow:g}), got {beta_fast:g}"
        )
    return Rope(
        theta,
        "yarn",
        factor,
        original_max_positions=original,
        attention_factor=float(attention),
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        truncate=bool(params.get("truncate", True)),
    )


def _read_longrope(raw: RawConfig, params: RawConfig, theta: float, nested: bool) -> Rope:
    """LongRoPE: short and long per-frequency factors; the attention factor given, or
    sqrt(1 + ln(factor) / ln(original)) with factor defaulting to max / original positions."""
    original = _original_max(raw, params, nested)
    if original < 2:
        where = params.path("original_max_position_embeddings")
        raise params.fail(f"{where}: longrope needs a number >= 2, got {original}")
    short, long = params.require("short_factor", list), params.require("long_factor", list)
    if len(short) != len(long):
        raise params.fail(
            f"{params.path('long_factor')}: expected {len(short)} entries like short_factor, got {len(long)}"
        )
    factor = float(params.get("factor", _max_positions(raw) / original))
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return Rope(
        theta,
        "longrope",
        factor,
        original_max_positions=original,
        attention_factor=float(attention),
        short_factor=tuple(float(x) for x in short),
        long_factor=tuple(float(x) for x in long),
        source=params.prefix.rstrip("."),
    )
