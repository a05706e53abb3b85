"""Tensors on disk in the safetensors layout, written and read by our own code (no pickle).

Layout of a file:
    8 bytes      N, the header length, unsigned little-endian
    N bytes      JSON object, UTF-8, padded with spaces so the data starts 8-byte aligned:
                 {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
                  "data_offsets": [begin, end]}, ...}   (offsets relative to the data start)
    data         each tensor's bytes, little-endian, C order, back to back
Tensors are laid out largest item size first (then by name), so each starts aligned to its
item size, as the safetensors library does. Writes are atomic: a temporary file in the same
folder, fsync, then rename over the target; a failed write leaves the old file as it was.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from autograd import backend
from autograd.tensor import Tensor
from nn import bfloat16
from bpe.files.atomic import atomic_write

# safetensors dtype code <-> numpy dtype (little-endian). BF16 has no numpy dtype: it is stored as
# its uint16 bit patterns and read as float32 (exactly, nn.bfloat16); the F8 formats are
# reported as unsupported rather than misread.
_DTYPES = {
    "F16": np.dtype("<f2"), "F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"), "I16": np.dtype("<i2"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"), "U16": np.dtype("<u2"), "U32": np.dtype("<u4"), "U64": np.dtype("<u8"),
    "BOOL": np.dtype("?"),
}
_CODES = {(dt.kind, dt.itemsize): code for code, dt in _DTYPES.items()}
_STORED = {**_DTYPES, "BF16": np.dtype("<u2")}  # how each code's bytes lie in the file
_KNOWN_UNSUPPORTED = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"}
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
_MAX_DIMS = 64  # numpy's limit on an array's dimensions
_MAX_BYTES = 2 ** 63  # an array (even a zero-size one) must be indexable by a signed 64-bit size


def _host_array(name: str, value: Any) -> np.ndarray:
    """`value` (numpy, cupy or Tensor) as a C-ordered little-endian host array."""
    if isinstance(value, Tensor):
        value = value.data
    if backend.xp_of(value) is not np:
        value = value.get()  # cupy -> host copy
    if not isinstance(value, np.ndarray):
        if np.isscalar(value) and not isinstance(value, (str, bytes)):
            value = np.asarray(value)
        else:
            raise TypeError(f"save_safetensors: tensor {name!r} is a {type(value).__name__}, not an array")
    code = _CODES.get((value.dtype.kind, value.dtype.itemsize))
    if code is None:
        raise TypeError(
            f"save_safetensors: tensor {name!r} has dtype {value.dtype}, which has no safetensors code here; "
            f"supported: {', '.join(_DTYPES)}"
        )
    return np.ascontiguousarray(value, dtype=_DTYPES[code])


def save_safetensors(path: str | os.PathLike, tensors: dict[str, Any], metadata: dict[str, str] | None = None,
                     bf16: bool = False) -> None:
    """Write `tensors` (name -> numpy/cupy array or Tensor) and string `metadata` to `path`, atomically.

    bf16=True stores every floating tensor as BF16 (rounded to nearest even): half the bytes of
    float32, the dtype most published checkpoints use."""
    path = Path(path)
    if not isinstance(tensors, dict):
        raise TypeError(f"save_safetensors: tensors must be a dict name -> array, got {type(tensors).__name__}")
    for name in tensors:
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"save_safetensors: invalid tensor name {name!r} (a non-empty string, not '__metadata__')")
    metadata = {} if metadata is None else metadata
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"save_safetensors: metadata must map str -> str, got {k!r}: {type(v).__name__} "
                            "(encode structured values with json.dumps)")

    # Plan the layout first (dtype and shape only), so no array is copied to the host twice.
    entries = []
    for name, value in tensors.items():
        arr = value.data if isinstance(value, Tensor) else value
        if not (hasattr(arr, "dtype") and hasattr(arr, "shape")):
            if not isinstance(arr, (bool, int, float)):
                raise TypeError(f"save_safetensors: tensor {name!r} is a {type(arr).__name__}, not an array")
            arr = value = np.asarray(arr)
        dt = np.dtype(arr.dtype)
        code = _CODES.get((dt.kind, dt.itemsize))
        if code is None:
            raise TypeError(f"save_safetensors: tensor {name!r} has dtype {dt}, which has no safetensors code here; "
                            f"supported: {', '.join(_DTYPES)}")
        if bf16 and dt.kind == "f":
            code = "BF16"
        shape = tuple(int(s) for s in np.shape(arr))
        entries.append((-_STORED[code].itemsize, name, code, shape, value))
    entries.sort(key=lambda e: (e[0], e[1]))

    # The header lists tensors in the caller's order (so a load returns that order); the data
    # is laid out in alignment order.
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    header.update({name: None for name in tensors})
    offset = 0
    for neg_size, name, code, shape, _ in entries:
        nbytes = math.prod(shape) * -neg_size
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-(8 + len(raw)) % 8)  # data starts 8-byte aligned

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            for _, name, code, _, value in entries:
                arr = _host_array(name, value)
                if code == "BF16":
                    arr = bfloat16.from_float(arr)
                f.write(memoryview(arr.reshape(-1)).cast("B"))

    atomic_write(path, write)


def _fail(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: not a valid safetensors file: {what}")


def _reject_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_json(text: str | bytes) -> Any:
    """json.loads that refuses what it would otherwise take silently or crash on: a duplicate
    key (json keeps the last) and nesting too deep for the parser (RecursionError), both as
    ValueError; numbers too long to convert already raise ValueError."""
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicates)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def read_safetensors_header(path: str | os.PathLike) -> tuple[dict, dict, int]:
    """Parse and check the header of `path`: (entries name -> (dtype, shape, begin, end), metadata, data start).

    Every check runs before any data is read; failures raise ValueError naming the file and field.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _fail(path, f"truncated: {size} bytes, fewer than the 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > _MAX_HEADER:
            raise _fail(path, f"header length {n:,} exceeds the {_MAX_HEADER:,}-byte limit (corrupt length field?)")
        if 8 + n > size:
            raise _fail(path, f"header length {n:,} points past the end of the file ({size:,} bytes; truncated?)")
        raw = f.read(n)
    try:
        header = parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(path, f"header is not valid UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _fail(path, f"header is a JSON {type(header).__name__}, expected an object")

    metadata = header.pop("__metadata__", None)  # absent (or null, as the safetensors library reads it): none
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _fail(path, f"field '__metadata__' must be an object of string values, got {_shown(metadata)}")
    data_start, data_size = 8 + n, size - 8 - n
    entries = {name: _entry(path, name, info, data_size) for name, info in header.items()}
    spans = sorted((b, e, name) for name, (_, _, b, e) in entries.items() if e > b)
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _fail(path, f"field 'data_offsets' of tensors {n0!r} {[b0, e0]} and {n1!r} {[b1, e1]} overlap")
    return entries, dict(metadata), data_start


def _shown(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters: a hostile header may hold megabytes in one field."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _entry(path: Path, name: str, info: Any, data_size: int) -> tuple:
    """One header entry checked -> (dtype code, shape, begin, end)."""
    where = f"tensor {name!r}"
    if not isinstance(info, dict):
        raise _fail(path, f"{where}: entry is a JSON {type(info).__name__}, expected an object")
    code, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    _check_dtype(path, where, code)
    _check_shape(path, where, shape, _STORED[code].itemsize)
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise _fail(path, f"{where}: field 'data_offsets' must be two integers, got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise _fail(path, f"{where}: field 'data_offsets' {offsets} is not an increasing pair of offsets >= 0")
    if end > data_size:
        raise _fail(path, f"{where}: field 'data_offsets' {offsets} points past the end of the data "
                          f"({data_size:,} bytes; truncated?)")
    expected = math.prod(shape) * _STORED[code].itemsize
    if end - begin != expected:
        raise _fail(path, f"{where}: field 'data_offsets' spans {end - begin:,} bytes but dtype {code} and "
                          f"shape {shape} need {expected:,}")
    return code, tuple(shape), begin, end


def _check_dtype(path: Path, where: str, code: Any) -> None:
    if not isinstance(code, str):  # a list or object is no code (and no dict key)
        raise _fail(path, f"{where}: field 'dtype' must be a string, got {_shown(code)}")
    if code not in _STORED:
        if code in _KNOWN_UNSUPPORTED:
            raise ValueError(f"{path}: {where}: field 'dtype' is {code}, which numpy cannot represent; "
                             f"supported here: {', '.join(_DTYPES)}")
        raise _fail(path, f"{where}: field 'dtype' has unknown value {code!r}")


def _check_shape(path: Path, where: str, shape: Any, itemsize: int) -> None:
    """A shape numpy can allocate: zero-size tensors included, whose other dims still count."""
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise _fail(path, f"{where}: field 'shape' must be a list of non-negative integers, got {shape!r}")
    if len(shape) > _MAX_DIMS:
        raise _fail(path, f"{where}: field 'shape' has {len(shape)} dimensions, more than numpy's {_MAX_DIMS}")
    if math.prod(s for s in shape if s) * itemsize >= _MAX_BYTES:
        raise _fail(path, f"{where}: field 'shape' {shape} is too large for an array "
                          f"(its non-zero dimensions span 2**63 bytes or more)")


def load_safetensors(path: str | os.PathLike, device: str = "cpu") -> tuple[dict[str, Any], dict[str, str]]:
    """Read `path` -> (name -> array on `device` (numpy for "cpu", cupy for "cuda[:N]"), metadata).

    Arrays come back in the header's order (the order they were given to save_safetensors), each
    a fresh writable array.
    """
    path = Path(path)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "is not a regular file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"load_safetensors: {str(path)!r} {why}")
    backend.parse_device(device)
    entries, metadata, data_start = read_safetensors_header(path)
    out: dict[str, Any] = {}
    with open(path, "rb") as f:
        for name, (code, shape, begin, end) in sorted(entries.items(), key=lambda kv: kv[1][2]):
            arr = np.empty(shape, _STORED[code])
            f.seek(data_start + begin)
            got = f.readinto(memoryview(arr.reshape(-1)).cast("B")) if arr.size else 0
            if got != end - begin:
                raise _fail(path, f"tensor {name!r}: file ended after {got} of {end - begin} bytes (truncated?)")
            arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)  # native order for compute
            if code == "BF16":
                arr = bfloat16.to_float32(arr)
            out[name] = arr if device == "cpu" else backend.to_device(arr, device)
    ordered = {name: out[name] for name in entries}
    return ordered, metadata


def flatten_optimizer_state(state: dict, prefix: str = "optimizer") -> tuple[dict[str, Any], str]:
    """An optimizer's `state_dict()` as (tensors, json_text) for a safetensors file.

    Arrays become tensors named `{prefix}.state.{index}.{name}`; numbers and the parameter
    groups go into the JSON text (store it as a metadata string). `unflatten_optimizer_state`
    inverts it exactly.
    """
    tensors: dict[str, Any] = {}
    scalars: dict[str, dict] = {}
    for index, entry in state["state"].items():
        for key, value in entry.items():
            if hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
                tensors[f"{prefix}.state.{index}.{key}"] = value
            else:
                scalars.setdefault(str(index), {})[key] = value.item() if hasattr(value, "item") else value
    text = json.dumps({"param_groups": state["param_groups"], "scalars": scalars})
    return tensors, text


def unflatten_optimizer_state(tensors: dict[str, Any], text: str, prefix: str = "optimizer") -> dict:
    """The optimizer state_dict saved by `flatten_optimizer_state` (tensors without the prefix are ignored)."""
    try:
        info = json.loads(text)
        groups, scalars = info["param_groups"], info["scalars"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unflatten_optimizer_state: the optimizer metadata is not what flatten wrote ({exc})") from None
    state: dict[int, dict] = {int(i): dict(v) for i, v in scalars.items()}
    head = f"{prefix}.state."
    for name, value in tensors.items():
        if name.startswith(head):
            index, _, key = name[len(head):].partition(".")
            state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": groups}
