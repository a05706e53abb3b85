"""Random number generators: one global generator per backend and device, seeded together.

`manual_seed(seed)` reseeds them all. On the CPU the generator is NumPy's `Generator` on
PCG64; on a GPU it is CuPy's generator, created lazily (CuPy is imported only when a GPU
generator is first asked for). Any function taking `generator=` also accepts a generator
of the other backend: the numbers are drawn there and moved, so a NumPy generator gives the
same numbers whatever the device.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend

_DEFAULT_SEED = 0
_seed: int | None = None
_generators: dict[tuple[str, int], Any] = {}


def manual_seed(seed: int) -> None:
    """Reseed the global generator of every backend and device."""
    global _seed
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative int, got {seed!r}")
    _seed = int(seed)
    _generators.clear()


def initial_seed() -> int:
    """The seed the global generators were (or will be) created from."""
    return _DEFAULT_SEED if _seed is None else _seed


def make_generator(seed: int, device: str | None = "cpu"):
    """A fresh generator for `device`: numpy.random.Generator(PCG64) or CuPy's generator."""
    kind, index = backend.parse_device(device)
    if kind == "cpu":
        return np.random.Generator(np.random.PCG64(seed))
    cp = backend.cupy_module()
    with cp.cuda.Device(index):
        if hasattr(cp.random, "default_rng"):
            return cp.random.default_rng(seed)
        return cp.random.RandomState(seed)


def default_generator(device: str | None = "cpu"):
    """The global generator of `device` (created from the current seed on first use)."""
    key = backend.parse_device(device)
    gen = _generators.get(key)
    if gen is None:
        seed = initial_seed()
        # Each GPU gets its own stream, offset from the CPU's so the two are not copies.
        gen = make_generator(seed if key[0] == "cpu" else seed + 1000003 * (key[1] + 1), device)
        _generators[key] = gen
    return gen


def _draw(gen, method: str, shape: tuple, dtype, device: str):
    """Samples from `gen` (NumPy Generator or RandomState, CuPy Generator or RandomState) as
    an array of `dtype` on `device`. Generators draw float32 or float64 natively; other float
    dtypes are drawn in float32 and cast."""
    dtype = np.dtype(dtype)
    work = dtype if dtype in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float32)
    if isinstance(gen, np.random.RandomState):  # NumPy's legacy API has no dtype argument
        out = gen.standard_normal(size=shape) if method == "normal" else gen.random_sample(size=shape)
    elif method == "normal":
        out = gen.standard_normal(size=shape, dtype=work)
    elif hasattr(gen, "random"):
        out = gen.random(size=shape, dtype=work)
    else:  # CuPy's RandomState
        out = gen.random_sample(size=shape, dtype=work)
    if out.dtype != dtype:
        out = out.astype(dtype)
    return backend.to_device(out, device)


def normal(shape: tuple, dtype=np.float32, device: str | None = "cpu", generator=None):
    """Standard normal samples as a backend array of `shape` and `dtype` on `device`."""
    gen = generator if generator is not None else default_generator(device)
    return _draw(gen, "normal", tuple(shape), dtype, device or "cpu")


def uniform(shape: tuple, dtype=np.float32, device: str | None = "cpu", generator=None):
    """Uniform samples in [0, 1) as a backend array of `shape` and `dtype` on `device`."""
    gen = generator if generator is not None else default_generator(device)
    return _draw(gen, "uniform", tuple(shape), dtype, device or "cpu")
