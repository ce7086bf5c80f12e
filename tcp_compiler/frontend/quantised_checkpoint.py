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

Before any weight is read, `check_stored_parts` compares every stored part's header (dtype and
shape) with what the config's shape for that weight and the format imply, so a wrong group count,
a transposed block-scale grid or an expert count that disagrees is a one-line error naming the
tensor, never scrambled weights or a numpy traceback at run time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ir import F16, FP8E4M3, I8
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.checkpoint import Checkpoint, CheckpointError, TensorInfo
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.weight_format import FORMATS, Parts, WeightFormat
from tcp_compiler.frontend.weight_shapes import canonical_shapes

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ packs column 8w + AWQ_ORDER[k] into nibble k of word w

Shape = tuple[int, ...]
Reader = Callable[[Checkpoint, str], Parts | None]  # (checkpoint, tensor name) -> parts, None if float
# (checkpoint, tensor name, the float shape the config implies for it, what to call that shape):
# raises CheckpointError for the first stored part whose dtype or shape the format does not allow
Checker = Callable[[Checkpoint, str, Shape, str], None]
FLOAT_SCALES = ("F32", "BF16", "F16")  # scales as the quantising tools save them
PACKED = ("I32",)  # eight 4-bit codes per int32 word (AWQ, GPTQ)


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's weight format, how its stored tensors become that format's parts, and what
    dtypes and shapes those tensors must have."""

    method: str
    format: WeightFormat
    read: Reader
    check: Checker


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
        value = self.data.get(key)
        value = default if value is None else value  # null is absent, as transformers reads it
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
        """Module names or `re:` regular expressions (compressed-tensors' ignore list)."""
        value = self.get(key, list, [])
        if not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"expected a list of module names, got {value!r}")
        for i, pattern in enumerate(value):
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except (re.error, RecursionError, OverflowError) as e:
                    message = f"{pattern!r} is not a valid regular expression: {e}"
                    raise self.fail(f"{key}[{i}]", message) from None
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
    act_quant = _input_activations(group, kind)
    base = FORMATS["fp8-channel"] if kind == "float" else FORMATS["w8a8" if act_quant else "w8a16"]
    name = f"{base.name}:compressed-tensors" if kind == "int" else f"fp8-{strategy}:compressed-tensors"
    # a block strategy's edge blocks may be partial (ceil-sized grids), as DeepSeek's fp8 blocks
    fmt = replace(base, name=name, block=block, keep=fields.names("ignore"), stored=True,
                  edges=strategy == "block")  # fmt: skip
    code = FP8E4M3 if kind == "float" else I8
    return Scheme("compressed-tensors", fmt, *_scaled("weight_scale", block, code, fmt.name))


def _input_activations(group: _Fields, kind: str) -> bool:
    """Whether int8 weights come with int8 activations quantised per token (w8a8). fp8 weights
    keep bf16 activations (tcpc's fp8 formats dequantise weights at fetch), so their activation
    scheme is only checked to be one compressed-tensors defines."""
    if group.data.get("input_activations") is None:
        return False
    acts = group.nested("input_activations")
    acts.choice("type", (kind,))
    acts.choice("num_bits", (8,))
    if kind == "float":
        acts.get("dynamic", bool, False)
        acts.choice("strategy", ("tensor", "token", "channel", "group", "block", "tensor_group", "attn_head"))
        return False
    acts.choice("strategy", ("token",))
    if not acts.get("dynamic", bool):
        raise acts.fail("dynamic", "static activation scales are not supported (dynamic per token)")
    if not acts.get("symmetric", bool, True):
        raise acts.fail("symmetric", "asymmetric int8 activations are not supported")
    return True


def _scaled(scale_name: str, block: tuple[int, int], code, label: str) -> tuple[Reader, Checker]:
    """Weights `X.weight` with scales `X.<scale_name>` over `block` (0: the whole axis)."""
    want_code = "F8_E4M3" if code == FP8E4M3 else "I8"

    def read(ckpt: Checkpoint, tensor: str) -> Parts | None:
        module = tensor.removesuffix(".weight")
        scale_info = ckpt.find(f"{module}.{scale_name}")
        if scale_info is None or module == tensor:
            return None
        q = ckpt.load(f"{module}.weight")
        rows, cols = q.shape
        scale = ckpt.load(scale_info.name).astype(np.float32)
        return Parts(q, expand(scale, rows, cols, block), None)

    def check(ckpt: Checkpoint, tensor: str, shape: Shape, what: str) -> None:
        module = tensor.removesuffix(".weight")
        if ckpt.find(f"{module}.{scale_name}") is None or module == tensor or len(shape) != 2:
            return
        rows, cols = shape
        what = f"{what} as {label} with scale blocks of {_block_text(block)}"
        _expect(ckpt, f"{module}.weight", (want_code,), shape, what)
        _expect(ckpt, f"{module}.{scale_name}", FLOAT_SCALES, _grid(rows, cols, block), what, grid=True)

    return read, check


def _grid(rows: int, cols: int, block: tuple[int, int]) -> Shape:
    """[row blocks, column blocks] of a [rows, cols] weight (0: the whole axis; partial edge blocks count)."""
    br, bc = block[0] or rows, block[1] or cols
    return math.ceil(rows / br), math.ceil(cols / bc)


def _block_text(block: tuple[int, int]) -> str:
    return " x ".join(str(n) if n else "all" for n in block)


def _same_grid(shape: Shape, grid: Shape) -> bool:
    """Whether scales stored in `shape` are the `grid` in its order: the same axes once axes of one
    are dropped (per tensor [1] or [], per channel [out] or [out, 1]). A transposed grid of two
    axes longer than one is not, so it is refused rather than read with its scales scrambled."""
    return [n for n in shape if n != 1] == [n for n in grid if n != 1]


def expand(scale: np.ndarray, rows: int, cols: int, block: tuple[int, int]) -> np.ndarray:
    """One scale per element of a [rows, cols] weight from one per `block` (0: the whole axis;
    the scales' shape checked by _same_grid); partial blocks at the edges take their block's scale."""
    br, bc = block[0] or rows, block[1] or cols
    grid = scale.reshape(_grid(rows, cols, block))
    return np.repeat(np.repeat(grid, br, axis=0), bc, axis=1)[:rows, :cols]


def _expect(
    ckpt: Checkpoint, name: str, dtypes: tuple[str, ...], shape: Shape, what: str, grid: bool = False
) -> TensorInfo:
    """The header of stored part `name`, or a CheckpointError naming it and what `what` implies:
    `shape` exactly, or with `grid` a scale grid in any shape that holds it in order."""
    info = ckpt.find(name)
    if info is None:
        raise CheckpointError(f"{ckpt.directory}: no tensor {name!r}; {what} stores it")
    if info.dtype not in dtypes:
        raise CheckpointError(
            f"{info.file}: tensor {info.name!r} is {info.dtype}, but {what} stores {' or '.join(dtypes)}"
        )
    if not (_same_grid(info.shape, shape) if grid else info.shape == shape):
        raise CheckpointError(
            f"{info.file}: tensor {info.name!r} has shape {list(info.shape)}, but {what} implies "
            f"{list(shape)}"
        )
    return info


# -- DeepSeek fp8 ----------------------------------------------------------------------------------------


def _deepseek_fp8(fields: _Fields) -> Scheme:
    fields.choice("fmt", ("e4m3",), "e4m3")
    fields.choice("activation_scheme", ("dynamic",), "dynamic")
    block = fields.block("weight_block_size")
    fmt = replace(FORMATS["fp8-block"], name="fp8-block:fp8", block=block,
                  keep=fields.names("modules_to_not_convert"), stored=True)  # fmt: skip
    return Scheme("fp8", fmt, *_scaled("weight_scale_inv", block, FP8E4M3, fmt.name))


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
        return _grouped_parts(q, zeros, scales, np.arange(q.shape[0]) // group)

    def check(ckpt: Checkpoint, tensor: str, shape: Shape, what: str) -> None:
        module = _int4_module(ckpt, tensor, shape)
        if module is None:
            return
        out, inputs = shape
        what = f"{what} as AWQ with groups of {group}"
        _packable(ckpt, module, out, "output", what)
        if inputs % group:
            info = ckpt.info(f"{module}.qweight")
            raise CheckpointError(
                f"{info.file}: tensor {info.name!r}: {what}: {inputs} inputs do not divide into groups"
            )
        _expect(ckpt, f"{module}.qweight", PACKED, (inputs, out // 8), what)
        _expect(ckpt, f"{module}.qzeros", PACKED, (inputs // group, out // 8), what)
        _expect(ckpt, f"{module}.scales", FLOAT_SCALES, (inputs // group, out), what)

    return Scheme("awq", fmt, read, check)


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
        return _grouped_parts(q, zeros, scales, contiguous)

    def check(ckpt: Checkpoint, tensor: str, shape: Shape, what: str) -> None:
        module = _int4_module(ckpt, tensor, shape)
        if module is None:
            return
        out, inputs = shape
        what = f"{what} as GPTQ with {f'groups of {group}' if group > 0 else 'one group per channel'}"
        _packable(ckpt, module, out, "output", what)
        _packable(ckpt, module, inputs, "input", what)
        groups = math.ceil(inputs / group) if group > 0 else 1
        _expect(ckpt, f"{module}.qweight", PACKED, (inputs // 8, out), what)
        _expect(ckpt, f"{module}.qzeros", PACKED, (groups, out // 8), what)
        _expect(ckpt, f"{module}.scales", FLOAT_SCALES, (groups, out), what)
        if ckpt.find(f"{module}.g_idx") is not None:
            _expect(ckpt, f"{module}.g_idx", ("I32", "I64"), (inputs,), what)

    return Scheme("gptq", fmt, read, check)


def _int4_module(ckpt: Checkpoint, tensor: str, shape: Shape) -> str | None:
    """The module whose `qweight` stores weight `tensor`, None if it is stored in float."""
    module = tensor.removesuffix(".weight")
    if module == tensor or len(shape) != 2 or ckpt.find(f"{module}.qweight") is None:
        return None
    return module


def _packable(ckpt: Checkpoint, module: str, n: int, axis: str, what: str) -> None:
    """Eight 4-bit codes per int32 word: the packed axis must hold whole words."""
    if n % 8:
        info = ckpt.info(f"{module}.qweight")
        raise CheckpointError(
            f"{info.file}: tensor {info.name!r}: {what}: {n} {axis}s do not pack into int32 words of 8 codes"
        )


def _unpack(words: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """[r, c] int32 words -> [r, 8c] 4-bit codes: nibble k of word w is column 8w + order[k]."""
    u = words.astype(np.int64) & 0xFFFFFFFF
    nibbles = np.stack([(u >> (4 * k)) & 0xF for k in range(8)], axis=-1)  # [r, c, 8] by nibble
    out = np.empty_like(nibbles)
    out[..., list(order)] = nibbles
    return out.reshape(words.shape[0], -1).astype(np.float32)


def _grouped_parts(q, zeros, scales, groups: np.ndarray) -> Parts:
    """[out, in] parts from [in, out] codes and [groups, out] zeros and scales (shapes checked by
    the scheme's check), `groups[i]` the group of input i."""
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
        codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-2], -1)
        scale = np.repeat(np.exp2(exponents - 127), 32, axis=-1)
        return Parts(*(np.swapaxes(a, -1, -2).astype(np.float32) for a in (codes, scale)), None)

    def check(ckpt: Checkpoint, tensor: str, shape: Shape, what: str) -> None:
        """`shape` is the stacked experts' [E, in, out], as the float checkpoint stores them."""
        if ckpt.find(f"{tensor}_blocks") is None or len(shape) != 3:
            return
        experts, inputs, out = shape
        what = f"{what} as MXFP4 (blocks of 32 inputs)"
        if inputs % 32:
            raise CheckpointError(f"{ckpt.directory}: {tensor}: {what}: {inputs} inputs are not whole blocks")
        _expect(ckpt, f"{tensor}_blocks", ("U8",), (experts, out, inputs // 32, 16), what)
        _expect(ckpt, f"{tensor}_scales", ("U8",), (experts, out, inputs // 32), what)

    return Scheme("mxfp4", fmt, read, check)


def check_stored_parts(cfg: ModelConfig, checkpoint: Checkpoint, scheme: Scheme, config_path: Path) -> None:
    """Raises CheckpointError for the first stored part (codes, scales, zero points) whose dtype or
    shape is not the one the config's shape for its weight and `scheme` imply; headers only."""
    seen = set()
    for name, shape, _ in canonical_shapes(cfg):
        source = cfg.tensors.source(name)
        want = source.stored(shape)
        for stored in source.tensors:
            if stored not in seen:
                seen.add(stored)
                scheme.check(checkpoint, stored, want, f"{config_path}'s {list(want)} for {stored}")


# Suffixes of the tensors that hold a quantised weight's scales or packed codes, in the formats above.
PART_SUFFIXES = (".weight_scale", ".weight_scale_inv", ".qweight", ".qzeros", "_blocks")


def refuse_unlabelled_parts(checkpoint: Checkpoint, config_path: Path) -> None:
    """A checkpoint that stores quantised parts but whose config has no quantization_config would
    be read as if its codes were the weights, its scales ignored: refuse it, naming a part."""
    for name in checkpoint.names():
        if name.endswith(PART_SUFFIXES):
            info = checkpoint.info(name)
            raise CheckpointError(
                f"{info.file}: tensor {name!r} holds quantised weights' scales or codes, but {config_path} "
                "has no quantization_config saying how to read them; add the one it was saved with"
            )


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

