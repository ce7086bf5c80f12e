"""Tensor parallelism: a graph built for N chips, run SPMD with each rank's weight shards, computes
what the one-chip graph computes, with one collective where each partial result joins, and each
chip holding 1/N of every sharded weight.

The tiny models use 4 query heads and 2 KV heads, so 2 chips split the KV heads and 4 chips
replicate them; the vocabulary is 96 (not tiny_models' 97) so the LM head is vocab-parallel.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import ir
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.builder.model import splits
from tcp_compiler.frontend.config import Layer, Mlp, ModelConfig, Norms, Rope
from tcp_compiler.frontend.model import Model, bundled_models, load_model
from tcp_compiler.frontend.precision import PRECISIONS, Precision, precision
from tcp_compiler.runtime.generate import Generation, generate
from tests.oracle.tiny_models import build, save

# plain, q/k/v biases, windows + tied + (1+w), MoE, parallel block + fused QKV + partial RoPE + biases,
# ALiBi + embedding norm, multi-query (one KV head, replicated) + one shared norm, LM head bias (Phi),
# multi-query with learned positions (GPTBigCode), chunks + NoPE + a shared expert beside the routed
# ones (Llama 4), post-norms + per-head q/k norm + NoPE global layers (EXAONE 4), with
# DeepSeek-V3 routing and a shared expert (K-EXAONE), interleaved RoPE with biases on every projection
# (ERNIE 4.5) and its MoE (a [1, E] correction bias, shared experts, dense layers between), q/k/v
# biases without o's (Seed-OSS), q/k norm after RoPE with a shared MLP beside the experts (HunYuan MoE)
FAMILIES = [
    "llama", "qwen2", "gemma3", "qwen3_moe", "gpt_neox", "bloom", "falcon", "phi", "gpt_bigcode", "llama4",
]  # fmt: skip
FAMILIES += ["exaone4", "exaone_moe", "ernie4_5", "ernie4_5_moe", "granitemoeshared", "dots1", "minimax_m2"]
FAMILIES += ["seed_oss", "hunyuan_v1_moe"]
FAMILIES += ["olmo3", "apertus"]  # all-heads q/k norm with windows; xIELU's replicated scalars
CHIPS = [2, 4]
PROMPTS = [[5, 17, 3, 88, 42, 9, 23, 71], [7, 1, 60]]  # right-padded to 8 tokens: 2 and 4 chips split them
STEPS = 3
VOCAB = 96
F32, BF16 = PRECISIONS["f32"], PRECISIONS["bf16"]
ROW_BIAS = re.compile(r"\.(o_proj|down_proj)\.bias$")
# norms, MoE routers (Llama 4's is `router`, Granite's `router.layer`, HunYuan's `gate.wg`) and their
# correction biases, positions (V=96 splits), xIELU's scalars
REPLICATED = re.compile(
    r"norm|\.gate(\.wg)?\.weight$|\.router(\.layer)?\.weight$|e_score_correction_bias$|embed_positions"
    r"|act_fn\.alpha_[pn]$"
)
TINY = ModelConfig(
    name="tiny", family="llama", vocab=96, hidden=32, heads=4, kv_heads=2, head_dim=8, intermediate=48,
    layers=(Layer(None, Rope(10000.0), "rope", False),), norms=Norms(1e-5), mlp=Mlp("silu"),
)  # fmt: skip


def _load(family: str, directory, vocab: int = VOCAB) -> Model:
    return load_model(save(build(family, vocab_size=vocab), directory))


def _generate(model: Model, chips: int, prec: Precision = F32) -> Generation:
    return generate(model.config, model.checkpoint.load, PROMPTS, prec, STEPS, chips=chips)


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory) -> tuple[str, Model, Generation]:
    model = _load(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, model, _generate(model, 1)


def _assert_same_generation(a: Generation, b: Generation, name: str, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(a.prefill_logits, b.prefill_logits, atol=atol, rtol=0, err_msg=name)
    assert len(a.decode_logits) == len(b.decode_logits) == STEPS
    for step, (x, y) in enumerate(zip(a.decode_logits, b.decode_logits, strict=True)):
        np.testing.assert_allclose(x, y, atol=atol, rtol=0, err_msg=f"{name} decode {step}")
    assert a.token_matrix.tolist() == b.token_matrix.tolist(), name


@pytest.mark.parametrize("chips", CHIPS)
def test_sharded_generation_matches_one_chip(tiny, chips: int) -> None:
    name, model, one = tiny
    _assert_same_generation(_generate(model, chips), one, f"{name} on {chips} chips")
    assert np.abs(one.prefill_logits).max() > 0.05, "logits too small to tell a bug from noise"


@pytest.mark.parametrize("chips", CHIPS)
def test_each_chip_caches_only_its_kv_heads(tiny, chips: int) -> None:
    name, model, _ = tiny
    cfg, get = model.config, model.checkpoint.load
    feeds = {"ids": np.array([PROMPTS[0]], np.int32)}
    whole = build_prefill(cfg, F32, 1, len(PROMPTS[0]))
    sharded = build_prefill(cfg, F32, 1, len(PROMPTS[0]), chips=chips)
    full = ir.interpret(whole.graph, feeds, whole.bind(get))
    ranks = ir.interpret_spmd(sharded.graph, [feeds] * chips, [sharded.bind(get, r) for r in range(chips)])
    per_chip = max(cfg.kv_heads // chips, 1)
    replicas = max(chips // cfg.kv_heads, 1)
    for i in range(len(cfg.layers)):
        for cache in (f"l{i}.k_cache", f"l{i}.v_cache"):
            assert sharded.graph[cache].type.size("Hkv") == per_chip
            for r, out in enumerate(ranks):
                first = r // replicas * per_chip
                expected = full[cache][:, first : first + per_chip]
                np.testing.assert_allclose(out[cache], expected, atol=1e-5, rtol=0, err_msg=f"{name} {cache}")


@pytest.mark.parametrize("chips", CHIPS)
def test_one_collective_where_each_partial_result_joins(tiny, chips: int) -> None:
    name, model, _ = tiny
    cfg = model.config
    for built in (
        build_prefill(cfg, F32, 2, 5, padded=True, chips=chips),
        build_decode(cfg, F32, 2, 6, chips=chips),
    ):
        g, users = built.graph, built.graph.users()
        assert built.chips == chips
        expected = {"embed": "embed.partial"}  # each chip's rows of the vocab-parallel lookup
        for i, layer in enumerate(cfg.layers):
            if cfg.residual.block == "parallel":  # attention and MLP partial sums join before one all_reduce
                expected[f"l{i}.parallel.sum"] = f"l{i}.parallel"
            else:
                expected[f"l{i}.o.sum"] = f"l{i}.o_b" if cfg.attention.out_bias else f"l{i}.o"
                routed = f"l{i}.moe_shared" if cfg.moe is not None and cfg.moe.shared else f"l{i}.moe"
                expected[f"l{i}.moe.sum" if layer.moe else f"l{i}.down.sum"] = (
                    routed if layer.moe else f"l{i}.down_b" if cfg.mlp.bias else f"l{i}.down"
                )
            if cfg.attention.qk_norm == "all_heads":  # OLMo's norm over every head: squares join first
                expected.update({f"l{i}.{t}_norm.sum.all": f"l{i}.{t}_norm.sum" for t in "qk"})
            assert f"model.layers.{i}.self_attn.o_proj.weight" in g[f"l{i}.o"].operands
        # a q/k norm over all heads (MiniMax-M2) sums each chip's squares of its heads: one small
        # all_reduce per norm, of one value per token
        sums = {f"l{i}.{x}_norm.sum.all": f"l{i}.{x}_norm.sum" for i in range(len(cfg.layers)) for x in "qk"}
        norms = sums if cfg.attention.qk_norm == "all_heads" else {}
        reduces = [n for n in g.of_kind("all_reduce") if n.name not in norms]
        assert {n.name: n.operands[0] for n in g.of_kind("all_reduce")} == expected | norms, name
        for name_ in norms:
            assert g[name_].type == ir.TensorType.of(ir.F32, B=2, S=g[name_].type.size("S"))
        for n in reduces:
            assert n.attrs == {"op": "sum", "chips": chips}
            width = {} if n.name.endswith("_norm.sum.all") else {"D": cfg.hidden}  # squares summed per row
            assert n.type == ir.TensorType.of(ir.F32, B=2, S=g[n.operands[0]].type.size("S"), **width)
            assert users[n.operands[0]] == [n.name]  # the partial sum feeds nothing else
        (gather,) = g.of_kind("all_gather")
        assert (gather.name, gather.attrs) == ("logits.gather", {"axis": "V", "chips": chips})
        assert g[gather.operands[0]].type == ir.TensorType.of(ir.F32, B=2, V=cfg.vocab // chips)
        assert g["logits"].operands == ("logits.gather",) and g.outputs[0] == "logits"
        assert g["logits"].type == ir.TensorType.of(ir.F32, B=2, V=cfg.vocab)
        assert ir.parse(ir.print_graph(g)) == g
    one = build_decode(cfg, F32, 2, 6)
    assert one.chips == 1 and not one.graph.of_kind("all_reduce") and not one.graph.of_kind("all_gather")


@pytest.mark.parametrize("chips", CHIPS)
def test_each_chip_holds_its_share_of_the_weights(tiny, chips: int) -> None:
    """Replicated params are whole on every chip; the distinct shards of a sharded one concatenate
    to the whole tensor and hold exactly its elements."""
    name, model, _ = tiny
    cfg, get = model.config, model.checkpoint.load
    whole, sharded = build_decode(cfg, BF16, 1, 4), build_decode(cfg, BF16, 1, 4, chips=chips)
    full = whole.bind(get)
    ranks = [sharded.bind(get, r) for r in range(chips)]
    assert set(sharded.bindings) - set(whole.bindings) == {"embed.first"}  # its first row of the vocab
    assert [sharded.bind(get, r)["embed.first"] for r in range(chips)] == [
        r * VOCAB // chips for r in range(chips)
    ]
    kv_replicas = max(chips // cfg.kv_heads, 1)
    replicated = sharded_whole = kv_whole = 0
    for p in whole.checkpoint_params():
        whole_type, chip_type = p.type, sharded.graph[p.name].type
        parts = [r[p.name] for r in ranks]
        if ROW_BIAS.search(p.name):  # added once: by rank 0, zeros elsewhere, before the all_reduce
            assert chip_type == whole_type and np.array_equal(parts[0], full[p.name])
            assert not any(x.any() for x in parts[1:]), p.name
            replicated += whole_type.nbytes
            continue
        if chip_type == whole_type:  # replicated: embedding, norms, router, or the only KV head
            one_kv_head = cfg.kv_heads == 1 and re.search(r"\.[kv]_proj\.", p.name)
            assert REPLICATED.search(p.name) or one_kv_head, f"{p.name} is replicated"
            assert all(np.array_equal(x, full[p.name]) for x in parts)
            replicated += whole_type.nbytes
            continue
        (axis,) = [a.name for a, b in zip(whole_type.axes, chip_type.axes, strict=True) if a != b]
        is_kv = bool(re.search(r"\.([kv]_proj|k_norm)\.", p.name))  # an all-heads k norm is cut as k_proj
        step = kv_replicas if is_kv else 1  # chips sharing a KV head hold the same shard
        distinct = parts[::step]
        assert all(np.array_equal(parts[r], distinct[r // step]) for r in range(chips)), p.name
        np.testing.assert_array_equal(np.concatenate(distinct, axis=whole_type.index(axis)), full[p.name])
        assert sum(x.size for x in distinct) == whole_type.numel
        sharded_whole += whole_type.nbytes
        kv_whole += whole_type.nbytes if is_kv else 0
    if cfg.embedding.tied:  # the head reads the chip's rows of the embedding table
        assert "model.embed_tokens.weight" in sharded.graph["logits.raw"].operands
    chip_bytes = sum(p.type.nbytes for p in sharded.checkpoint_params()) - replicated
    kv_copies = kv_whole * (kv_replicas - 1)  # chips sharing a KV head each hold it
    # 1/N of the sharded weights per chip (the embedding too), plus what KV replication adds.
    assert chips * chip_bytes == sharded_whole + kv_copies, name


@pytest.mark.parametrize(("family", "chips"), [("llama", 2), ("llama", 4), ("qwen3_moe", 2)])
def test_w4_shards_are_quantised_after_slicing(family: str, chips: int, tmp_path) -> None:
    """Groups run along the input axis, so a shard quantises exactly as its block of the whole."""
    model = _load(family, tmp_path)
    # Partial sums cross the chips in f32 here, so the shards must reproduce one chip exactly.
    get, w4 = model.checkpoint.load, dataclasses.replace(precision("w4", 4), collective_dtype=ir.F32)
    _assert_same_generation(_generate(model, chips, w4), _generate(model, 1, w4), f"{family} w4")
    whole = build_prefill(model.config, w4, 1, 2)
    sharded = build_prefill(model.config, w4, 1, 2, chips=chips)
    full, ranks = whole.bind(get), [sharded.bind(get, r) for r in range(chips)]
    mlp = "mlp.down_proj" if family == "llama" else "mlp.experts.down_proj"
    for weight in ("self_attn.q_proj", "self_attn.o_proj", mlp):  # column- and row-parallel
        for name in (f"model.layers.0.{weight}.weight", f"model.layers.0.{weight}.weight.scale"):
            a, b = whole.graph[name].type, sharded.graph[name].type
            (axis,) = [i for i, (x, y) in enumerate(zip(a.axes, b.axes, strict=True)) if x != y]
            for r, block in enumerate(np.split(full[name], chips, axis=axis)):
                np.testing.assert_array_equal(ranks[r][name], block, err_msg=name)


def test_w4_group_that_does_not_tile_a_shard_pads_it(tmp_path) -> None:
    """24 expert columns over 4 chips is 6 each, which groups of 4 do not tile: each share is
    zero-padded to 8 (the groups stay those of the whole weight) and the result is one chip's."""
    model = _load("qwen3_moe", tmp_path)
    w4 = dataclasses.replace(precision("w4", 4), collective_dtype=ir.F32)
    graph = build_prefill(model.config, w4, 1, 2, chips=4).graph
    codes = graph["model.layers.0.mlp.experts.down_proj.weight"].type
    assert (codes.size("Fg"), codes.size("Fi")) == (2, 4)
    _assert_same_generation(_generate(model, 4, w4), _generate(model, 1, w4), "qwen3_moe w4 padded")


@pytest.mark.parametrize(("family", "width"), [("llama", {"intermediate_size": 50}),
                                               ("qwen3_moe", {"moe_intermediate_size": 26})])  # fmt: skip
def test_a_width_the_chips_do_not_divide_is_zero_padded(family: str, width: dict, tmp_path) -> None:
    """50 MLP or 26 expert columns over 4 chips: 13 or 7 per chip, the last chip's partly zeros
    (zero rows give zero activations, zero columns add nothing): the logits are one chip's."""
    model = load_model(save(build(family, vocab_size=VOCAB, **width), tmp_path))
    _assert_same_generation(_generate(model, 4), _generate(model, 1), family)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_vocab_that_does_not_split_replicates_the_lm_head(family: str, tmp_path) -> None:
    model = _load(family, tmp_path, vocab=97)
    built = build_decode(model.config, F32, 1, 4, chips=2)
    assert not built.graph.of_kind("all_gather")
    assert len(built.graph.of_kind("all_reduce")) == 2 * len(model.config.layers)
    head = "model.embed_tokens.weight" if model.config.embedding.tied else "lm_head.weight"
    assert built.graph["logits.raw"].type.size("V") == 97 and head in built.graph["logits.raw"].operands
    _assert_same_generation(_generate(model, 2), _generate(model, 1), family)


@pytest.mark.parametrize(
    ("change", "chips", "message"),
    [
        ({}, 0, "chips must be at least 1, got 0"),
        ({}, 3, "tiny: 4 heads and 2 KV heads do not split over 3 chips"),
        ({}, 8, "tiny: 4 heads and 2 KV heads do not split over 8 chips"),
        ({"heads": 12, "kv_heads": 6}, 4, "tiny: 12 heads and 6 KV heads do not split over 4 chips"),
    ],
)
def test_bad_chip_counts_are_one_line_errors(change: dict, chips: int, message: str) -> None:
    cfg = dataclasses.replace(TINY, **change)
    for phase in (build_prefill, build_decode):
        with pytest.raises(FrontendError) as e:
            phase(cfg, F32, 1, 4, chips=chips)
        assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_bad_rank_is_an_error(tmp_path) -> None:
    cfg = _load("qwen3_moe", tmp_path).config
    built = build_decode(cfg, F32, 1, 4, chips=2)
    with pytest.raises(FrontendError, match="rank 2 is outside the 2 chips"):
        built.bind(lambda name: np.zeros(0), 2)
    with pytest.raises(FrontendError, match="do not split over 3 chips"):
        generate(cfg, lambda name: np.zeros(0), [[1, 2]], F32, 1, chips=3)


def _splits(cfg: ModelConfig, chips: int) -> bool:
    if cfg.ssm is not None:  # Mamba-1 splits its inner channels, Mamba-2 whole groups of heads, the
        # gated DeltaNet whole key heads, RWKV-4 its WKV channels, RWKV-5 / 6 whole heads
        split = cfg.ssm.heads if cfg.ssm.kind in ("rwkv5", "rwkv6") else cfg.ssm.groups
        if cfg.ssm.kind in ("mamba", "rwkv4"):
            split = cfg.ssm.inner
        return split % chips == 0
    heads, kv = cfg.heads, cfg.kv_heads
    return heads % chips == 0 and (kv % chips == 0 if kv >= chips else chips % kv == 0)


@pytest.mark.parametrize("chips", [2, 4, 8])
@pytest.mark.parametrize("name", bundled_models())
def test_every_bundled_model_builds_sharded(name: str, chips: int) -> None:
    cfg = load_model(name).config
    if not _splits(cfg, chips):
        with pytest.raises(FrontendError, match=f"do not split over {chips} chips"):
            build_decode(cfg, BF16, 1, 4, chips=chips)
        return
    for built in (build_prefill(cfg, BF16, 2, 4, chips=chips), build_decode(cfg, BF16, 2, 4, chips=chips)):
        ir.verify(built.graph)
        g = built.graph
        # one per parallel block, else one per mixer (attention, Mamba, DeltaNet: out_proj's partial
        # sums; Mamba-1's x_proj's too) and MLP a layer keeps (DeciLM and the hybrids skip some)
        mixer = 2 if cfg.ssm is not None and cfg.ssm.kind == "mamba" else 1
        parts = [  # an RWKV block: its time mixing's output and its channel mixing's value
            (1, True) if layer.mixer == "rwkv" else
            ((layer.attention == "standard") * (mixer if layer.recurrent else 1), layer.ffn == "standard")
            for layer in cfg.layers
        ]  # fmt: skip
        reduces = len(parts) if cfg.residual.block == "parallel" else sum(a + f for a, f in parts)
        if cfg.attention.qk_norm == "all_heads":  # OLMo 2's q/k norm statistics join too
            reduces += 2 * sum(a for a, _ in parts)
        vocab_parallel = cfg.vocab % chips == 0  # the embedding's rows join, the logits gather
        # a prefill whose residual stream is split by tokens joins by reduce_scatter on S, and
        # picks its last tokens' rows with one small all_reduce (h_last)
        joins = [n for n in g.of_kind("all_reduce") if n.name != "h_last"] + g.of_kind("reduce_scatter")
        assert len(joins) == reduces + vocab_parallel
        assert len([n for n in g.of_kind("all_gather") if n.attrs["axis"] == "V"]) == vocab_parallel
        assert g["logits"].type == ir.TensorType.of(ir.F32, B=2, V=cfg.vocab)
        if "mamba" in cfg.layers[0].mixers:  # each chip carries its share of the state
            assert g["l0.ssm_state"].type.numel == 2 * cfg.ssm.state_elements // chips
        if not cfg.layers[0].attends:  # Falcon-H1's layers attend beside their Mamba mixer
            continue
        assert g["l0.q_heads"].type.size("Hkv") * g["l0.q_heads"].type.size("G") == cfg.heads // chips


def test_llama_70b_on_8_chips_has_8_query_heads_and_1_kv_head_per_chip() -> None:
    cfg = load_model("llama-3.1-70b").config
    g = build_decode(cfg, BF16, 1, 16, chips=8).graph
    pre = "model.layers.0.self_attn"
    assert g[f"{pre}.q_proj.weight"].type == ir.TensorType.of(ir.BF16, H=8, K=128, D=8192)
    assert g[f"{pre}.k_proj.weight"].type == ir.TensorType.of(ir.BF16, Hkv=1, K=128, D=8192)
    assert g[f"{pre}.o_proj.weight"].type == ir.TensorType.of(ir.BF16, D=8192, H=8, K=128)
    assert g["l0.k_cache"].type == ir.TensorType.of(ir.BF16, B=1, Hkv=1, P=17, K=128)
    assert g["model.layers.0.mlp.down_proj.weight"].type.size("F") == 28672 // 8
    assert g["lm_head.weight"].type.size("V") == 128256 // 8
    assert g["model.embed_tokens.weight"].type == ir.TensorType.of(ir.BF16, V=128256 // 8, D=8192)


def test_partial_sums_cross_the_chips_in_the_collective_dtype(tmp_path) -> None:
    """bf16 runs send bf16 partial sums (half of f32's link bytes), and the sum is what one chip
    gets from the same bf16-rounded partials."""
    model = _load("llama", tmp_path)
    for name, wire in (("bf16", ir.BF16), ("fp8", ir.BF16), ("f32", ir.F32)):
        graph = build_prefill(model.config, precision(name), 1, 2, chips=2).graph
        # the joins of partial sums and the gathered block inputs (not the picked last rows in f32,
        # exactly, nor the logits)
        joins = [n for n in graph.nodes if n.kind in ("all_reduce", "reduce_scatter", "all_gather")
                 and n.name not in ("h_last", "logits.gather")]  # fmt: skip
        assert {n.kind for n in joins} == {"reduce_scatter", "all_gather"}, name
        assert all(n.type.dtype == wire for n in joins), name
    bf16 = precision("bf16")
    narrow = _generate(model, 2, bf16)
    wide = _generate(model, 2, dataclasses.replace(bf16, collective_dtype=ir.F32))
    assert not np.array_equal(narrow.prefill_logits, wide.prefill_logits)  # the rounding is real
    _assert_same_generation(narrow, wide, "bf16 wire", atol=0.1)


@pytest.mark.parametrize("chips", CHIPS)
def test_prefill_splits_the_residual_stream_by_tokens(tiny, chips: int) -> None:
    """Sequence parallelism (Korthikanti et al. 2022): with the chips dividing the prompt, every
    block's partial sums join by a reduce_scatter along S, the residual adds and the norms between
    blocks run on S / chips tokens, each block's normed input is all-gathered along S, and the
    logits are one chip's; without it (`sequence_parallel=False`) the joins are all-reduces of
    every token, with the same logits."""
    name, model, _ = tiny
    cfg, get, seq = model.config, model.checkpoint.load, 8
    assert splits(cfg, chips, seq) and not splits(cfg, chips, seq - 1)
    ids = np.array([PROMPTS[0], PROMPTS[1] + [0] * 5], np.int32)
    feeds = {"ids": ids, "lengths": np.array([8, 3], np.int32)}
    one = build_prefill(cfg, F32, 2, seq, padded=True)
    expected = ir.interpret(one.graph, feeds, one.bind(get))["logits"]
    for split in (True, False):
        built = build_prefill(cfg, F32, 2, seq, padded=True, chips=chips, sequence_parallel=split)
        g = built.graph
        ranks = ir.interpret_spmd(g, [feeds] * chips, [built.bind(get, r) for r in range(chips)])
        for out in ranks:
            np.testing.assert_allclose(out["logits"], expected, atol=1e-5, rtol=0, err_msg=f"{name} {split}")
        scatters, tokens = g.of_kind("reduce_scatter"), seq // chips if split else seq
        # every [B, S, D] join: all-reduces of every token, or reduce-scatters along S
        wide = [n for n in g.of_kind("all_reduce") if "D" in n.type.names and n.type.names != ("B", "D")]
        assert len(wide if not split else scatters) > len(cfg.layers), name
        assert not (wide if split else scatters), name
        assert all(n.attrs["axis"] == "S" and n.type.size("S") == tokens for n in scatters), name
        gathers = [n for n in g.of_kind("all_gather") if n.attrs["axis"] == "S"]
        # each block's normed input (a parallel block's two norms: both), not the embedding's
        assert len(gathers) >= len(scatters) - 1 if split else not gathers, name
        assert all(n.type.size("S") == seq for n in gathers), name
        roles = g.meta.roles
        normed = [n for n in g.nodes if roles.get(n.name) in ("attn_norm", "mlp_norm", "out")]
        assert normed and all(n.type.size("S") == tokens for n in normed), name


@pytest.mark.parametrize("family", ["llama", "gpt_bigcode"])  # RoPE; learned absolute positions
def test_packed_documents_split_by_tokens_equal_one_chip(family: str, tmp_path) -> None:
    """Packed rows (documents one after another) with the residual stream split over 2 chips: each
    chip adds the positions of its own tokens, attention sees every token's, and each document's
    last row comes from the chip holding it; the logits are one chip's."""
    model = _load(family, tmp_path)
    cfg, get = model.config, model.checkpoint.load
    ids = np.array([PROMPTS[0], [7, 1, 60, 2, 33, 4, 5, 6]], np.int32)
    segment = np.array([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 1]], np.int32)
    position = np.array([[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 0, 1, 2, 3, 4, 5]], np.int32)
    ends = np.array([[2, 7], [1, 7]], np.int32)
    feeds = {"ids": ids, "segment": segment, "position": position, "ends": ends}
    one = build_prefill(cfg, F32, 2, 8, documents=2)
    expected = ir.interpret(one.graph, feeds, one.bind(get))["logits"]
    built = build_prefill(cfg, F32, 2, 8, chips=2, documents=2)
    assert built.graph.of_kind("reduce_scatter") and built.graph["h_last"].kind == "all_reduce"
    for out in ir.interpret_spmd(built.graph, [feeds] * 2, [built.bind(get, r) for r in range(2)]):
        np.testing.assert_allclose(out["logits"], expected, atol=1e-5, rtol=0, err_msg=family)
