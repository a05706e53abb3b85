"""Vector-Jacobian products and full Jacobians of tensor functions, by reverse mode.

    vjp(fn, x, v)        -> (fn(x), v^T J)           one forward, one backward
    jacobian(fn, x)      -> J of shape out.shape + x.shape

`jacobian` runs `fn` forward once and then one backward per output element over the same
graph (retain_graph=True), so the forward is never repeated. With `vectorize=True` it instead
runs `fn` on a batch of copies of `x` (shape (k,) + x.shape) and gets k rows of J from one
backward; that is only valid for a batch-polymorphic `fn` (each batch entry computed
independently), which is spot-checked against the row-by-row result.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from autograd import backend
from autograd.grad_mode import enable_grad
from autograd.tensor import Tensor


def _leaf(x: Any) -> Tensor:
    """A fresh leaf that requires grad, holding x's array (not a copy: nothing writes to it)."""
    data = x.data if isinstance(x, Tensor) else Tensor(x).data
    if data.dtype.kind != "f":
        raise TypeError(f"expected a floating-point input, got dtype {data.dtype}")
    return Tensor._make(data, None).requires_grad_(True)


def _call(fn: Callable, x: Tensor, what: str) -> Tensor:
    with enable_grad():
        out = fn(x)
    if not isinstance(out, Tensor):
        raise TypeError(f"{what}: fn must return a Tensor, got {type(out).__name__}")
    return out


def vjp(fn: Callable[[Tensor], Tensor], x: Any, v: Any) -> tuple[Tensor, Any]:
    """(fn(x) detached, v^T J) where J = d fn(x) / dx.

    `v` has fn(x)'s shape; the product is a backend array of x's shape and dtype (zeros when
    the output does not depend on x).
    """
    xt = _leaf(x)
    out = _call(fn, xt, "vjp")
    xp = xt.xp
    v_arr = v.data if isinstance(v, Tensor) else v
    v_arr = xp.asarray(backend.to_device(np.asarray(v_arr), xt.device) if backend.xp_of(v_arr) is not xp
                       else v_arr, dtype=out.dtype)
    if v_arr.shape != out.shape:
        raise ValueError(f"vjp: v of shape {v_arr.shape} does not match fn(x) of shape {out.shape}")
    if out.requires_grad:
        out.backward(v_arr)
    grad = xt.grad if xt.grad is not None else xp.zeros_like(xt.data)
    return out.detach(), grad


def _one_hot(shape: tuple, index: int, dtype, xp):
    seed = xp.zeros(shape, dtype=dtype)
    seed.reshape(-1)[index] = 1
    return seed


def _rows_one_by_one(out: Tensor, xt: Tensor, rows: range, J) -> None:
    """Fill J[i] (flattened) for i in rows by one backward each over out's retained graph."""
    xp = xt.xp
    last = rows[-1] if len(rows) else -1
    for i in rows:
        xt.grad = None
        out.backward(_one_hot(out.shape, i, out.dtype, xp), retain_graph=i != last)
        if xt.grad is not None:
            J[i] = xt.grad.reshape(-1)


def jacobian(fn: Callable[[Tensor], Tensor], x: Any, vectorize: bool = False,
             chunk_size: int = 256) -> Any:
    """The Jacobian of `fn` at `x`: a backend array of shape fn(x).shape + x.shape, x's dtype.

    Reverse mode: one backward per output element over a single forward. `vectorize=True`
    computes `chunk_size` rows per backward by calling `fn` on a (k,) + x.shape batch of copies;
    use it only when `fn` treats a leading batch axis independently (checked on two rows).
    """
    xt = _leaf(x)
    out = _call(fn, xt, "jacobian")
    xp = xt.xp
    n_out, n_in = out.size, xt.size
    J = xp.zeros((n_out, n_in), dtype=xt.dtype)
    if out.requires_grad and n_out:
        if not vectorize:
            _rows_one_by_one(out, xt, range(n_out), J)
        else:
            _rows_batched(fn, out, xt, J, max(1, int(chunk_size)))
    return J.reshape(tuple(out.shape) + tuple(xt.shape))


def _rows_batched(fn: Callable, out: Tensor, xt: Tensor, J, chunk: int) -> None:
    xp = xt.xp
    n_out = out.size
    for start in range(0, n_out, chunk):
        k = min(chunk, n_out - start)
        xb = Tensor._make(xp.broadcast_to(xt.data, (k,) + xt.shape).copy(), None).requires_grad_(True)
        outb = _call(fn, xb, "jacobian")
        if tuple(outb.shape) != (k,) + tuple(out.shape):
            raise ValueError(
                f"jacobian(vectorize=True): fn maps a batch of shape {(k,) + tuple(xt.shape)} to "
                f"{tuple(outb.shape)}, expected {(k,) + tuple(out.shape)}; fn is not batch-polymorphic, "
                "use vectorize=False"
            )
        if not outb.requires_grad:
            return
        seed = xp.zeros((k, n_out), dtype=out.dtype)
        seed[xp.arange(k), xp.arange(start, start + k)] = 1
        outb.backward(seed.reshape(outb.shape))
        if xb.grad is not None:
            J[start:start + k] = xb.grad.reshape(k, -1)
    # Spot-check the batching assumption on the first and last rows against plain reverse mode.
    rows = sorted({0, n_out - 1})
    check = xp.zeros((len(rows), J.shape[1]), dtype=J.dtype)
    for r, i in enumerate(rows):
        xt.grad = None
        out.backward(_one_hot(out.shape, i, out.dtype, xp), retain_graph=r < len(rows) - 1)
        if xt.grad is not None:
            check[r] = xt.grad.reshape(-1)
    tol = 1e-4 if J.dtype == np.float32 else 1e-8
    if not bool(xp.allclose(J[rows], check, rtol=tol, atol=tol)):
        raise ValueError(
            "jacobian(vectorize=True): rows from the batched pass differ from plain reverse mode; "
            "fn mixes entries of the batch axis, use vectorize=False"
        )
