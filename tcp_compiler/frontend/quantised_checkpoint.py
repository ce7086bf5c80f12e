"""Pre-quantised checkpoints: config.json's `quantization_config` read into a weight format, and
the stored tensors read as that format's parts, bound as stored (no dequantise-then-requantise).

Supported, each from its published definition:
- compressed-tensors (`quant_method: compressed-tensors`, formats float-quantized / naive-quantized
  / int-quantized): `X.weight` (fp8 e4m3 or int8) and `X.weight_scale` per tensor [1], per channel
  [out, 1], per block [out / bo, in / bi] or per group [out, in / g]; w = q x scale. int8 weights
  with dynamic per-token int8 input activations are w8a8, without input activations w8a16.
- fp8 with block scales as DeepSeek-V3 stores them (`quant_method: fp8`, `weight_block_size`):
  `X.weight` fp8 and `X.weight_scale_inv` [ceil(out / bo), ceil(in / bi)]; w = q x scale_inv.
- AWQ (`quant_method: awq`, version gemm): `X.qweight` [in, out / 8] int32 (8 codes per word in
  AutoAWQ's order 0 2 4 6 1 3 5 7), `X.qzeros` [in / g, out / 8] likewise, `X.scales` [in / g, out];
  w = (q - zero) x scale.
- GPTQ (`quant_method: gptq`): `X.qweight` [in / 8, out] int32 (codes along the input, low nibble
  first), `X.qzeros` [in / g, out / 8], `X.scales` [in / g, out], `X.g_idx` [in]; w = (q - (zero + 1))
  x scale for checkpoint_format gptq (v1), (q - zero) x scale for gptq_v2.
- gpt-oss MXFP4 (`quant_method: mxfp4`): the experts' `X_blocks` (fp4 e2m1 codes, two per byte,
  low nibble first) and `X_scales` (e8m0 exponents, one per 32 inputs); w = fp4(q) x 2^(e - 127).

Every part is expanded to one value per element of the [out, in] weight, so a fused or renamed
tensor (layout.py) and a tensor-parallel cut apply to scales and zeros exactly as to the weight.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ir import F16, FP8E4M3, I8
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.checkpoint import Checkpoint, CheckpointError
from tcp_compiler.frontend.weight_format import FORMATS, Parts, WeightFormat

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ packs column 8w + AWQ_ORDER[k] into nibble k of word w

Reader = Callable[[Checkpoint, str], Parts | None]  # (checkpoint, tensor name) -> parts, None if float


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's weight format and how its stored tensors become that format's parts."""

    method: str
    format: WeightFormat
    read: Reader


def read_scheme(quant: dict[str, Any], source: str) -> Scheme:
    """The scheme of a `quantization_config`, or a one-line FrontendError naming the bad field."""
    fields = _Fields(quant, source)
    method = fields.get("quant_method", str)
    readers = {
        "compressed-tensors": _compressed_tensors,
        "fp8": _deepseek_fp8,
        "awq": _awq,
        "gptq": _gptq,
        "mxfp4": _mxfp4,
    }
    if method not in readers:
        raise fields.fail("quant_method", f"{method!r} is not supported (supported: {', '.join(readers)})")
    return readers[method](fields)


class _Fields:
    """quantization_config's fields, each error naming its key path."""

    def __init__(self, data: dict[str, Any], source: str, prefix: str = "quantization_config") -> None:
        self.data, self.source, self.prefix = data, source, prefix

    def fail(self, key: str, message: str) -> FrontendError:
        return FrontendError(f"{self.source}: {self.prefix}.{key}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None, required: bool = True) -> Any:
        value = self.data.get(key, default)
        if value is None and not required:
            return None
        if value is None:
            raise self.fail(key, "missing")
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise self.fail(key, f"expected {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
        return value

    def choice(self, key: str, allowed: tuple, default: Any = None) -> Any:
        value = self.get(key, type(allowed[0]), default)
        if value not in allowed:
            raise self.fail(key, f"{value!r} is not supported (supported: {', '.join(map(repr, allowed))})")
        return value

    def positive(self, key: str, default: Any = None) -> int:
        value = self.get(key, int, default)
        if value <= 0:
            raise self.fail(key, f"expected a positive integer, got {value}")
        return value

    def block(self, key: str) -> tuple[int, int]:
        """[rows, columns] of one scale's block."""
        shape = self.get(key, list)
        if len(shape) != 2 or not all(type(n) is int and n > 0 for n in shape):
            raise self.fail(key, f"expected [rows, columns] of positive integers, got {shape!r}")
        return shape[0], shape[1]

    def nested(self, key: str) -> _Fields:
        return _Fields(self.get(key, dict), self.source, f"{self.prefix}.{key}")

    def names(self, key: str) -> tuple[str, ...]:
        value = self.get(key, list, [])
        if not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of module names, got {value!r}")
        return tuple(value)


# -- compressed-tensors ----------------------------------------------------------------------------------


def _compressed_tensors(fields: _Fields) -> Scheme:
    fields.choice("format", ("float-quantized", "naive-quantized", "int-quantized"))
    groups = fields.get("config_groups", dict)
    if len(groups) != 1:
        raise fields.fail("config_groups", f"{len(groups)} groups; tcpc reads one scheme for every Linear")
    group = fields.nested("config_groups").nested(next(iter(groups)))
    weights = group.nested("weights")
    kind = weights.choice("type", ("float", "int"))
    weights.choice("num_bits", (8,))
    if not weights.get("symmetric", bool, True):
        raise weights.fail("symmetric", "asymmetric 8-bit weights are not supported")
    strategy = weights.choice("strategy", ("tensor", "channel", "block", "group"))
    block = {"tensor": (0, 0), "channel": (1, 0)}.get(strategy)
    if strategy == "block":
        block = weights.block("block_structure")
    elif strategy == "group":
        block = (1, weights.positive("group_size"))
    assert block is not None
    act_quant = False
    if group.data.get("input_activations") is not None:
        acts = group.nested("input_activations")
        if kind == "int":
            acts.choice("type", ("int",))
            acts.choice("num_bits", (8,))
            acts.choice("strategy", ("token",))
            if not acts.get("dynamic", bool):
                raise acts.fail("dynamic", "static activation scales are not supported (dynamic per token)")
            act_quant = True
        # fp8 input activations: tcpc's fp8 formats dequantise weights at fetch and keep bf16 activations
    base = FORMATS["fp8-channel"] if kind == "float" else FORMATS["w8a8" if act_quant else "w8a16"]
    name = f"{base.name}:compressed-tensors" if kind == "int" else f"fp8-{strategy}:compressed-tensors"
    fmt = replace(base, name=name, block=block, keep=fields.names("ignore"), stored=True)
    code = FP8E4M3 if kind == "float" else I8
    return Scheme("compressed-tensors", fmt, _scaled_reader("weight_scale", block, code))


def _scaled_reader(scale_name: str, block: tuple[int, int], code) -> Reader:
    """Weights `X.weight` with scales `X.<scale_name>` over `block` (0: the whole axis)."""

    def read(ckpt: Checkpoint, tensor: str) -> Parts | None:
        module = tensor.removesuffix(".weight")
        scale_info = ckpt.find(f"{module}.{scale_name}")
        if scale_info is None or module == tensor:
            return None
        info = ckpt.info(f"{module}.weight")
        want = "F8_E4M3" if code == FP8E4M3 else "I8"
        if info.dtype != want:
            raise CheckpointError(f"{info.file}: tensor {info.name!r} is {info.dtype}; the format has {want}")
        q = ckpt.load(info.name)
        rows, cols = q.shape
        scale = ckpt.load(scale_info.name).astype(np.float32)
        return Parts(q, expand(scale, rows, cols, block, scale_info.name), None)

    return read


def expand(scale: np.ndarray, rows: int, cols: int, block: tuple[int, int], name: str) -> np.ndarray:
    """One scale per element of a [rows, cols] weight from one per `block` (0: the whole axis);
    partial blocks at the edges take their block's scale."""
    br, bc = block[0] or rows, block[1] or cols
    want = (math.ceil(rows / br), math.ceil(cols / bc))
    if scale.size != want[0] * want[1]:
        raise CheckpointError(f"{name}: {list(scale.shape)} scales; blocks of {br} x {bc} need {list(want)}")
    grid = scale.reshape(want)
    return np.repeat(np.repeat(grid, br, axis=0), bc, axis=1)[:rows, :cols]


# -- DeepSeek fp8 ----------------------------------------------------------------------------------------


def _deepseek_fp8(fields: _Fields) -> Scheme:
    fields.choice("fmt", ("e4m3",), "e4m3")
    fields.choice("activation_scheme", ("dynamic",), "dynamic")
    block = fields.block("weight_block_size")
    fmt = replace(FORMATS["fp8-block"], name="fp8-block:fp8", block=block,
                  keep=fields.names("modules_to_not_convert"), stored=True)  # fmt: skip
    return Scheme("fp8", fmt, _scaled_reader("weight_scale_inv", block, FP8E4M3))


# -- AWQ and GPTQ int4 -------------------------------------------------------------------------------------


def _int4_fields(fields: _Fields) -> int:
    fields.choice("bits", (4,))
    group = fields.get("group_size", int)
    if group != -1 and group <= 0:
        raise fields.fail("group_size", f"expected a positive integer or -1 (per channel), got {group}")
    return group


def _awq(fields: _Fields) -> Scheme:
    group = _int4_fields(fields)
    if group == -1:
        raise fields.fail("group_size", "AWQ groups must be positive")
    if not fields.get("zero_point", bool, True):
        raise fields.fail("zero_point", "symmetric AWQ is not supported (zero_point: true)")
    fields.choice("version", ("gemm",), "gemm")
    keep = ("lm_head", *fields.names("modules_to_not_convert"))  # AutoAWQ quantises decoder layers only
    fmt = replace(FORMATS["w4-zp"], name="w4-zp:awq", scale=F16, block=(1, group), keep=keep, stored=True)

    def read(ckpt: Checkpoint, tensor: str) -> Parts | None:
        module = tensor.removesuffix(".weight")
        if ckpt.find(f"{module}.qweight") is None or module == tensor:
            return None
        q = _unpack(ckpt.load(f"{module}.qweight"), AWQ_ORDER)  # [in, out]
        zeros = _unpack(ckpt.load(f"{module}.qzeros"), AWQ_ORDER)  # [in / g, out]
        scales = ckpt.load(f"{module}.scales").astype(np.float32)  # [in / g, out]
        return _grouped_parts(q, zeros, scales, np.arange(q.shape[0]) // group, module)

    return Scheme("awq", fmt, read)


def _gptq(fields: _Fields) -> Scheme:
    group = _int4_fields(fields)
    fields.get("desc_act", bool, False)
    offset = {"gptq": 1, "gptq_v2": 0}[fields.choice("checkpoint_format", ("gptq", "gptq_v2"), "gptq")]
    # GPTQ quantises the decoder layers, and the LM head only with `lm_head: true`
    head = () if fields.get("lm_head", bool, False) else ("lm_head",)
    keep = (*head, *fields.names("modules_to_not_convert"))
    block = (1, 0 if group == -1 else group)
    fmt = replace(FORMATS["w4-zp"], name="w4-zp:gptq", scale=F16, block=block, keep=keep, stored=True)

    def read(ckpt: Checkpoint, tensor: str) -> Parts | None:
        module = tensor.removesuffix(".weight")
        if ckpt.find(f"{module}.qweight") is None or module == tensor:
            return None
        q = _unpack(ckpt.load(f"{module}.qweight").T, tuple(range(8))).T  # [in, out]
        zeros = _unpack(ckpt.load(f"{module}.qzeros"), tuple(range(8))) + offset  # [groups, out]
        scales = ckpt.load(f"{module}.scales").astype(np.float32)
        g_idx = ckpt.load(f"{module}.g_idx") if ckpt.find(f"{module}.g_idx") is not None else None
        contiguous = np.arange(q.shape[0]) // (group if group > 0 else q.shape[0])
        if g_idx is not None and not np.array_equal(g_idx, contiguous):
            raise CheckpointError(
                f"{module}.g_idx: groups are permuted (desc_act); tcpc binds contiguous groups only"
            )
        if zeros.max() > 15:
            raise CheckpointError(f"{module}.qzeros: a zero point of {int(zeros.max())} does not fit 4 bits")
        return _grouped_parts(q, zeros, scales, contiguous, module)

    return Scheme("gptq", fmt, read)


def _unpack(words: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """[r, c] int32 words -> [r, 8c] 4-bit codes: nibble k of word w is column 8w + order[k]."""
    u = words.astype(np.int64) & 0xFFFFFFFF
    nibbles = np.stack([(u >> (4 * k)) & 0xF for k in range(8)], axis=-1)  # [r, c, 8] by nibble
    out = np.empty_like(nibbles)
    out[..., list(order)] = nibbles
    return out.reshape(words.shape[0], -1).astype(np.float32)


def _grouped_parts(q, zeros, scales, groups: np.ndarray, module: str) -> Parts:
    """[out, in] parts from [in, out] codes and [groups, out] zeros and scales, `groups[i]` the
    group of input i."""
    if zeros.shape != scales.shape or scales.shape[1] != q.shape[1]:
        raise CheckpointError(
            f"{module}: qzeros {list(zeros.shape)} and scales {list(scales.shape)} do not match its qweight"
        )
    return Parts(q.T.copy(), scales[groups].T.copy(), zeros[groups].T.copy())


# -- gpt-oss MXFP4 -----------------------------------------------------------------------------------------


def _mxfp4(fields: _Fields) -> Scheme:
    """gpt-oss: only the experts are MXFP4 (`X_blocks` [..., out, in / 32, 16] uint8, two fp4 e2m1
    codes per byte, low nibble first; `X_scales` [..., out, in / 32] uint8 exponents, scale
    2^(e - 127)); the parts come out [..., in, out], as the unquantised checkpoint stores X."""
    fields.names("modules_to_not_convert")  # attention, router, embedding, head: not experts
    keep = (r"re:(?!.*\.experts\.).*",)
    fmt = replace(FORMATS["mxfp4"], name="mxfp4:gpt-oss", keep=keep, stored=True)

    def read(ckpt: Checkpoint, tensor: str) -> Parts | None:
        if ckpt.find(f"{tensor}_blocks") is None:
            return None
        blocks = ckpt.load(f"{tensor}_blocks")
        exponents = ckpt.load(f"{tensor}_scales").astype(np.float32)
        if blocks.shape[:-1] != exponents.shape or blocks.shape[-1] != 16:
            raise CheckpointError(
                f"{tensor}_blocks {list(blocks.shape)} and _scales {list(exponents.shape)} are not MXFP4 "
                "blocks of 32"
            )
        codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-2], -1)
        scale = np.repeat(np.exp2(exponents - 127), 32, axis=-1)
        return Parts(*(np.swapaxes(a, -1, -2).astype(np.float32) for a in (codes, scale)), None)

    return Scheme("mxfp4", fmt, read)


# -- the checkpoint ----------------------------------------------------------------------------------------


class QuantisedCheckpoint:
    """A Checkpoint whose projection weights are stored in `scheme`'s format. `load("X.weight")`
    gives the weight dequantised (so float precisions and other formats run it);
    `load("X.weight:codes" / ":scale" / ":zero")` its stored parts, one value per element."""

    def __init__(self, checkpoint: Checkpoint, scheme: Scheme) -> None:
        self.checkpoint, self.scheme = checkpoint, scheme
        self.directory = checkpoint.directory

    def __getattr__(self, attr: str) -> Any:  # names, find, info, total_bytes, ...: the checkpoint's
        return getattr(self.checkpoint, attr)

    def __contains__(self, name: object) -> bool:
        return name in self.checkpoint

    def __len__(self) -> int:
        return len(self.checkpoint)

    def load(self, name: str) -> np.ndarray:
        tensor, _, part = name.partition(":")
        parts = self.scheme.read(self.checkpoint, tensor)
        if parts is None:
            if part:
                raise CheckpointError(
                    f"{self.directory}: {tensor!r} is not stored {self.scheme.method}-quantised (no scales); "
                    "add it to the quantization_config's ignore list"
                )
            return self.checkpoint.load(tensor)
        if not part:
            table = self.scheme.format.table
            values = np.asarray(table, np.float32)[parts.codes.astype(np.int64)] if table else parts.codes
            zero = parts.zero if parts.zero is not None else 0.0
            return ((values - zero) * parts.scale).astype(np.float32)
        value = {"codes": parts.codes, "scale": parts.scale, "zero": parts.zero}[part]
        if value is None:
            raise CheckpointError(f"{self.directory}: {tensor!r} has no {part} in {self.scheme.method}")
        return value

