"""layer_norm and rms_norm over the last axis: fused forward, analytic backward.

With xhat the normalised input and rstd = 1 / sqrt(var + eps) per row (C = last axis):
    layer_norm  xhat = (x - mean) * rstd            y = xhat * w + b
                dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),   gh = g * w
    rms_norm    xhat = x * rstd, rstd = 1/sqrt(mean(x^2) + eps)     y = xhat * w
                dx = rstd * (gh - xhat * mean(gh * xhat))
    dw = sum over rows of g * xhat,  db = sum over rows of g.
The forward saves xhat (input dtype) and rstd (one number per row) and nothing else. The
statistics and the weight and bias gradients are computed in float32 for float16 inputs
(backend.acc_dtype, as the CUDA kernels do): x^2 overflows float16 from |x| = 256 on.
"""
from __future__ import annotations

import numpy as np

from autograd import parallel
from autograd.cuda import kernel_op
from autograd.cuda import norm as kernels
from autograd.backend import HOST_FLOATS, acc_dtype, xp_of
from autograd.function import Function
from autograd.ops._util import host_floats
from autograd.sums import column_sums, row_sums

# The default epsilons: PyTorch's LayerNorm and LLaMA's RMSNorm (nn's layers and GPTConfig use them)
LAYER_NORM_EPS = 1e-5
RMS_NORM_EPS = 1e-6


def _on_pool(x) -> bool:
    """Whether a norm of x runs as row blocks on autograd.parallel's threads: a large
    C-contiguous float32/float64 NumPy array (on one thread the same blocks run in turn)."""
    # the size first: it rejects a decode step's few rows before the dtype test and the flags
    # object, which cost a step of many small norms more than the test is worth
    return (type(x) is np.ndarray and x.size >= parallel.MIN_PARALLEL and x.ndim > 1
            and x.dtype in HOST_FLOATS and x.flags.c_contiguous)


def _host_rows(xhat, g) -> bool:
    """Whether a norm's backward runs as row blocks on the host (_Norm._backward_rows): NumPy
    float32/float64 arrays of one dtype, C-contiguous."""
    return (host_floats(xhat, g) and g.shape == xhat.shape and xhat.ndim > 0
            and xhat.flags.c_contiguous and g.flags.c_contiguous)


def _row_sum(a, C: int):
    """Sum of `a` (..., C) over every axis but the last -> (C,), in a's dtype (accumulated in
    float32 for float16)."""
    return a.reshape(-1, C).sum(axis=0, dtype=acc_dtype(a.dtype)).astype(a.dtype, copy=False)


def affine(xhat, w, b, out=None):
    """xhat * w + b with w, b optional, into `out` when given; else a new array, or xhat itself
    when both are absent. The norms' outputs, and a fused sublayer's rebuild of one (prenorm.py):
    one order of the two passes, so the same bits."""
    if out is None and w is None and b is None:
        return xhat
    if w is not None:
        out = xp_of(xhat).multiply(xhat, w, out=out)
    elif out is None:
        out = xhat.copy()
    else:
        out[...] = xhat
    if b is not None:
        out += b
    return out


class _Norm(Function):
    """Shared backward of layer_norm and rms_norm; `centered` says whether the mean was removed."""

    centered = True

    def _save(self, xhat, rstd, w, has_w, has_b):
        self.xhat, self.rstd, self.w = xhat, rstd, w
        self.has_w, self.has_b = has_w, has_b

    def backward(self, g):
        if _host_rows(self.xhat, g):
            return self._backward_rows(g)
        xp = xp_of(g)
        xhat, rstd, w = self.xhat, self.rstd, self.w
        C = xhat.shape[-1]
        needs = self.needs_input_grad
        i_w = 1 if self.has_w else None
        i_b = 1 + self.has_w if self.has_b else None
        grads = [None] * len(needs)
        gxhat_xhat = g * xhat                                    # (..., C)
        if i_w is not None and needs[i_w]:
            grads[i_w] = _row_sum(gxhat_xhat, C)
        if i_b is not None and needs[i_b]:
            grads[i_b] = _row_sum(g, C)
        if needs[0]:
            gh = g * w if w is not None else g.copy()                # dL/dxhat
            acc = acc_dtype(gh.dtype)
            mean_gh = gh.mean(axis=-1, keepdims=True, dtype=acc) if self.centered else None
            if w is not None:
                gxhat_xhat *= w                                  # now gh * xhat
            coef = gxhat_xhat.mean(axis=-1, keepdims=True, dtype=acc)   # (..., 1)
            xp.multiply(xhat, coef, out=gxhat_xhat)              # reuse the buffer
            gh -= gxhat_xhat
            if mean_gh is not None:
                gh -= mean_gh
            gh *= rstd
            grads[0] = gh
        return tuple(grads)

    def _backward_rows(self, g):
        """backward of NumPy float32/64 arrays as blocks of rows (backward_rows)."""
        C = self.xhat.shape[-1]
        needs = self.needs_input_grad
        g2 = g.reshape(-1, C)
        gx = np.empty_like(g2) if needs[0] else None
        sums = backward_rows(g2, self.xhat.reshape(-1, C), self.rstd.reshape(-1, 1), self.w,
                             self.centered, gx)
        grads = [gx.reshape(g.shape) if gx is not None else None] + [None] * (len(needs) - 1)
        if self.has_w and needs[1]:
            grads[1] = sums[:C]
        if self.has_b and needs[1 + self.has_w]:
            grads[1 + self.has_w] = sums[C:]
        return tuple(grads)


def backward_rows(g, xhat, rstd, w, centered: bool, gx=None):
    """A norm's backward on NumPy rows g = dL/dy, xhat (N, C), rstd (N, 1), gain w (C,) or None
    -> the (2C,) sums [g * xhat | g] (dw and db); dL/dx into gx (N, C) when given. By blocks of
    rows (on the pool when large), every pass over a block while it is in cache; the blocks'
    sums are added in row order."""
    def block(lo, hi):
        return _backward_block(g[lo:hi], xhat[lo:hi], rstd[lo:hi], w, centered,
                                  None if gx is None else gx[lo:hi])

    return parallel.sum_rows(block, g.shape[0], g.shape[1])


def _backward_block(g, xhat, rstd, w, centered: bool, gx=None):
    """One block of rows of a norm's backward on NumPy arrays: g = dL/dy and xhat (n, C), rstd
    (n, 1), the gain w (C,) or None -> the block's (2C,) sums [g * xhat | g] (its parts of dw
    and db); dL/dx into gx (n, C) when given (not g's memory). The row means of gh * xhat and
    gh (gh = g * w) are products with w, one BLAS call each, instead of a pass and a reduction."""
    inv_c = g.dtype.type(1.0 / g.shape[-1])

    def row_mean_times_w(a):                                     # (n, C) -> (n, 1): mean(a * w)
        m = (a @ w)[:, None] if w is not None else row_sums(a)
        m *= inv_c
        return m

    gxx = g * xhat                                               # g * xhat
    C = g.shape[-1]
    sums = np.empty(2 * C, dtype=g.dtype)                        # (2C,): dw, db parts
    column_sums(gxx, sums[:C])
    column_sums(g, sums[C:])
    if gx is None:
        return sums
    if w is not None:                                            # rstd * gh, then dL/dx
        np.multiply(g, w, out=gx)
    else:
        np.copyto(gx, g)
    gx *= rstd
    coef = row_mean_times_w(gxx)                                 # mean(gh * xhat)
    coef *= rstd
    np.multiply(xhat, coef, out=gxx)
    gx -= gxx
    if centered:
        mean_gh = row_mean_times_w(g)
        mean_gh *= rstd
        gx -= mean_gh
    return sums


def _layer_norm_rows(x, xhat, rstd, y, w, b, eps) -> None:
    """LayerNorm of rows x (n, C) into xhat, rstd (n, 1) and y (one block of rows)."""
    mean = row_sums(x)
    mean *= 1.0 / x.shape[-1]
    np.subtract(x, mean, out=xhat)
    var = np.vecdot(xhat, xhat)[:, None]                     # sum of squares, no (n, C) temporary
    var *= 1.0 / x.shape[-1]
    var += eps
    np.sqrt(var, out=var)
    np.reciprocal(var, out=rstd)
    xhat *= rstd
    if y is not None:
        affine(xhat, w, b, out=y)


def _layer_norm_small_rows(x, xhat, rstd, y, w, b, eps):
    """LayerNorm of NumPy float32/float64 rows x (..., C) below the pool's size into xhat (..., C),
    rstd (..., 1) (None: a new array, returned) and y (None: no output apart from xhat). Every
    pass is row by row, so a block of rows gets the numbers that the whole array would."""
    inv_c = 1.0 / x.shape[-1]
    mean = row_sums(x)                                      # sum * 1/C: a decode step's rows are
    mean *= inv_c                                            # tiny, mean()'s overhead is not
    np.subtract(x, mean, out=xhat)
    var = np.vecdot(xhat, xhat)[..., None]                   # one pass instead of square, then sum
    # rstd = 1 / sqrt(var / C + eps) as sqrt(C) / sqrt(var + C eps): one pass fewer, which
    # counts on a decode step's few rows, where the number of passes is the cost
    var += eps * x.shape[-1]
    np.sqrt(var, out=var)
    rstd = np.divide(inv_c ** -0.5, var, out=var if rstd is None else rstd)
    xhat *= rstd
    if y is not None:
        affine(xhat, w, b, out=y)
    return rstd


def _rms_norm_rows(x, xhat, rstd, y, w, b, eps):
    """RMSNorm of NumPy float32/float64 rows x (..., C) into xhat, rstd (..., 1) (None: a new
    array, returned) and y (None: no output apart from xhat); b is not used (no shift). Row by
    row, as _layer_norm_small_rows."""
    ms = np.vecdot(x, x)[..., None]                          # one pass instead of square, then mean
    ms *= 1.0 / x.shape[-1]
    ms += eps
    np.sqrt(ms, out=ms)
    rstd = np.reciprocal(ms, out=ms if rstd is None else rstd)
    np.multiply(x, rstd, out=xhat)
    if y is not None:
        affine(xhat, w, None, out=y)
    return rstd


def norm_rows(centered: bool, whole):
    """The row function (x, xhat, rstd, y, w, b, eps) that gives rows of `whole` (a NumPy
    float32/float64 (N, C) array) the numbers the norm op gives them: LayerNorm's formula for
    `whole`'s size (centered) or RMSNorm's. Any block of rows may run on its own."""
    if not centered:
        return _rms_norm_rows
    return _layer_norm_rows if _on_pool(whole) else _layer_norm_small_rows


def layer_norm_array(x, w=None, b=None, eps: float = LAYER_NORM_EPS):
    """LayerNorm of an array x (..., C) with the optional gain w and shift b (C,) -> (y, xhat,
    rstd (..., 1)); y is xhat itself when there is neither. The forward of the LayerNorm op,
    and a layer's no-graph decode step (nn/arrays.py)."""
    if _on_pool(x):
        xhat, rstd = np.empty_like(x), np.empty(x.shape[:-1] + (1,), dtype=x.dtype)
        y = np.empty_like(x) if (w is not None or b is not None) else None
        if y is None:
            parallel.map_rows(lambda *a: _layer_norm_rows(*a, None, w, b, eps), x, xhat, rstd)
        else:
            parallel.map_rows(lambda *a: _layer_norm_rows(*a, w, b, eps), x, xhat, rstd, y)
        return (xhat if y is None else y), xhat, rstd
    if host_floats(x):
        xhat = np.empty_like(x)
        rstd = _layer_norm_small_rows(x, xhat, None, None, w, b, eps)
        return affine(xhat, w, b), xhat, rstd
    # CuPy, or float16 (statistics in float32): the same formula on whole arrays
    xp = xp_of(x)
    mean = row_sums(x)
    mean *= 1.0 / x.shape[-1]
    xc = x - mean                                            # (..., C), owned (float32 for float16 x)
    var = np.vecdot(xc, xc)[..., None] if xp is np else xp.square(xc).sum(axis=-1, keepdims=True)
    var += eps * x.shape[-1]
    rstd = xp.sqrt(var, out=var)
    xp.divide((1.0 / x.shape[-1]) ** -0.5, rstd, out=rstd)
    xc *= rstd                                               # xhat, in place
    xhat = xc.astype(x.dtype, copy=False)
    return affine(xhat, w, b), xhat, rstd


def rms_norm_array(x, w=None, eps: float = RMS_NORM_EPS):
    """RMSNorm of an array x (..., C) with the optional gain w (C,) -> (y, xhat, rstd (..., 1)):
    the forward of the RMSNorm op, and a layer's no-graph decode step (nn/arrays.py)."""
    if host_floats(x):
        xhat = np.empty_like(x)
        rstd = _rms_norm_rows(x, xhat, None, None, w, None, eps)
        return affine(xhat, w, None), xhat, rstd
    # CuPy, or float16 (statistics in float32)
    xp, acc = xp_of(x), acc_dtype(x.dtype)
    if xp is np:
        ms = np.vecdot(x, x, dtype=acc)[..., None]
        ms *= 1.0 / x.shape[-1]
    else:
        ms = xp.square(x, dtype=acc).mean(axis=-1, keepdims=True)
    ms += eps
    rstd = xp.sqrt(ms, out=ms)
    xp.reciprocal(rstd, out=rstd)
    xhat = (x * rstd).astype(x.dtype, copy=False)
    return affine(xhat, w, None), xhat, rstd


@kernel_op(kernels.norm_forward, kernels.norm_backward, centered=True)
class LayerNorm(_Norm):
    centered = True

    def forward(self, x, *params, eps=LAYER_NORM_EPS, has_w=False, has_b=False):
        w = params[0] if has_w else None
        y, xhat, rstd = layer_norm_array(x, w, params[-1] if has_b else None, eps)
        self._save(xhat, rstd, w, has_w, has_b)
        return y


@kernel_op(kernels.norm_forward, kernels.norm_backward, centered=False)
class RMSNorm(_Norm):
    centered = False

    def forward(self, x, *params, eps=RMS_NORM_EPS, has_w=False, has_b=False):
        w = params[0] if has_w else None
        y, xhat, rstd = rms_norm_array(x, w, eps)
        self._save(xhat, rstd, w, has_w, False)
        return y


def _check(x, weight, bias, op: str) -> None:
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: expected a floating-point input, got dtype {x.dtype}")
    if x.ndim < 1:
        raise ValueError(f"{op}: expected an input of shape (..., C), got a scalar")
    C = x.shape[-1]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if tuple(p.shape) != (C,):
            raise ValueError(f"{op}: {name} of shape {tuple(p.shape)} does not match input of shape "
                             f"{tuple(x.shape)}: expected ({C},)")
        if p.xp is not x.xp:
            raise RuntimeError(f"{op}: {name} is on {p.device} but the input is on {x.device}")


def layer_norm(x, weight=None, bias=None, eps: float = LAYER_NORM_EPS):
    """Normalise `x` (..., C) over its last axis to zero mean and unit variance, then scale by
    `weight` (C,) and shift by `bias` (C,) when given. Same shape and dtype as `x`."""
    _check(x, weight, bias, "layer_norm")
    params = [p for p in (weight, bias) if p is not None]
    return LayerNorm.apply(x, *params, eps=eps, has_w=weight is not None, has_b=bias is not None)


def rms_norm(x, weight=None, eps: float = RMS_NORM_EPS):
    """Scale `x` (..., C) by the reciprocal root-mean-square of its last axis, then by `weight`
    (C,) when given. Same shape and dtype as `x`."""
    _check(x, weight, None, "rms_norm")
    params = [weight] if weight is not None else []
    return RMSNorm.apply(x, *params, eps=eps, has_w=weight is not None)
