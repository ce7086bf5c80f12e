"""Pre-quantised tiny checkpoints, written as each format's tools write them, and the numpy
reference that dequantises them, both from the formats' published definitions (not from tcpc):

- compressed-tensors (llm-compressor): `weight` fp8 e4m3 / int8 and `weight_scale` per tensor [1],
  per channel [out, 1] or per block [out / bo, in / bi]; w = q x scale; int8 weights with dynamic
  per-token int8 activations are w8a8 (x_q = round(x / (max|x| / 127)), y = (x_q . q) x s_x x s_w).
- DeepSeek-V3 fp8: `weight` fp8 and `weight_scale_inv` [ceil(out / bo), ceil(in / bi)]; w = q x
  scale_inv, a block cut short by the weight's edge scaled by the max |w| of the part it holds.
- AutoAWQ gemm: `qweight` [in, out / 8] int32, nibble k of word j holding column 8j + (0 2 4 6 1 3
  5 7)[k]; `qzeros` the same over [in / g, out]; `scales` [in / g, out] fp16; w = (q - z) x s.
- GPTQ (v1): `qweight` [in / 8, out], nibble k of row word j holding input row 8j + k; `qzeros`
  [in / g, out / 8] holding z - 1; `scales` fp16; `g_idx` [in]; w = (q - z) x s.
- MXFP4 (OCP MX 1.0): blocks of 32 fp4 e2m1 values sharing the scale 2^(floor(log2 max|x|) - 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import torch
from safetensors.torch import save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
FP8_MAX = 448.0


def _blocks(w: np.ndarray, bo: int, bi: int) -> np.ndarray:
    """[ceil(out / bo), ceil(in / bi)] max |w| per block (0: the whole axis; a partial edge block
    the max of the elements it holds)."""
    bo, bi = bo or w.shape[0], bi or w.shape[1]
    rows, cols = -(-w.shape[0] // bo), -(-w.shape[1] // bi)
    padded = np.pad(np.abs(w), ((0, rows * bo - w.shape[0]), (0, cols * bi - w.shape[1])))
    return padded.reshape(rows, bo, cols, bi).max(axis=(1, 3))


def _spread(s: np.ndarray, shape: tuple[int, int], block: tuple[int, int]) -> np.ndarray:
    """One scale per element of a [out, in] weight from one per block (cut at the edges)."""
    bo, bi = block[0] or shape[0], block[1] or shape[1]
    return np.repeat(np.repeat(s, bo, 0), bi, 1)[: shape[0], : shape[1]]


def fp8(w: np.ndarray, block: tuple[int, int], scale_name: str) -> tuple[dict, np.ndarray]:
    scale = (_blocks(w, *block) / FP8_MAX).astype(np.float32)
    q = (w / _spread(scale, w.shape, block)).astype(ml_dtypes.float8_e4m3fn)
    deq = q.astype(np.float32) * _spread(scale, w.shape, block)
    stored = scale.reshape(1) if block == (0, 0) else scale
    tensors = {"weight": torch.from_numpy(q.view(np.uint8).copy()).view(torch.float8_e4m3fn),
               scale_name: torch.from_numpy(stored.copy())}  # fmt: skip
    return tensors, deq


def int8(w: np.ndarray) -> tuple[dict, np.ndarray]:
    scale = (np.abs(w).max(axis=1, keepdims=True) / 127.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -128, 127).astype(np.int8)
    return {"weight": torch.from_numpy(q), "weight_scale": torch.from_numpy(scale)}, q * scale


def asymmetric(
    w: np.ndarray, group: int, zero_low: int = 0, scale_dtype: type = np.float16
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[in, out] codes, [in / g, out] zeros and scales of w [out, in], min/max per group (zero 0
    in range), scales rounded to `scale_dtype`."""
    x = w.T.reshape(w.shape[1] // group, group, w.shape[0])
    high, low = np.maximum(x.max(axis=1), 0), np.minimum(x.min(axis=1), 0)
    scale = ((high - low) / 15.0).astype(scale_dtype).astype(np.float32)
    zero = np.clip(np.rint(-low / scale), zero_low, 15)
    q = np.clip(np.rint(x / scale[:, None]) + zero[:, None], 0, 15).reshape(w.shape[1], w.shape[0])
    return q.astype(np.int64), zero.astype(np.int64), scale


def _pack_columns(codes: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """[r, 8c] -> [r, c] int32: nibble k of word j is column 8j + order[k]."""
    words = np.zeros((codes.shape[0], codes.shape[1] // 8), np.uint32)
    for k, column in enumerate(order):
        words |= (codes[:, column::8].astype(np.uint32) & 0xF) << np.uint32(4 * k)
    return words.view(np.int32)


def awq(w: np.ndarray, group: int) -> tuple[dict, np.ndarray]:
    q, zero, scale = asymmetric(w, group)
    deq = ((q - np.repeat(zero, group, 0)) * np.repeat(scale, group, 0)).T
    tensors = {
        "qweight": torch.from_numpy(_pack_columns(q, AWQ_ORDER)),
        "qzeros": torch.from_numpy(_pack_columns(zero, AWQ_ORDER)),
        "scales": torch.from_numpy(scale.astype(np.float16)),
    }
    return tensors, deq.astype(np.float32)


def gptq(w: np.ndarray, group: int) -> tuple[dict, np.ndarray]:
    q, zero, scale = asymmetric(w, group, 1)
    deq = ((q - np.repeat(zero, group, 0)) * np.repeat(scale, group, 0)).T
    tensors = {
        "qweight": torch.from_numpy(_pack_columns(q.T, tuple(range(8))).T.copy()),
        "qzeros": torch.from_numpy(_pack_columns(zero - 1, tuple(range(8)))),
        "scales": torch.from_numpy(scale.astype(np.float16)),
        "g_idx": torch.from_numpy((np.arange(w.shape[1]) // group).astype(np.int32)),
    }
    return tensors, deq.astype(np.float32)


def mxfp4(w: np.ndarray) -> np.ndarray:
    """The MX 1.0 quantise-dequantise of w [out, in] in blocks of 32 inputs (no stored form: tcpc
    quantises float weights itself under --dtype mxfp4)."""
    x = w.reshape(w.shape[0], -1, 32)
    top = np.abs(x).max(axis=2, keepdims=True)
    scale = 2.0 ** (np.floor(np.log2(np.maximum(top, 2.0**-127))) - 2)
    values = np.clip(x / scale, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float32)
    return (values * scale).reshape(w.shape).astype(np.float32)


Writer = Callable[[np.ndarray], tuple[dict, np.ndarray]]  # float [out, in] -> (tensors, dequantised)


def _ct(weights: dict, kind: str = "float", inputs: dict | None = None) -> dict:
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": kind, "symmetric": True,
                                                "dynamic": False, **weights}}  # fmt: skip
    if inputs is not None:
        group["input_activations"] = inputs
    fmt = "float-quantized" if kind == "float" else "int-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": group},
            "ignore": ["lm_head"]}  # fmt: skip


def define_schemes(block: int, group: int) -> dict[str, tuple[dict, Writer]]:
    """name -> (quantization_config, writer of one Linear's tensors) of every stored scheme, with
    blocks of `block` x `block` and int4 groups of `group`."""
    token = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": True, "strategy": "token"}
    return {
        "ct-fp8-tensor": (_ct({"strategy": "tensor"}), lambda w: fp8(w, (0, 0), "weight_scale")),
        "ct-fp8-channel": (_ct({"strategy": "channel"}), lambda w: fp8(w, (1, 0), "weight_scale")),
        "ct-fp8-block": (
            _ct({"strategy": "block", "block_structure": [block, block]}),
            lambda w: fp8(w, (block, block), "weight_scale"),
        ),
        "deepseek-fp8": (
            {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [block, block], "modules_to_not_convert": ["lm_head"]},
            lambda w: fp8(w, (block, block), "weight_scale_inv"),
        ),  # fmt: skip
        "ct-w8a16": (_ct({"strategy": "channel"}, "int"), int8),
        "ct-w8a8": (_ct({"strategy": "channel"}, "int", token), int8),
        "awq": (
            {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm",
             "modules_to_not_convert": ["lm_head"]},
            lambda w: awq(w, group),
        ),  # fmt: skip
        "gptq": (
            {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": False,
             "checkpoint_format": "gptq"},
            lambda w: gptq(w, group),
        ),  # fmt: skip
    }


def write(model, directory: Path, quant: dict, writer: Writer) -> dict[str, np.ndarray]:
    """Saves `model` with every decoder Linear stored by `writer` and `quant` as its
    quantization_config; returns the dequantised weights by parameter name."""
    model.save_pretrained(directory)
    tensors: dict[str, torch.Tensor] = {}
    dequantised: dict[str, np.ndarray] = {}
    for name, p in model.state_dict().items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rsplit(".", 1)[-1] in LINEARS:
            stored, deq = writer(p.detach().numpy().astype(np.float32))
            tensors.update({f"{module}.{k}": v.contiguous() for k, v in stored.items()})
            dequantised[name] = deq
        else:
            tensors[name] = p.detach().contiguous()
    _replace_checkpoint(directory, tensors, quant)
    return dequantised


def _replace_checkpoint(directory: Path, tensors: dict[str, torch.Tensor], quant: dict) -> None:
    """The saved model's weights become `tensors`, and its config.json names their format."""
    for f in directory.glob("*.safetensors"):
        f.unlink()
    save_file(tensors, str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = quant
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load_dequantised(model, weights: dict[str, np.ndarray]) -> None:
    """Puts the dequantised weights into the float model (transformers' dequantize=True path)."""
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, w in weights.items():
            params[name].copy_(torch.from_numpy(w))


def mxfp4_experts(w: np.ndarray) -> tuple[dict, np.ndarray]:
    """gpt-oss's stacked expert weight w [E, in, out] as its `_blocks` [E, out, in / 32, 16] (two
    e2m1 codes per byte, low nibble first) and `_scales` [E, out, in / 32] (exponent + 127);
    returns the tensors (by suffix) and the dequantised [E, in, out]."""
    t = np.swapaxes(w, 1, 2)
    x = t.reshape(*t.shape[:-1], -1, 32)
    exponent = np.clip(np.floor(np.log2(np.maximum(np.abs(x).max(axis=-1), 2.0**-127))) - 2, -127, 127)
    scale = 2.0 ** exponent[..., None]
    values = np.clip(x / scale, -6, 6).astype(ml_dtypes.float4_e2m1fn)
    codes = values.view(np.uint8)
    tensors = {
        "_blocks": torch.from_numpy((codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)),
        "_scales": torch.from_numpy((exponent + 127).astype(np.uint8)),
    }
    deq = (values.astype(np.float32) * scale).reshape(t.shape)
    return tensors, np.swapaxes(deq, 1, 2).astype(np.float32).copy()


MXFP4_CONFIG = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
}  # fmt: skip


def write_gpt_oss_mxfp4(model, directory: Path) -> dict[str, np.ndarray]:
    """Saves a gpt-oss model with its experts' gate_up_proj and down_proj in MXFP4, as OpenAI
    ships gpt-oss; returns the dequantised expert weights by parameter name."""
    model.save_pretrained(directory)
    tensors: dict[str, torch.Tensor] = {}
    dequantised: dict[str, np.ndarray] = {}
    for name, p in model.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            stored, dequantised[name] = mxfp4_experts(p.detach().numpy().astype(np.float32))
            tensors.update({f"{name}{k}": v.contiguous() for k, v in stored.items()})
        else:
            tensors[name] = p.detach().contiguous()
    _replace_checkpoint(directory, tensors, MXFP4_CONFIG)
    return dequantised
