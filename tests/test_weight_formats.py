"""Weight formats (fp8 with tensor / channel / block scales, w8a16, w8a8, int4 with zero points,
MXFP4): pre-quantised checkpoints bind as stored and compute what transformers computes on their
dequantised weights; --dtype formats equal a numpy quantise-dequantise from the formats'
definitions; sharded equals unsharded; bad quantization_config fields are one-line errors; and a
decode step's HBM bytes follow each format's bits per weight.

Every run uses f32 activations (the formats' weights dequantise to f32), so the only difference
from transformers is summation order: prefill and 4 decode steps agree within 1e-4 x max |logit|.
The reference is transformers on the weights our numpy code dequantises (transformers' own fp8
and compressed-tensors loaders need accelerate / compressed-tensors, not installed); for gpt-oss
MXFP4 it is transformers' own dequantising loader (Mxfp4Config(dequantize=True)).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

import ir
from simulator.hardware import load_hardware
from tcp_compiler.analysis.config_floor import head_bytes, matmul_weight_bytes
from tcp_compiler.cli import main
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, Precision, checkpoint_precision, precision
from tcp_compiler.runtime.generate import generate
from tcp_compiler.simulate import simulate_generation
from tests.oracle.quantised_checkpoints import (
    LINEARS,
    asymmetric,
    define_schemes,
    fp8,
    int8,
    load_dequantised,
    mxfp4,
    write,
    write_gpt_oss_mxfp4,
)
from tests.oracle.test_families import reference_logits
from tests.oracle.tiny_models import build, save

PROMPT = [5, 17, 3, 88, 42, 9]
STEPS = 4
SCHEMES = define_schemes(block=16, group=16)


def _f32(p: Precision) -> Precision:
    return replace(p, act=ir.F32, kv=ir.F32, table=ir.F32)


def _ours(model, prec: Precision, chips: int = 1) -> tuple[list[np.ndarray], list[int]]:
    result = generate(model.config, model.checkpoint.load, [PROMPT], prec, STEPS, chips=chips)
    return [result.prefill_logits[0]] + [d[0] for d in result.decode_logits], result.token_matrix[0].tolist()


def _assert_close(ours: list[np.ndarray], theirs: list[np.ndarray], label: str) -> None:
    scale = float(np.abs(theirs[0]).max())
    assert scale > 0.05, "logits too small to tell a bug from noise"
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4 * scale, rtol=0, err_msg=f"{label} step {step}")


def _quantise_activations(model) -> list:
    """w8a8's activations as the reference runs them: per token, max |x| -> 127, rounded to even."""

    def hook(module, args):
        x = args[0]
        step = (x.abs().amax(-1, keepdim=True) / 127.0).clamp_min(1e-30)
        return (torch.round(x / step) * step,)

    linears = [m for n, m in model.named_modules() if n.split(".")[-1] in LINEARS]
    return [m.register_forward_pre_hook(hook) for m in linears]


@pytest.fixture(scope="module", params=sorted(SCHEMES))
def stored(request, tmp_path_factory):
    quant, writer = SCHEMES[request.param]
    model = build("llama")
    directory = tmp_path_factory.mktemp(request.param)
    load_dequantised(model, write(model, directory, quant, writer))
    return request.param, model, directory


def test_stored_checkpoint_matches_transformers_on_its_dequantised_weights(stored) -> None:
    name, model, directory = stored
    loaded = load_model(directory)
    assert loaded.scheme is not None
    ours, tokens = _ours(loaded, _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format)))
    hooks = _quantise_activations(model) if name == "ct-w8a8" else []
    try:
        theirs = reference_logits(model, PROMPT, tokens[:STEPS])
    finally:
        for h in hooks:
            h.remove()
    _assert_close(ours, theirs, name)


def test_stored_codes_are_bound_as_stored(stored) -> None:
    """No dequantise-then-requantise: the codes param holds the checkpoint's codes, the scale
    param one stored scale per block, and the LM head (on the ignore list) stays float."""
    name, _, directory = stored
    loaded = load_model(directory)
    fmt = loaded.scheme.format
    built = build_prefill(loaded.config, _f32(checkpoint_precision("float32", fmt)), 1, 4)
    params = built.bind(loaded.checkpoint.load)
    q_name = "model.layers.0.self_attn.q_proj.weight"
    assert built.graph[q_name].type.dtype == fmt.codes
    assert built.graph["lm_head.weight"].type.dtype == ir.F32
    expected = loaded.checkpoint.load(f"{q_name}:codes")
    np.testing.assert_array_equal(params[q_name].reshape(expected.shape), expected)
    if name.startswith(("ct-fp8", "deepseek", "ct-w8")):
        stored_weight = loaded.checkpoint.checkpoint.load(q_name)
        np.testing.assert_array_equal(params[q_name].reshape(stored_weight.shape), stored_weight)
    scales = params[f"{q_name}.scale"]
    assert scales.size == {"ct-fp8-tensor": 1, "ct-fp8-block": 4, "deepseek-fp8": 4}.get(name, scales.size)


@pytest.mark.parametrize("name", ["deepseek-fp8", "ct-fp8-block"])
def test_stored_fp8_blocks_cut_short_by_the_edges_match_transformers(name: str, tmp_path) -> None:
    """A checkpoint whose 16 x 16 blocks do not tile hidden 40 or q_proj's 40 rows stores
    ceil-sized scale grids ([3, 3]), as DeepSeek-V3's kv_a_proj_with_mqa [576, 7168] stores [5, 56];
    tcpc binds the codes as stored and matches transformers on the weights its finegrained_fp8
    dequantises from the same tensors."""
    from safetensors.torch import load_file
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    quant, writer = SCHEMES[name]
    model = build("llama", **PARTIAL_LLAMA)
    directory = tmp_path / name
    write(model, directory, quant, writer)
    stored = load_file(directory / "model.safetensors")
    scale = "weight_scale_inv" if name == "deepseek-fp8" else "weight_scale"
    theirs = {f"{m}.weight": _dequantize_fp8_weight(stored[f"{m}.weight"], stored[f"{m}.{scale}"], [16, 16],
                                                    torch.float32).numpy()
              for m in (n.removesuffix(f".{scale}") for n in stored if n.endswith(scale))}  # fmt: skip
    assert stored[f"{Q}.{scale}"].shape == (3, 3)
    load_dequantised(model, theirs)
    loaded = load_model(directory)
    ours, tokens = _ours(loaded, _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format)))
    _assert_close(ours, reference_logits(model, PROMPT, tokens[:STEPS]), name)


@pytest.mark.parametrize("chips", [2, 4])
def test_stored_fp8_blocks_split_over_chips_equal_one_chip(chips: int, tmp_path) -> None:
    """Column-parallel shares that are not whole blocks of 16 (q_proj's 4 heads x 8 = 32 rows: 16
    or 8 a chip; k / v_proj's 2 KV heads x 8: one head, 8 rows, a chip; gate / up's 32 rows: 16
    or 8 a chip; down_proj's 32 columns likewise; hidden 40 is 3 blocks on every chip),
    each chip's last block partial and unpadded, read the checkpoint's scales for their rows and
    give one chip's logits."""
    quant, writer = SCHEMES["deepseek-fp8"]
    directory = tmp_path / "ckpt"
    model = build("llama", hidden_size=40, head_dim=8, intermediate_size=32, vocab_size=96)
    write(model, directory, quant, writer)
    loaded = load_model(directory)
    prec = _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format))
    one, _ = _ours(loaded, prec)
    many, _ = _ours(loaded, prec, chips=chips)
    for step, (a, b) in enumerate(zip(one, many, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"step {step}")
    graph = build_decode(loaded.config, prec, 1, 8, chips=chips).graph
    up = "model.layers.0.mlp.up_proj.weight"
    assert graph[up].type.numel == 32 // chips * 40  # unpadded: 16 or 8 rows a chip
    assert graph[f"{up}.scale"].type.sizes == {"Fg": 1, "Dg": 3}


def test_dtype_fp8_blocks_split_on_block_boundaries_equal_one_chip(tmp_path) -> None:
    """--dtype fp8-block over 2 chips whose shares are whole blocks (q / k / v_proj's 16 rows,
    o_proj's 16 columns a chip) while hidden 40 ends in a partial block on every chip: each chip
    quantises its share on the whole weight's grid, so the logits are one chip's. (A share that
    starts inside a block, 2 KV heads' 8 rows a chip, is quantised on a grid of its own, as a
    per-shard quantiser does, and differs from one chip by fp8 rounding.)"""
    model = build("llama", hidden_size=40, head_dim=8, num_key_value_heads=4, intermediate_size=32,
                  vocab_size=96)  # fmt: skip
    loaded = load_model(save(model, tmp_path))
    prec = _fp8_block(16)
    one, _ = _ours(loaded, prec)
    two, _ = _ours(loaded, prec, chips=2)
    for step, (a, b) in enumerate(zip(one, two, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"step {step}")


def test_stored_blocks_a_chip_share_starts_inside_are_refused(tmp_path) -> None:
    """q_proj's 4 heads x 10 = 40 rows over 2 chips: chip 1's 20 rows start inside the stored
    16-row block [16, 32), so its rows' scales do not fall on blocks of its own: a one-line
    error naming the weight, not scales silently mixed."""
    quant, writer = SCHEMES["deepseek-fp8"]
    write(build("llama", hidden_size=40, vocab_size=96), tmp_path, quant, writer)
    loaded = load_model(tmp_path)
    prec = _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format))
    with pytest.raises(TcpcError, match=r"q_proj\.weight: its scale is not constant .* inside a block"):
        _ours(loaded, prec, chips=2)


@pytest.mark.parametrize("name", ["ct-fp8-channel", "awq"])
def test_sharded_equals_unsharded(name: str, tmp_path) -> None:
    quant, writer = define_schemes(block=16, group=8)[name]
    directory = tmp_path / name
    write(build("llama", vocab_size=96), directory, quant, writer)
    loaded = load_model(directory)
    prec = _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format))
    one, _ = _ours(loaded, prec)
    two, _ = _ours(loaded, prec, chips=2)
    for step, (a, b) in enumerate(zip(one, two, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"{name} step {step}")


def test_gpt_oss_mxfp4_checkpoint_matches_transformers_dequantising_it(tmp_path) -> None:
    import transformers

    directory = tmp_path / "gpt_oss"
    ours_dequantised = write_gpt_oss_mxfp4(build("gpt_oss", intermediate_size=64), directory)
    loaded = load_model(directory)
    fmt = loaded.scheme.format
    assert fmt.codes == ir.U4 and fmt.table and loaded.scheme.method == "mxfp4"
    ours, tokens = _ours(loaded, _f32(checkpoint_precision(loaded.config.dtype, fmt)))
    hf = transformers.GptOssForCausalLM.from_pretrained(
        directory, quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32
    ).eval()
    hf.config._attn_implementation = "eager"
    theirs_dequantised = hf.state_dict()
    for name, w in ours_dequantised.items():  # transformers reads the blocks as our reference does
        np.testing.assert_array_equal(theirs_dequantised[name].numpy(), w)
    _assert_close(ours, reference_logits(hf, PROMPT, tokens[:STEPS]), "gpt_oss mxfp4")
    built = build_decode(loaded.config, checkpoint_precision(loaded.config.dtype, fmt), 1, 8)
    assert built.graph["model.layers.0.mlp.experts.gate_proj.weight"].type.dtype == ir.U4
    assert built.graph["model.layers.0.self_attn.q_proj.weight"].type.dtype == ir.BF16  # not an expert


@pytest.mark.parametrize("chips", [2, 4])
def test_gpt_oss_mxfp4_expert_width_the_blocks_do_not_tile_per_chip_is_padded(chips: int, tmp_path) -> None:
    """96 expert columns (3 blocks of 32) over 2 or 4 chips: 48 or 24 per chip, which 32-column
    blocks do not tile; each chip's share is zero-padded to 64 or 32 (the last chips hold the
    zeros) and the logits equal one chip's (gpt-oss-120b's 2,880 over 4 chips is the same case)."""
    directory = tmp_path / "gpt_oss"
    write_gpt_oss_mxfp4(build("gpt_oss", intermediate_size=96, vocab_size=96), directory)
    loaded = load_model(directory)
    prec = _f32(checkpoint_precision(loaded.config.dtype, loaded.scheme.format))
    one, _ = _ours(loaded, prec)
    many, _ = _ours(loaded, prec, chips=chips)
    for step, (a, b) in enumerate(zip(one, many, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=f"step {step}")
    built = build_decode(loaded.config, prec, 1, 8, chips=chips)
    codes = built.graph["model.layers.0.mlp.experts.down_proj.weight"].type  # F split in blocks of 32
    assert (codes.size("Fg"), codes.size("Fi")) == (4 // chips, 32)


# --dtype formats on a float checkpoint: tcpc quantises each projection itself (the LM head stays float).
REFERENCES = {
    "fp8-tensor": (None, lambda w: fp8(w, (0, 0), "s")[1]),
    "fp8-channel": (None, lambda w: fp8(w, (1, 0), "s")[1]),
    "fp8-block": ((16, 16), lambda w: fp8(w, (16, 16), "s")[1]),
    "w8a16": (None, lambda w: int8(w)[1]),
    "w4-zp": ((1, 16), None),
    "mxfp4": (None, mxfp4),
}


def _w4_zp(w: np.ndarray) -> np.ndarray:
    import ml_dtypes

    q, zero, scale = asymmetric(w, 16, scale_dtype=ml_dtypes.bfloat16)
    return ((q - np.repeat(zero, 16, 0)) * np.repeat(scale, 16, 0)).T.astype(np.float32)


@pytest.fixture(scope="module")
def float_llama(tmp_path_factory):
    model = build("llama", intermediate_size=64)  # MX blocks of 32 tile the MLP width
    return model, load_model(save(model, tmp_path_factory.mktemp("float_llama")))


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_dtype_format_equals_numpy_quantise_dequantise(float_llama, name: str) -> None:
    model, loaded = float_llama
    block, reference = REFERENCES[name]
    prec = precision(name)
    if block is not None:
        prec = replace(prec, format=replace(prec.format, block=block))
    ours, tokens = _ours(loaded, _f32(prec))
    reference = reference or _w4_zp
    copy = build("llama", intermediate_size=64)
    weights = {
        n: reference(p.detach().numpy())
        for n, p in copy.named_parameters()
        if n.endswith(".weight") and n.split(".")[-2] in LINEARS
    }
    load_dequantised(copy, weights)
    _assert_close(ours, reference_logits(copy, PROMPT, tokens[:STEPS]), name)


def _partial_fp8_blocks(w: np.ndarray, block: int) -> np.ndarray:
    """DeepSeek's fp8 blocks of a weight its blocks may not tile (the `fp8` writer: a block cut
    short by the edge takes the max |w| of the rows and columns it has), dequantised by
    transformers (finegrained_fp8's dequantisation of the ceil-sized scale grid)."""
    from transformers.integrations.finegrained_fp8 import _dequantize_fp8_weight

    tensors, _ = fp8(w, (block, block), "s")
    return _dequantize_fp8_weight(tensors["weight"], tensors["s"], [block, block], torch.float32).numpy()


def _fp8_block(block: int) -> Precision:
    prec = precision("fp8-block")
    return _f32(replace(prec, format=replace(prec.format, block=(block, block))))


def _linears_in_blocks(model, block: int) -> dict[str, np.ndarray]:
    return {n: _partial_fp8_blocks(p.detach().numpy(), block) for n, p in model.named_parameters()
            if n.endswith(".weight") and n.split(".")[-2] in LINEARS}  # fmt: skip


def _matches_transformers_in_blocks_of_16(model, tmp_path, label: str, dequantised=None):
    """Our fp8-block generation (blocks of 16) of `model` against transformers' with the same
    weights dequantised by it (`dequantised(model)`, by default its linears'); returns the loaded
    model and the precision, to inspect the graph."""
    loaded = load_model(save(model, tmp_path))
    prec = _fp8_block(16)
    ours, tokens = _ours(loaded, prec)
    load_dequantised(model, (dequantised or (lambda m: _linears_in_blocks(m, 16)))(model))
    _assert_close(ours, reference_logits(model, PROMPT, tokens[:STEPS]), label)
    return loaded, prec


def test_fp8_blocks_that_do_not_tile_the_mlp_width_end_in_a_partial_block(tmp_path) -> None:
    """An MLP width of 40 in blocks of 16 rows on one chip: ceil(40 / 16) = 3 blocks, the last one
    8 rows, the codes unpadded (40 rows in HBM, not 48), and the logits are transformers' with
    DeepSeek's partial edge blocks."""
    model = build("llama", intermediate_size=40)
    loaded, prec = _matches_transformers_in_blocks_of_16(model, tmp_path, "fp8-block, width 40")
    graph = build_decode(loaded.config, prec, 1, 8).graph
    down = "model.layers.0.mlp.down_proj.weight"
    assert graph[down].type.sizes == {"Dg": 2, "Di": 16, "F": 40}
    assert graph[f"{down}.scale"].type.sizes == {"Dg": 2, "Fg": 3}


# hidden 40 and q_proj's 5 heads x 8 = 40 rows: 2.5 blocks of 16; k / v_proj's one KV head: 8 rows
PARTIAL_LLAMA = dict(hidden_size=40, num_attention_heads=5, num_key_value_heads=1, head_dim=8)


def test_fp8_blocks_cut_short_by_the_hidden_and_head_widths(tmp_path) -> None:
    """Widths 16-row blocks do not tile (hidden 40, 5 heads x 8) are ceil(40 / 16) = 3 blocks, the
    last one partial, as transformers dequantises DeepSeek's fp8: the codes keep their true size
    (no padding) and the scale grid is ceil-sized; prefill and decode logits match."""
    model = build("llama", **PARTIAL_LLAMA)
    loaded, prec = _matches_transformers_in_blocks_of_16(model, tmp_path, "fp8-block, hidden 40")
    graph = build_decode(loaded.config, prec, 1, 8).graph
    q = "model.layers.0.self_attn.q_proj.weight"
    assert graph[q].type.sizes == {"H": 5, "K": 8, "D": 40}  # the codes as stored: 40 x 40
    assert graph[f"{q}.scale"].type.sizes == {"HKg": 3, "Dg": 3}
    assert graph[f"{q}.scale.HKg"].kind == "gather"  # each row's block scale, looked up as fetched


def test_partial_block_scales_are_looked_up_as_the_weight_is_fetched() -> None:
    """The scale lookup of a partial-block weight is part of the projection's fetch (its prologue):
    no pass or TensorDMA move makes the dequantised weight, HBM holds only the codes and the
    ceil-sized scale grid, and the projection's pass can still run a token tile at a time."""
    from simulator.targets.rngd.mapping.fusion import fuse
    from simulator.targets.rngd.mapping.token_tiles import treats_tokens_apart

    cfg = load_model("gpt-oss-20b").config  # hidden 2,880: 22.5 blocks of 128
    graph = build_prefill(cfg, precision("fp8-block"), 1, 256).graph
    q = "model.layers.0.self_attn.q_proj.weight"
    assert graph[f"{q}.scale"].type.sizes == {"Hg": 32, "Dg": 23}
    ops = fuse(graph)
    [project] = [op for op in ops if q in op.inputs]
    assert [n.name for n in project.prologue if n.kind == "gather"] == [f"{q}.scale.Dg"]
    assert not any(f"{q}.dequant" in op.outputs for op in ops) and project.contraction is not None
    assert treats_tokens_apart(graph, project)


def _deepseek_parts(model, block: int) -> dict[str, np.ndarray]:
    """A DeepSeek-V3's projections in fp8 blocks as tcpc stores them: each part of a fused weight
    (q_b_proj's nope and rope rows, kv_a's latent and rope key, kv_b's keys and values) and each
    expert's gate, up and down on a block grid of its own, dequantised by transformers."""
    cfg, out = model.config, {}
    H, C = cfg.num_attention_heads, cfg.kv_lora_rank
    splits = {"q_b_proj": (H, cfg.qk_nope_head_dim), "kv_b_proj": (H, cfg.qk_nope_head_dim),
              "kv_a_proj_with_mqa": (1, C)}  # fmt: skip

    def blocks(w: np.ndarray) -> np.ndarray:
        return _partial_fp8_blocks(w, block)

    for name, p in model.named_parameters():
        w, module = p.detach().numpy(), name.split(".")[-2]
        if name.endswith("experts.gate_up_proj"):
            half = w.shape[1] // 2
            out[name] = np.stack([np.concatenate([blocks(e[:half]), blocks(e[half:])]) for e in w])
        elif name.endswith("experts.down_proj"):
            out[name] = np.stack([blocks(e) for e in w])
        elif module in splits:
            heads, first = splits[module]
            per = w.reshape(heads, -1, w.shape[1])
            head, tail = per[:, :first], per[:, first:]
            parts = [blocks(p.reshape(-1, w.shape[1])).reshape(p.shape) for p in (head, tail)]
            out[name] = np.concatenate(parts, axis=1).reshape(w.shape)
        elif name.endswith("_proj.weight"):  # not the router (mlp.gate), which stays float
            out[name] = blocks(w)
    return out


# kv_a_proj_with_mqa: kv_lora_rank 16 + qk_rope_head_dim 4 = 20 rows (DeepSeek-V3's 512 + 64 in
# blocks of 16: its rope key is one partial block); hidden 40; q_a_proj's 24 rows; kv_b's values
# and o_proj's input 4 x 12 = 48 (whole blocks across heads); 24-row experts (1.5 blocks)
PARTIAL_DEEPSEEK = dict(hidden_size=40, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=4,
                        v_head_dim=12, q_lora_rank=24)  # fmt: skip


def test_deepseek_v3_fp8_blocks_cut_short_by_kv_a_proj_with_mqa(tmp_path) -> None:
    """MLA in fp8-block with partial edge blocks (the rope key's rows, the hidden width, q_a's
    24 rows) matches transformers on the same blocks dequantised by finegrained_fp8."""
    model = build("deepseek_v3", **PARTIAL_DEEPSEEK)
    model.set_experts_implementation("eager")
    loaded, prec = _matches_transformers_in_blocks_of_16(model, tmp_path, "deepseek-v3 fp8-block",
                                                         lambda m: _deepseek_parts(m, 16))  # fmt: skip
    graph = build_decode(loaded.config, prec, 1, 8).graph
    rope = "model.layers.0.self_attn.kv_a_proj_with_mqa.rope.weight"
    assert graph[rope].type.sizes == {"K": 4, "D": 40}  # the rope key's 4 rows of 40 codes, unpadded
    assert graph[f"{rope}.scale"].type.sizes == {"Kg": 1, "Dg": 3}


def test_mxfp4_is_a_table_lookup_and_a_shared_exponent(float_llama) -> None:
    graph = build_decode(float_llama[1].config, precision("mxfp4"), 1, 8).graph
    w = "model.layers.0.mlp.down_proj.weight"
    assert graph[w].type.dtype == ir.U4 and graph[f"{w}.scale"].type.dtype == ir.E8M0
    decoded = graph[f"{w}.decoded"]
    assert decoded.kind == "gather" and graph[decoded.operands[0]].kind == "const"
    assert graph[f"{w}.scale"].type.sizes == {"D": 32, "Fg": 2}  # one scale per 32 inputs
    assert graph[decoded.operands[0]].type == ir.TensorType.of(ir.FP8E4M3, C=16)


def test_w8a8_contracts_int8_operands_into_int32(float_llama) -> None:
    graph = build_decode(float_llama[1].config, precision("w8a8"), 1, 8).graph
    q = graph["l0.q"]
    assert [graph[o].type.dtype for o in q.operands] == [ir.I8, ir.I8] and q.type.dtype == ir.I32


# -- errors --------------------------------------------------------------------------------------------------

BAD = [
    ("awq", {"quant_method": "squeeze"}, "quantization_config.quant_method: 'squeeze' is not supported"),
    ("awq", {"bits": 3}, "quantization_config.bits: 3 is not supported"),
    ("awq", {"version": "gemv"}, "quantization_config.version: 'gemv' is not supported"),
    ("gptq", {"group_size": 0}, "quantization_config.group_size: expected a positive integer or -1"),
    ("deepseek-fp8", {"weight_block_size": [16]}, "quantization_config.weight_block_size: expected [rows"),
    ("deepseek-fp8", {"weight_block_size": None}, "quantization_config.weight_block_size: missing"),
    ("ct-fp8-block", {"config_groups": {"a": {}, "b": {}}}, "quantization_config.config_groups: 2 groups"),
]


@pytest.fixture(scope="module")
def quantised_dirs(tmp_path_factory):
    dirs = {}
    for name in {b[0] for b in BAD}:
        quant, writer = SCHEMES[name]
        dirs[name] = tmp_path_factory.mktemp(name)
        write(build("llama"), dirs[name], quant, writer)
    return dirs


@pytest.mark.parametrize(("scheme", "change", "message"), BAD, ids=[b[2].split(":")[1] for b in BAD])
def test_bad_quantization_config_is_a_one_line_error(
    quantised_dirs, tmp_path, capsys, scheme, change, message
) -> None:
    directory = tmp_path / "ckpt"
    shutil.copytree(quantised_dirs[scheme], directory)
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"].update(change)
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(TcpcError, match=message.replace("[", r"\[")):
        load_model(directory)
    assert main(["run", str(directory), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_nested_compressed_tensors_field_is_named(quantised_dirs, tmp_path) -> None:
    directory = tmp_path / "ckpt"
    shutil.copytree(quantised_dirs["ct-fp8-block"], directory)
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["block_structure"] = [16, 0]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(TcpcError, match=r"config_groups\.group_0\.weights\.block_structure: expected"):
        load_model(directory)


# -- stored parts checked against the config and the format before use -----------------------------------

Q = "model.layers.0.self_attn.q_proj"
GATE = "model.layers.0.mlp.gate_proj"  # [48, 32]: blocks of 16 make a [3, 2] scale grid
STORED_PARTS = [  # scheme, tensor, its replacement from the stored one, message
    ("awq", f"{Q}.qzeros", lambda t: t[:1], f"tensor '{Q}.qzeros' has shape [1, 4], but"),
    ("awq", f"{Q}.qzeros", lambda t: t[:1], "as AWQ with groups of 16 implies [2, 4]"),
    ("awq", f"{Q}.qweight", lambda t: t.float(), f"tensor '{Q}.qweight' is F32, but"),
    ("awq", f"{Q}.qweight", lambda t: t.reshape(-1), "has shape [128], but"),
    ("awq", f"{Q}.scales", lambda t: t.T.contiguous(), f"tensor '{Q}.scales' has shape [32, 2]"),
    ("awq", f"{Q}.scales", lambda t: t.to(torch.int32), f"tensor '{Q}.scales' is I32, but"),
    ("gptq", f"{Q}.qzeros", lambda t: torch.cat([t, t]), "as GPTQ with groups of 16 implies [2, 4]"),
    ("gptq", f"{Q}.g_idx", lambda t: t[:8], f"tensor '{Q}.g_idx' has shape [8], but"),
    ("ct-fp8-block", f"{GATE}.weight_scale", lambda t: t.T.contiguous(), "has shape [2, 3], but"),
    ("deepseek-fp8", f"{GATE}.weight_scale_inv", lambda t: t.reshape(-1), "has shape [6], but"),
    # hidden 40 in blocks of 16: ceil(40 / 16) = 3 column blocks, not the floor's 2
    ("deepseek-fp8-partial", f"{Q}.weight_scale_inv", lambda t: t[:, :2].contiguous(),
     "as fp8-block:fp8 with scale blocks of 16 x 16 implies [3, 3]"),
    ("ct-fp8-channel", f"{Q}.weight_scale", lambda t: t.to(torch.int32), f"tensor '{Q}.weight_scale' is I32"),
    ("ct-fp8-channel", f"{Q}.weight", lambda t: t.float(), f"tensor '{Q}.weight' is F32, but"),
    ("ct-w8a16", f"{Q}.weight", lambda t: t[:, :16].contiguous(), f"tensor '{Q}.weight' has shape [32, 16]"),
]  # fmt: skip
BAD_CONFIGS = [  # scheme, change to quantization_config, message
    ("ct-fp8-block", {"ignore": ["re:(lm_head"]}, "ignore[0]: 're:(lm_head' is not a valid"),
    ("ct-w8a8", {"input_activations": {"strategy": "tensor"}}, "activations.strategy: 'tensor' is not"),
    ("ct-w8a8", {"input_activations": {"symmetric": False}}, ".input_activations.symmetric: asymmetric int8"),
    ("ct-w8a8", {"input_activations": {"dynamic": "yes"}}, ".input_activations.dynamic: expected bool"),
    ("ct-fp8-channel", {"input_activations": {"type": "int", "num_bits": 8, "strategy": "token",
                                             "dynamic": True}}, ".input_activations.type: 'int' is not"),
]  # fmt: skip


@pytest.fixture(scope="module")
def stored_dirs(tmp_path_factory):
    names = {b[0] for b in STORED_PARTS} | {b[0] for b in BAD_CONFIGS}
    dirs = {}
    for name in names:
        quant, writer = SCHEMES[name.removesuffix("-partial")]
        dirs[name] = tmp_path_factory.mktemp(name)
        sizes = PARTIAL_LLAMA if name.endswith("-partial") else {}
        write(build("llama", **sizes), dirs[name], quant, writer)
    return dirs


def _refused(directory, message: str, capsys) -> None:
    """`tcpc run` on the checkpoint is a one-line error with `message`, exit 2, nothing written."""
    out = directory / "out.npz"
    capsys.readouterr()  # what writing the checkpoint printed
    assert main(["run", str(directory), "--prompt-ids", "1,2", "--logits-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize(("scheme", "tensor", "change", "message"), STORED_PARTS)
def test_a_stored_part_of_the_wrong_dtype_or_shape_is_refused(
    stored_dirs, tmp_path, capsys, scheme, tensor, change, message
) -> None:
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "ckpt"
    shutil.copytree(stored_dirs[scheme], directory)
    tensors = load_file(directory / "model.safetensors")
    tensors[tensor] = change(tensors[tensor])
    save_file(tensors, directory / "model.safetensors")
    _refused(directory, message, capsys)


@pytest.mark.parametrize(("scheme", "change", "message"), BAD_CONFIGS)
def test_a_bad_activation_scheme_or_ignore_pattern_is_refused(
    stored_dirs, tmp_path, capsys, scheme, change, message
) -> None:
    directory = tmp_path / "ckpt"
    shutil.copytree(stored_dirs[scheme], directory)
    config = json.loads((directory / "config.json").read_text())
    quant = config["quantization_config"]
    if "input_activations" in change:
        group = quant["config_groups"]["group_0"]
        group["input_activations"] = {**group.get("input_activations", {}), **change["input_activations"]}
    else:
        quant.update(change)
    (directory / "config.json").write_text(json.dumps(config))
    _refused(directory, message, capsys)


def test_fp8_scales_without_a_quantization_config_are_refused(stored_dirs, tmp_path, capsys) -> None:
    """Read as float, the codes would be the weights and the scales silently ignored."""
    directory = tmp_path / "ckpt"
    shutil.copytree(stored_dirs["ct-fp8-channel"], directory)
    config = json.loads((directory / "config.json").read_text())
    del config["quantization_config"]
    (directory / "config.json").write_text(json.dumps(config))
    _refused(directory, "holds quantised weights' scales or codes, but", capsys)


@pytest.mark.parametrize(
    ("suffix", "change", "message"),
    [
        ("_blocks", lambda t: t[1:], "as MXFP4 (blocks of 32 inputs) implies [4, 32, 2, 16]"),
        ("_scales", lambda t: t.float(), "is F32, but"),
        ("_blocks", lambda t: t.to(torch.int32), "is I32, but"),
    ],
)
def test_mxfp4_parts_are_checked_against_the_expert_count(tmp_path, capsys, suffix, change, message) -> None:
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "gpt_oss"
    write_gpt_oss_mxfp4(build("gpt_oss", intermediate_size=64), directory)
    tensors = load_file(directory / "model.safetensors")
    name = f"model.layers.0.mlp.experts.down_proj{suffix}"
    tensors[name] = change(tensors[name])
    save_file(tensors, directory / "model.safetensors")
    _refused(directory, message, capsys)


# -- cost ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["fp8-channel", "fp8-block", "w8a16", "w8a8", "w4-zp", "mxfp4"])
def test_decode_hbm_bytes_follow_bits_per_weight(name: str) -> None:
    """A decode step reads every weight once: its HBM bytes differ from bf16's by the weights'
    bytes in the format (codes plus scales and zero points, as the config bound counts them)."""
    cfg = load_model("llama-3.2-1b").config
    hw = load_hardware("rngd")

    def decode_bytes(prec: Precision) -> float:
        return float(simulate_generation(cfg, hw, prec, 1, 64, 2).decode_hbm[0])

    bf16, fmt = PRECISIONS["bf16"], precision(name)

    def weights(prec: Precision) -> float:
        return matmul_weight_bytes(cfg, prec) + head_bytes(cfg, prec)

    expected = decode_bytes(bf16) - weights(bf16) + weights(fmt)
    got = decode_bytes(fmt)
    assert abs(got - expected) / expected < 0.005, (got, expected)
    assert got < decode_bytes(bf16)


def test_awq_version_null_reads_as_the_default_gemm(quantised_dirs, tmp_path) -> None:
    """AutoAWQ exports may write `"version": null`; transformers reads it as unset (gemm)."""
    directory = tmp_path / "ckpt"
    shutil.copytree(quantised_dirs["awq"], directory)
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"]["version"] = None
    (directory / "config.json").write_text(json.dumps(config))
    assert load_model(directory).scheme.format.name == "w4-zp:awq"
