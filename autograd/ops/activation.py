"""Activations: tanh, sigmoid, relu, gelu (tanh approximation and exact erf), silu.

Every function keeps its input's dtype: Python-float constants are weak scalars for NumPy
and CuPy, so float32 stays float32.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from autograd import parallel
from autograd.cuda import activation as kernels
from autograd.cuda import kernel_op
from autograd.backend import xp_of
from autograd.function import Function

if TYPE_CHECKING:
    from autograd.tensor import Tensor

# GELU's tanh form, 0.5 x (1 + tanh(GELU_TANH_SCALE (x + GELU_TANH_CUBIC x^3))) (Hendrycks and
# Gimpel); its CUDA kernels and gpt/gradflow's analytic Jacobians take the constants from here
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBIC = 0.044715
GELU_APPROXIMATIONS = ("tanh", "none")   # gelu's forms: the tanh one (GPT-2) and the exact erf one
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _float_only(x, op: str) -> None:
    if x.dtype.kind not in "fc":
        raise TypeError(f"{op}: needs a floating-point tensor, got dtype {x.dtype}")


def _sigmoid(x):
    """1 / (1 + exp(-x)) without overflow: exp is only taken of -|x|."""
    xp = xp_of(x)
    e = xp.exp(-xp.abs(x))
    inv = 1.0 / (1.0 + e)
    return xp.where(x >= 0, inv, e * inv)


# ---- erf ---------------------------------------------------------------------------------
# NumPy has no erf, and the project depends on numpy alone. Two expansions cover the line,
# both smooth, so finite differences of this forward agree with the analytic derivative
# 2/sqrt(pi) exp(-x^2) (what gradcheck of gelu(approximate="none") relies on):
#   |x| < 2:  erf(x)  = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))
#             (all terms positive: no cancellation)
#   |x| >= 2: erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
#             (the continued fraction evaluated bottom-up with a fixed depth)
# Term counts were tuned against math.erf: max relative error ~1e-15 in float64 and
# ~6e-7 in float32 (which is computed in float32 with fewer terms).
_ERF_SPLIT = 2.0
_ERF_TERMS = {np.dtype(np.float64): (32, 48), np.dtype(np.float32): (20, 16)}


def _erf_numpy(x):
    work = x if x.dtype in _ERF_TERMS else x.astype(np.float32)
    n_series, depth = _ERF_TERMS[work.dtype]
    ax = np.abs(work)
    out = np.empty_like(work)
    small = ax < _ERF_SPLIT
    if small.any():
        xs = ax[small]
        x2 = xs * xs
        twice_x2 = x2 + x2
        term = xs
        total = xs.copy()
        for n in range(1, n_series):
            term = term * twice_x2 / (2 * n + 1)
            total += term
        out[small] = _TWO_OVER_SQRT_PI * np.exp(-x2) * total
    large = ~small
    if large.any():
        xl = ax[large]
        f = xl.copy()
        for k in range(depth, 0, -1):
            f = xl + (0.5 * k) / f
        out[large] = 1.0 - np.exp(-xl * xl) * _INV_SQRT_PI / f
    out = np.copysign(out, work)
    return out if out.dtype == x.dtype else out.astype(x.dtype)


def erf(x: Any) -> Any:
    """The error function of a backend array (cupy's own kernel on the GPU)."""
    if xp_of(x) is np:
        return _erf_numpy(x)
    from cupyx.scipy.special import erf as cupy_erf  # only reached with cupy arrays

    return cupy_erf(x)


# ---- ops ---------------------------------------------------------------------------------
class Tanh(Function):
    def forward(self, x):
        self.out = xp_of(x).tanh(x)
        return self.out

    def backward(self, g):
        out = self.out
        return (g * (1.0 - out * out),)


class Sigmoid(Function):
    def forward(self, x):
        self.out = _sigmoid(x)
        return self.out

    def backward(self, g):
        out = self.out
        return (g * (out * (1.0 - out)),)


class ReLU(Function):
    def forward(self, x):
        self.out = xp_of(x).maximum(x, 0)
        return self.out

    def backward(self, g):
        return (g * (self.out > 0),)


def _gelu_tanh_forward(x, a, y) -> None:
    """a = (1 + tanh(z)) / 2 = 1 / (1 + e^(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3), and GELU's
    y = x a, into a and y (same shape). Through exp: without AVX-512 NumPy's float32 exp runs in
    SIMD where its tanh does not (with it both do: docs/benchmarks.md, bench_gelu.py), and a takes
    no cancellation where 1 + tanh(z) would."""
    xp = xp_of(x)
    xp.multiply(x, x, out=a)
    a *= -2 * GELU_TANH_CUBIC * GELU_TANH_SCALE     # the constants folded in: passes fewer
    a -= 2 * GELU_TANH_SCALE
    a *= x                                          # -2z
    with np.errstate(over="ignore"):                # e^(-2z) = inf: a = 0, y = -0
        xp.exp(a, out=a)
    a += 1.0
    xp.divide(1.0, a, out=a)                        # reciprocal's bits; NumPy's divide has SIMD loops
    xp.multiply(x, a, out=y)


def _gelu_tanh_backward(g, x, a, d, h=None) -> None:
    """d = g * dgelu/dx into d, from ``a`` as the forward leaves it, and with `h` (a buffer of x's
    shape) GELU's output x a into h too (the fused MLP's weight gradient needs it). With t =
    tanh(z) = 2a - 1 and z' = sqrt(2/pi) (1 + 3 * 0.044715 x^2), the derivative of tanh's argument,
        dgelu/dx = a + 0.5 x (1 - t^2) z' = a (1 + 2 x z' (1 - a)),   as 0.5 (1 - t^2) = 2a (1 - a):
    9 passes (10 with h), two scratch arrays. d may be a and h may be x: each is written after
    its last read (a backward that owns them needs no new array)."""
    xp = xp_of(x)
    t = xp.multiply(x, x, out=xp.empty_like(a))     # a block's scratch (all of a off the pool)
    t *= 6 * GELU_TANH_CUBIC * GELU_TANH_SCALE
    t += 2 * GELU_TANH_SCALE                        # 2 z'
    t *= x
    s = xp.multiply(a, t, out=xp.empty_like(a))
    t -= s                                          # 2 x z' (1 - a)
    t += 1.0
    t *= a
    if h is not None:
        xp.multiply(a, x, out=h)
    xp.multiply(t, g, out=d)


def gelu_tanh_array(x):
    """GELU's tanh form of an array -> (y, a), a = (1 + tanh(z)) / 2, which its backward reuses;
    both new arrays of x's shape. The forward of the GELUTanh op, and a layer's no-graph decode
    step."""
    xp = xp_of(x)
    a, y = xp.empty_like(x), xp.empty_like(x)   # arrays even for 0-d x
    parallel.map_rows(_gelu_tanh_forward, x, a, y)
    return y, a


@kernel_op(kernels.gelu_forward, kernels.gelu_backward, scale=GELU_TANH_SCALE, cubic=GELU_TANH_CUBIC)
class GELUTanh(Function):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation.

    Written as in-place updates of arrays this op owns: on a (N, 4C) MLP activation every
    temporary is a full-size array, and fewer of them is most of this op's time and memory. On
    the CPU the passes run block by block of rows on autograd.parallel's threads, each block in
    cache from the first pass to the last.
    """

    def forward(self, x):
        y, self.a = gelu_tanh_array(x)
        self.x = x
        return y

    def backward(self, g):
        xp = xp_of(g)
        d = self.a if self.last_backward else xp.empty_like(self.x)   # a is this op's own
        if g.shape != d.shape or g.dtype != d.dtype:
            g = xp.broadcast_to(g, d.shape).astype(d.dtype)
        parallel.map_rows(_gelu_tanh_backward, g, self.x, self.a, d)
        return (d,)


class GELUErf(Function):
    """x * Phi(x) with the exact normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2."""

    def forward(self, x):
        cdf = 0.5 * (1.0 + erf(x * _INV_SQRT_2))
        self.x, self.cdf = x, cdf
        return x * cdf

    def backward(self, g):
        x = self.x
        pdf = xp_of(x).exp(-0.5 * x * x) * _INV_SQRT_2PI
        return (g * (self.cdf + x * pdf),)


def silu_array(x):
    """x * sigmoid(x) of an array -> (y, sigmoid(x)): the forward of the SiLU op, and a layer's
    no-graph decode step."""
    s = _sigmoid(x)
    return x * s, s


class SiLU(Function):
    """x * sigmoid(x)."""

    def forward(self, x):
        y, self.s = silu_array(x)
        self.x = x
        return y

    def backward(self, g):
        s = self.s
        return (g * (s * (1.0 + self.x * (1.0 - s))),)


def tanh(x: Tensor) -> Tensor:
    _float_only(x, "tanh")
    return Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    _float_only(x, "sigmoid")
    return Sigmoid.apply(x)


def relu(x: Tensor) -> Tensor:
    return ReLU.apply(x)


def gelu(x: Tensor, approximate: str = "tanh") -> Tensor:
    """GELU; approximate="tanh" (GPT-2) or "none" (exact, via erf)."""
    _float_only(x, "gelu")
    check_gelu_approximate(approximate, "gelu")
    return GELUTanh.apply(x) if approximate == "tanh" else GELUErf.apply(x)


def check_gelu_approximate(approximate: str, who: str) -> None:
    """Raise a ValueError naming `who` unless `approximate` is one of GELU_APPROXIMATIONS."""
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"{who}: approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")


def silu(x: Tensor) -> Tensor:
    _float_only(x, "silu")
    return SiLU.apply(x)
