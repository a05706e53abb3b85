"""Shared helpers for the op tests: random float64 inputs from hypothesis seeds, and one
function that checks an op's forward against a NumPy formula and its backward by gradcheck."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from autograd import Tensor, gradcheck

# Small shapes: gradcheck costs two forward passes per input element.
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
shapes_nd = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
seeds = st.integers(0, 2**32 - 1)


def randn(shape, seed: int, offset: int = 0) -> np.ndarray:
    """Continuous random values (no ties, no exact zeros) for a hypothesis-drawn seed."""
    return np.random.default_rng([seed, offset]).standard_normal(shape)


def check_op(fn: Callable, ref: Callable | None, arrays: Sequence[np.ndarray],
             atol: float = 1e-5, rtol: float = 1e-3, grad: Sequence[bool] | None = None) -> None:
    """fn(*Tensors) equals ref(*arrays) in float64, and gradcheck passes for each input."""
    grad = [True] * len(arrays) if grad is None else grad
    tensors = [Tensor(np.asarray(a, dtype=np.float64), requires_grad=g) for a, g in zip(arrays, grad)]
    out = fn(*tensors)
    if ref is not None:
        expected = ref(*[np.asarray(a, dtype=np.float64) for a in arrays])
        assert out.shape == np.shape(expected), (out.shape, np.shape(expected))
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    if any(grad):
        gradcheck(fn, tensors, atol=atol, rtol=rtol)


def keeps_float32(fn: Callable, *arrays: np.ndarray) -> None:
    """The op on float32 inputs gives float32 outputs and float32 gradients."""
    tensors = [Tensor(np.asarray(a, dtype=np.float32), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    assert out.dtype == np.float32, out.dtype
    out.sum().backward()
    for t in tensors:
        assert t.grad is not None and t.grad.dtype == np.float32


def assert_same_bits_on_one_thread_and_two(fn: Callable, arrays: Sequence[np.ndarray], seed: np.ndarray) -> None:
    """fn(*Tensors)'s output and input gradients (backward seeded with `seed`) are bitwise
    equal with the pool on one thread and on two (shrink MIN_PARALLEL first so work splits)."""
    from autograd import parallel

    before = parallel.threads()

    def run(threads):
        parallel.set_threads(threads)
        ts = [Tensor(a.copy(), requires_grad=True) for a in arrays]
        out = fn(*ts)
        out.backward(seed)
        return [out.data] + [t.grad for t in ts]

    try:
        one, two = run(1), run(2)
    finally:
        parallel.set_threads(before)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
