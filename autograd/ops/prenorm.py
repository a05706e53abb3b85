"""The pre-norm and the skip of a fused sublayer (ops/mlp.py, ops/swiglu.py, ops/self_attention.py):
out = x + f(norm(x)) in one op, so that a pre-norm block is two graph nodes instead of six.

Shapes: x rows x2 (N, C); the norm is a LayerNorm (centered: mean removed, gain and shift) or
an RMSNorm (gain) over C, with the row kernels of autograd/ops/norm.py:
    n = norm(x) = xhat * w + b                  xhat (N, C), rstd (N, 1) saved, x not
Backward, with dn = dL/dn from the sublayer and g = dL/dout:
    dx = norm_backward(dn) + g,   dw = sum over rows of dn * xhat,   db = sum over rows of dn
In the forward each of the sublayer's blocks of rows normalises its own rows first, on the
thread that runs it (RowNorm.block), so the norm takes no hand-off of its own and its rows are
in cache for the first product; every pass of the norm op is row by row, so each row gets the
norm op's numbers whichever block holds it. In backward the norm runs over all rows after the
weight-gradient products were deferred, which the workers take meanwhile (they release the
GIL). The same numbers as the norm op, the sublayer and an add composed: the norm's forward
and backward are the norm op's own, the sublayer's equal up to rounding (tests/autograd/
test_prenorm.py).

On the host n is not kept from the forward to the backward, nor made whole in the forward: each
block's rows of n are an array of the block's size, and the backward's weight gradient of the
first product rebuilds n from xhat, which the norm's backward keeps anyway, by the forward's
own passes (the same bits). That is an (N, C) array fewer per sublayer, for two passes over it
in the backward (kept where it is smaller than autograd.parallel.MIN_PARALLEL values). Inside
an autograd.row_chain a sublayer's output may be its input's memory (output_rows).

On an array that takes the fused kernels (a CuPy array; autograd.cuda.use), the sublayers run
their GPU form: the same formulas with cuBLAS products (the array's matmul) and the kernels of
autograd/cuda (DeviceNorm here, GELU, attention) instead of the CPU's blocks on the pool.

A fused sublayer names its parameters (`named_inputs`): the op's inputs are x, then the present
ones of "norm_w", "norm_b" and its own (w1, b1, ...) in order, and its backward returns their
gradients in the same order.
"""
from __future__ import annotations

import types

import numpy as np

from autograd import parallel, row_chain
from autograd.backend import xp_of
from autograd.ops.matmul import weight_grads
from autograd.ops.norm import affine, backward_rows, norm_rows


def named_inputs(norm, **params) -> tuple:
    """(names, tensors) of a fused sublayer's parameters that are present: with `norm` =
    (centered, weight, bias, eps) (weight and bias Tensors or None) "norm_w" and "norm_b"
    first, then `params` in their order; None values are left out."""
    if norm is not None:
        if not norm[0] and norm[2] is not None:
            raise ValueError("a fused sublayer's norm: an RMSNorm has no shift (bias), got one")
        params = {"norm_w": norm[1], "norm_b": norm[2], **params}
    present = [(n, t) for n, t in params.items() if t is not None]
    return tuple(n for n, _ in present), tuple(t for _, t in present)


def options(norm, residual: bool, names: tuple) -> dict:
    """The op options that go with named_inputs(norm, ...)'s names."""
    centered = None if norm is None else bool(norm[0])
    return dict(names=names, centered=centered, eps=0.0 if norm is None else float(norm[3]),
                residual=bool(residual))


class RowNorm:
    """The norm in front of a fused sublayer over the rows x2 (N, C) (NumPy float32 or float64),
    computed block by block of rows as the sublayer's blocks ask for them (`block`), each row by
    the norm op's own formula for x2 (norm.norm_rows): the same numbers. The block's rows are
    the sublayer's input; xhat (N, C) and rstd (N, 1) are what its backward needs; x2 is not
    kept. `out` (N, C) holds the whole output only where it is kept for the backward (below the
    pool's size, or xhat itself without w and b); else each block's rows are a block-sized array
    of its own, and `rows` rebuilds the whole in the backward."""

    def __init__(self, x2, names: tuple, params: tuple, centered: bool, eps: float):
        p = dict(zip(names, params))
        self.w, self.b, self.centered, self.eps = p.get("norm_w"), p.get("norm_b"), centered, eps
        self.x2, self.rows_fn = x2, norm_rows(centered, x2)
        self.xhat, self.rstd = np.empty_like(x2), np.empty((x2.shape[0], 1), dtype=x2.dtype)
        if self.w is None and self.b is None:
            self.out = self.xhat                                 # the output is xhat itself
        else:   # rebuilding rows below the pool's size costs more in calls than they hold
            self.out = np.empty_like(x2) if x2.size < parallel.MIN_PARALLEL else None

    def block(self, lo: int, hi: int):
        """Rows lo..hi of the norm's output, computed now (once per row, before `forget_input`)."""
        if self.out is self.xhat:
            y = None
        else:
            y = self.out[lo:hi] if self.out is not None else np.empty_like(self.x2[lo:hi])
        self.rows_fn(self.x2[lo:hi], self.xhat[lo:hi], self.rstd[lo:hi], y, self.w, self.b, self.eps)
        return self.xhat[lo:hi] if y is None else y

    def forget_input(self) -> None:
        """Forget x2 once the sublayer's forward has run."""
        self.x2 = None

    def rows(self):
        """The whole output: `out`, or rebuilt as the forward's blocks made it: xhat * w, then + b."""
        if self.out is None:
            self.out = affine(self.xhat, self.w, self.b)
        return self.out

    def backward(self, dn, need_dx: bool, need_w: bool, need_b: bool) -> tuple:
        """(dL/dx (N, C), dw (C,), db (C,)) from dn = dL/dout, None where not needed."""
        dx = np.empty_like(dn) if need_dx else None
        sums = backward_rows(dn, self.xhat, self.rstd, self.w, self.centered, dx)   # (2C,): dw, then db
        C = sums.shape[0] // 2
        dw, db = sums[:C], sums[C:]   # slices: np.split costs a step of small norms more than its work
        return dx, (dw if need_w else None), (db if need_b else None)


class DeviceNorm:
    """RowNorm's GPU form (rows x2 (N, C) of an array taking the fused kernels, float16/32/64):
    the norm op's own kernels (autograd/cuda/norm.py), which save what they need on `saved`."""

    def __init__(self, x2, names: tuple, params: tuple, centered: bool, eps: float):
        from autograd.cuda import norm as kernels

        p = dict(zip(names, params))
        w, b = p.get("norm_w"), p.get("norm_b")
        self.saved, self.centered, self.has = types.SimpleNamespace(), centered, (w is not None, b is not None)
        self.out = kernels.norm_forward(self.saved, x2, *(a for a in (w, b) if a is not None), eps=eps,
                                        has_w=w is not None, has_b=b is not None, centered=centered)

    def block(self, lo: int, hi: int):
        """Rows lo..hi of `out` (computed whole on construction)."""
        return self.out[lo:hi]

    def rows(self):
        return self.out

    def backward(self, dn, need_dx: bool, need_w: bool, need_b: bool) -> tuple:
        """(dL/dx (N, C), dw (C,), db (C,)) from dn = dL/dout, None where not needed."""
        from autograd.cuda import norm as kernels

        has_w, has_b = self.has
        self.saved.needs_input_grad = (need_dx,) + (need_w,) * has_w + (need_b,) * has_b
        grads = list(kernels.norm_backward(self.saved, dn, centered=self.centered))
        dx = grads.pop(0)
        dw = grads.pop(0) if has_w else None
        db = grads.pop(0) if has_b else None
        return dx, dw, db


def row_norm(x2, names: tuple, params: tuple, centered, eps: float, device: bool):
    """The norm in front of a fused sublayer (None when `centered` is None): DeviceNorm for the
    GPU form (device), else RowNorm."""
    if centered is None:
        return None
    return (DeviceNorm if device else RowNorm)(x2, names, params, centered, eps)


def first_rows(x2, norm, lo: int, hi: int):
    """Rows lo..hi of a fused sublayer's first product's input, in its forward: x2's, or the
    norm's output, computed now for those rows (RowNorm.block)."""
    return x2[lo:hi] if norm is None else norm.block(lo, hi)


def forward_blocks(block, x2, norm, out, n: int, row_elements: int, step: int, unit: int = 1):
    """Run a fused sublayer's forward `block`s, which fill `out`, on the host, then let the norm
    forget its input: for_chunks(block, n, row_elements, step) now, or inside an open
    autograd.row_chain when it ends (each of the n units is `unit` rows). -> what the sublayer
    keeps of its first product's input rows (kept_rows)."""
    row_chain.for_blocks(block, n, row_elements, step, unit, then=None if norm is None else norm.forget_input,
                         output=out)
    return kept_rows(x2, norm)


def output_rows(x2, norm, residual: bool, cols: int):
    """The (N, cols) array a fused sublayer's forward writes into, on the host: x2 itself where x2
    is the whole output of an op the open autograd.row_chain records (row_chain.take_output),
    with a norm in front (the backward keeps xhat, not x2) and a skip of x2's width; each block
    reads its rows of x2 before it writes them. Else a new array (of x2's backend)."""
    if residual and norm is not None and cols == x2.shape[1] and row_chain.take_output(x2):
        return x2
    return xp_of(x2).empty((x2.shape[0], cols), dtype=x2.dtype)


def last_product(a, w, b, out, skip=None, over_skip: bool = False):
    """out = a @ w + b + skip for one block's rows (b, skip optional), where over_skip: out is
    skip's own memory (output_rows gave x2), so the product goes to a scratch array first; the
    same operations in the same order either way."""
    xp = xp_of(a)
    p = xp.matmul(a, w) if over_skip else xp.matmul(a, w, out=out)
    if b is not None:
        p += b
    if skip is not None:
        xp.add(p, skip, out=out)


def kept_rows(x2, norm):
    """What a fused sublayer keeps of its first product's input rows once its forward has run:
    x2 (its input's rows) without a norm, else None (see the module docstring); `input_rows`
    gives them back in the backward."""
    return x2 if norm is None else None


def input_rows(node):
    """The first product's input rows of a fused sublayer `node` (attributes rows_in, norm), for
    its weight gradient: x's rows, or the norm's output, rebuilt on the host."""
    return node.rows_in if node.norm is None else node.norm.rows()


def on_device(x, *params) -> bool:
    """Whether a fused sublayer takes its GPU form: x an array the fused kernels take
    (autograd.cuda.use: CuPy) of float16, float32 or float64, the parameters of its type and dtype."""
    from autograd import cuda

    return (cuda.use(x) and np.dtype(x.dtype) in _DEVICE_FLOATS
            and all(type(p) is type(x) and p.dtype == x.dtype for p in params))


_DEVICE_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def input_grad(node, dn, g2) -> tuple:
    """(dL/dx (N, C) or None where not needed, {"norm_w": dw, "norm_b": db} of the present ones)
    of a fused sublayer `node` (attributes norm, names, residual), from dn = dL/d(its first
    product's input rows) (N, C; None when needs_dn(node) is false) and g2 = dL/dout (N, C):
    through the norm's backward when there is one, plus g2 with the skip. The caller defers its
    weight gradients before, so that the workers take them while this runs."""
    norm, names, needs = node.norm, node.names, node.needs_input_grad
    if norm is None:
        dx, grads = dn, {}
    else:
        want = {n: needs[1 + names.index(n)] if n in names else False for n in ("norm_w", "norm_b")}
        dx, dw, db = (None,) * 3 if dn is None else norm.backward(dn, needs[0], want["norm_w"], want["norm_b"])
        grads = {n: d for n, d in (("norm_w", dw), ("norm_b", db)) if n in names}
    if needs[0] and node.residual:
        dx += g2
    return (dx if needs[0] else None), grads


def sublayer_grads(node, products, dn, g2, x_shape) -> tuple:
    """The return of a fused sublayer's backward: (dL/dx in `x_shape`, then the gradient of each
    of node.names). products: ((weight name, bias name, input rows, output gradient rows), ...),
    the sublayer's linear maps, whose weight gradients are deferred first so that the workers
    take them while the norm's backward (input_grad) runs."""
    names, grads = node.names, {}
    for w, b, rows, g_rows in products:
        grads.update(zip((w, b), weight_grads(node, 1 + names.index(w), rows, g_rows, b in names)))
    dx, norm_grads = input_grad(node, dn, g2)
    grads.update(norm_grads)
    return (None if dx is None else dx.reshape(x_shape), *[grads[n] for n in names])


def needs_dn(node) -> bool:
    """Whether `node`'s backward needs dL/d(its first product's input): for dx, or for the
    gradient of its norm's weight or bias."""
    names = node.names
    return node.needs_input_grad[0] or (node.norm is not None and any(
        node.needs_input_grad[1 + names.index(n)] for n in ("norm_w", "norm_b") if n in names))
