"""Reads Hugging Face safetensors checkpoints: shapes from the headers alone, tensors lazily by name.

Costing a model needs only shapes, so opening a checkpoint does a bounded read of the JSON header at the
front of each shard and never touches the data. Running needs real weights, so `load` maps one tensor at
a time and converts it, keeping memory bounded by the largest tensor rather than the whole checkpoint.
Only numpy, ml_dtypes and the standard library are used, so costing a model does not need torch.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name
to {dtype, shape, data_offsets} (plus an optional "__metadata__"), then the data; offsets are relative to
the start of the data.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from simulator.files import read_input
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend import json_input

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100_000_000  # the limit of the reference implementation; larger is not a header
MAX_INDEX_BYTES = 64 << 20  # an index lists each tensor once: a few MB for the largest MoE models
MAX_DIM = 1 << 40  # one axis of a tensor; a larger one is a corrupt header
METADATA_KEY = "__metadata__"


class CheckpointError(TcpcError):
    """A checkpoint that cannot be read; the one-line message names the file and what is wrong."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and what it is, known from a header without reading its data."""

    name: str
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    file: Path
    offset: int  # absolute byte offset of the data in `file`, header included
    nbytes: int


@dataclass(frozen=True)
class _Dtype:
    """How one safetensors dtype is stored and what `load` returns for it."""

    storage: np.dtype  # the stored element, little-endian as the format requires
    result: np.dtype
    bits_as: Any = None  # ml_dtypes type the stored bits mean (numpy has no bf16 / fp8)


_F32 = np.dtype(np.float32)
DTYPES: dict[str, _Dtype] = {
    "F64": _Dtype(np.dtype("<f8"), _F32),
    "F32": _Dtype(np.dtype("<f4"), _F32),
    "F16": _Dtype(np.dtype("<f2"), _F32),
    "BF16": _Dtype(np.dtype("<u2"), _F32, ml_dtypes.bfloat16),
    "F8_E4M3": _Dtype(np.dtype("u1"), _F32, ml_dtypes.float8_e4m3fn),
    "F8_E5M2": _Dtype(np.dtype("u1"), _F32, ml_dtypes.float8_e5m2),
    "I64": _Dtype(np.dtype("<i8"), np.dtype(np.int64)),
    "I32": _Dtype(np.dtype("<i4"), np.dtype(np.int32)),
    "I16": _Dtype(np.dtype("<i2"), np.dtype(np.int16)),
    "I8": _Dtype(np.dtype("i1"), np.dtype(np.int8)),
    "U8": _Dtype(np.dtype("u1"), np.dtype(np.uint8)),
    "BOOL": _Dtype(np.dtype("u1"), np.dtype(np.bool_)),
}


class Checkpoint:
    """The tensors of one checkpoint directory, known by header; data is read only by `load`."""

    def __init__(self, directory: Path, tensors: dict[str, TensorInfo]) -> None:
        self.directory = directory
        self._tensors = tensors

    @classmethod
    def open(cls, directory: str | Path) -> Checkpoint:
        """model.safetensors, else model.safetensors.index.json, else every *.safetensors file."""
        directory = Path(directory)
        if not directory.is_dir():
            raise CheckpointError(f"{directory}: not a checkpoint directory")
        if (directory / SINGLE_FILE).is_file():
            return cls(directory, read_header(directory / SINGLE_FILE))
        if (directory / INDEX_FILE).is_file():
            return cls(directory, _read_index(directory / INDEX_FILE))
        return cls(directory, _read_all(directory))

    def names(self) -> list[str]:
        return list(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.directory)!r}, {len(self)} tensors, {self.total_bytes} bytes)"

    def info(self, name: str) -> TensorInfo:
        """The tensor `name`, or, when the checkpoint was saved from the bare base model (GPT-2's
        hub files: `h.0.attn.c_attn.weight`), `name` without its base-model prefix
        (`transformer.`, `model.`, ...), or from a multimodal class whose text model is its
        `language_model` (Gemma 3: `model.language_model.layers...` in transformers 5,
        `language_model.model.layers...` before)."""
        found = self.find(name)
        if found is None:
            raise CheckpointError(self._no_such_tensor(name))
        return found

    def find(self, name: str) -> TensorInfo | None:
        """`info(name)`, or None when there is no such tensor (cheap: no suggestions)."""
        for candidate in _spellings(name):
            if candidate in self._tensors:
                return self._tensors[candidate]
        return None

    def load(self, name: str) -> np.ndarray:
        """The tensor's values: floats as float32 (exact from bf16 / f16 / fp8; F64 is rounded), ints and
        bool as their numpy types. Only this tensor's bytes are mapped, and only while converting."""
        return read_tensor(self.info(name))

    @property
    def total_bytes(self) -> int:
        """Bytes of tensor data the headers declare, as stored (not as float32)."""
        return sum(info.nbytes for info in self._tensors.values())

    def _no_such_tensor(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._tensors), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        return f"{self.directory}: no tensor named {name!r} among {len(self)}{hint}"


# -- headers ----------------------------------------------------------------------------------------------


def read_header(file: Path) -> dict[str, TensorInfo]:
    """The tensors one safetensors file declares, from its first 8 + N bytes only."""
    raw, data_start = _header_bytes(file)
    header = _parse_json(file, raw)
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: header is JSON but not an object")
    if not isinstance(header.get(METADATA_KEY, {}), dict):
        raise CheckpointError(f"{file}: {METADATA_KEY} is not an object")
    infos = {
        name: _tensor_info(file, name, entry, data_start)
        for name, entry in header.items()
        if name != METADATA_KEY
    }
    _check_no_overlap(file, infos.values())
    return infos


def _header_bytes(file: Path) -> tuple[bytes, int]:
    """The JSON header's bytes and where the data starts; a bounded, unbuffered read."""
    try:
        size = file.stat().st_size
        if size < 8:
            raise CheckpointError(f"{file}: {size} bytes is too short for a safetensors file")
        with open(file, "rb", buffering=0) as f:
            length = int.from_bytes(_read_exact(f, 8), "little")
            _check_header_length(file, length, size)
            raw = _read_exact(f, length)
    except OSError as e:
        raise CheckpointError(f"{file}: cannot read: {e.strerror or e}") from e
    if len(raw) != length:
        raise CheckpointError(f"{file}: truncated while reading its {length}-byte header")
    return raw, 8 + length


def _check_header_length(file: Path, length: int, size: int) -> None:
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(f"{file}: header length {length} is absurd; not a safetensors file?")
    if 8 + length > size:
        raise CheckpointError(
            f"{file}: header length {length} runs past the end of the {size}-byte file; "
            "not a safetensors file?"
        )
    if length < 2:
        raise CheckpointError(f"{file}: header length {length} is too small for a JSON object")


def _read_exact(f: Any, n: int) -> bytes:
    """Exactly n bytes: a raw read may return fewer than asked."""
    chunks, got = [], 0
    while got < n:
        chunk = f.read(n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _parse_json(file: Path, raw: bytes) -> Any:
    try:
        return json_input.loads(raw, object_pairs_hook=_no_duplicate_keys)
    except ValueError as e:  # bad UTF-8 or JSON, too deep, or a duplicate key
        raise CheckpointError(f"{file}: header is not valid JSON: {e}") from None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A name given twice would silently shadow a tensor, so refuse it."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice")
        result[key] = value
    return result


def _tensor_info(file: Path, name: str, entry: Any, data_start: int) -> TensorInfo:
    """One header entry, checked: a known dtype, a shape, and offsets that span exactly its bytes."""
    where = f"{file}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise CheckpointError(f"{where}: unknown dtype {dtype!r} (known: {' '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise CheckpointError(f"{where}: shape {shape!r} is not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} are not [begin, end]")
    begin, end = offsets
    nbytes = DTYPES[dtype].storage.itemsize * math.prod(shape)
    if end - begin != nbytes:
        raise CheckpointError(
            f"{where}: data_offsets [{begin}, {end}] out of range: {dtype} {shape} needs {nbytes} bytes"
        )
    return TensorInfo(name, dtype, tuple(shape), file, data_start + begin, nbytes)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_DIM


def _check_no_overlap(file: Path, infos: Any) -> None:
    """Two tensors sharing bytes is a corrupt header, not an alias the format allows."""
    spans = sorted((i.offset, i.offset + i.nbytes, i.name) for i in infos if i.nbytes)
    for (_, prev_end, prev), (begin, _, name) in pairwise(spans):
        if begin < prev_end:
            raise CheckpointError(f"{file}: tensors {prev!r} and {name!r} overlap in the data section")


# -- directories ------------------------------------------------------------------------------------------


def _read_index(index: Path) -> dict[str, TensorInfo]:
    """Tensors by the index's weight_map, each checked against its shard's header."""
    weight_map = _weight_map(index)
    shards = list(dict.fromkeys(weight_map.values()))
    missing = [shard for shard in shards if not (index.parent / shard).is_file()]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        listed = ", ".join(map(repr, missing[:3])) + more
        raise CheckpointError(f"{index}: shard {listed} named in weight_map is missing from {index.parent}")
    headers = {shard: read_header(index.parent / shard) for shard in shards}
    tensors = {}
    for name, shard in weight_map.items():
        if name not in headers[shard]:
            raise CheckpointError(f"{index}: weight_map puts {name!r} in {shard!r}, which has no such tensor")
        tensors[name] = headers[shard][name]
    return tensors


def _weight_map(index: Path) -> dict[str, str]:
    try:
        raw = read_input(index, MAX_INDEX_BYTES, "checkpoint index files")
    except OSError as e:
        raise CheckpointError(f"{index}: cannot read: {e.strerror or e}") from e
    content = _parse_json(index, raw)
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: no weight_map object mapping tensor names to shard files")
    return weight_map


def _read_all(directory: Path) -> dict[str, TensorInfo]:
    """Every *.safetensors file in the directory, for checkpoints with neither single file nor index."""
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    if not files:
        raise CheckpointError(f"{directory}: no {SINGLE_FILE}, {INDEX_FILE} or *.safetensors file")
    tensors: dict[str, TensorInfo] = {}
    for file in files:
        for name, info in read_header(file).items():
            if name in tensors:
                raise CheckpointError(f"{file}: tensor {name!r} is also in {tensors[name].file.name}")
            tensors[name] = info
    return tensors


# -- data -------------------------------------------------------------------------------------------------


def read_tensor(info: TensorInfo) -> np.ndarray:
    """One tensor's values, mapped only while they are converted, so nothing else is read or kept."""
    spec = DTYPES[info.dtype]
    _check_data_present(info)
    count = math.prod(info.shape)
    try:
        raw = (
            np.asarray(np.memmap(info.file, spec.storage, mode="r", offset=info.offset, shape=(count,)))
            if count
            else np.empty(0, spec.storage)
        )
        return _convert(raw, spec).reshape(info.shape)
    except OSError as e:
        raise CheckpointError(f"{info.file}: cannot read tensor {info.name!r}: {e.strerror or e}") from e


def _check_data_present(info: TensorInfo) -> None:
    """Headers alone are enough to open a file, so a short file is only an error once data is wanted."""
    try:
        size = info.file.stat().st_size
    except OSError as e:
        raise CheckpointError(f"{info.file}: cannot read: {e.strerror or e}") from e
    end = info.offset + info.nbytes
    if end > size:
        raise CheckpointError(
            f"{info.file}: truncated: tensor {info.name!r} needs bytes [{info.offset}, {end}) but the file "
            f"has {size} (or its data_offsets are out of range)"
        )


def _convert(raw: np.ndarray, spec: _Dtype) -> np.ndarray:
    """A fresh native-order array of the result dtype; always a copy, so no mapping outlives `load`."""
    if spec.result == np.bool_:
        return raw != 0
    if spec.bits_as is not None:
        raw = raw.astype(raw.dtype.newbyteorder("="), copy=False).view(spec.bits_as)
    return raw.astype(spec.result)


def _spellings(name: str) -> tuple[str, ...]:
    """The names a text model's tensor `name` may be saved under (see Checkpoint.info)."""
    head, dot, bare = name.partition(".")
    if not dot:
        return (name,)
    return (name, bare, f"{head}.language_model.{bare}", f"language_model.{name}")
