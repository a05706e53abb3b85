"""Backends: which array module (numpy or cupy) holds an array, and moving arrays between devices.

The backend of a tensor is always read from its array, never from global state, so the same
op code runs on NumPy and on CuPy. CuPy is imported lazily: a machine without it never pays
for the import and gets a clear error only when it asks for "cuda".
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np


@functools.lru_cache(maxsize=None)
def _cupy() -> ModuleType | None:
    try:
        import cupy  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA install that fails at import
        return None
    return cupy


def cupy_module() -> ModuleType:
    """The cupy module, or a clear error saying why the GPU backend is unavailable."""
    cp = _cupy()
    if cp is None:
        raise RuntimeError(
            "device 'cuda' needs CuPy and an NVIDIA GPU: install the extra with "
            "`pip install -e \".[gpu]\"` (cupy-cuda12x) on a machine with a GPU"
        )
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise RuntimeError(f"device 'cuda' requested but CuPy finds no usable GPU: {exc}") from exc
    if n == 0:
        raise RuntimeError("device 'cuda' requested but CuPy finds no GPU on this machine")
    return cp


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU."""
    try:
        cupy_module()
    except RuntimeError:
        return False
    return True


def xp_of(array: Any) -> ModuleType:
    """The array module (numpy or cupy) that owns `array`."""
    if isinstance(array, np.ndarray) or np.isscalar(array):
        return np
    cp = _cupy()
    if cp is not None and isinstance(array, cp.ndarray):
        return cp
    return np


def acc_dtype(dtype) -> np.dtype:
    """The dtype sums and statistics over arrays of `dtype` accumulate in: float64 for float64,
    float32 otherwise (float16 and bfloat16 would overflow at 65504 or lose the small terms).
    The fused ops on the CPU and the CUDA kernels use the same rule."""
    return _F64 if dtype == _F64 else _F32   # no np.dtype(): every small op's sum asks this


_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)
# The dtypes of the host's BLAS and fused CPU paths. A set of dtypes: membership is one hash,
# where `in (np.float32, np.float64)` converts each type to a dtype to compare (a decode
# step asks this a few dozen times).
HOST_FLOATS = frozenset((_F32, _F64))


def parse_device(device: str | None) -> tuple[str, int]:
    """'cpu' -> ('cpu', 0); 'cuda' -> ('cuda', 0); 'cuda:1' -> ('cuda', 1)."""
    if device is None or device == "cpu":
        return "cpu", 0
    if not isinstance(device, str):
        raise TypeError(f"device must be a string like 'cpu', 'cuda' or 'cuda:0', got {device!r}")
    kind, _, index = device.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    return "cuda", int(index or 0)


def device_of(array: Any) -> str:
    """'cpu' for numpy arrays, 'cuda:N' for cupy arrays."""
    if xp_of(array) is np:
        return "cpu"
    return f"cuda:{array.device.id}"


def to_device(array: Any, device: str | None) -> Any:
    """Return `array` on `device`, copying only when it is not already there."""
    kind, index = parse_device(device)
    if kind == "cpu":
        return array if xp_of(array) is np else array.get()
    cp = cupy_module()
    if xp_of(array) is cp and array.device.id == index:
        return array
    with cp.cuda.Device(index):
        return cp.asarray(array)


def to_device_of(array: Any, like: Any) -> Any:
    """Return `array` on the device `like` is on, copying only when it is not there. Two host
    arrays answer at once: a decode step asks this per layer and per step."""
    if type(array) is np.ndarray and type(like) is np.ndarray:
        return array
    return to_device(array, device_of(like))


def module_for_device(device: str | None) -> ModuleType:
    """numpy for 'cpu', cupy for 'cuda[:N]' (raising clearly when it is missing)."""
    kind, _ = parse_device(device)
    return np if kind == "cpu" else cupy_module()
