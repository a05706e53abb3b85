"""Elementwise kernels: GELU (tanh approximation) forward/backward and the AdamW update.

GELU (reference: GELUTanh in autograd/ops/activation.py), u = sqrt(2/pi) (x + 0.044715 x^3):
    y  = 0.5 x (1 + tanh(u))
    dx = g * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)),  t = tanh(u)
The fused forward saves only x (t is recomputed), one full-size array less than the CPU op.

AdamW (reference: _moments and _adamw_arrays in nn/optim/adamw.py), in place:
    p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
one launch for a whole parameter group (multi-tensor: a table of the tensors' addresses and of
chunks of CHUNK elements, each block of threads taking chunks), or one per parameter.

Loss-scale unscaling (reference: nn.amp.DynamicLossScaler.unscale_ after a cast to float32):
    out = float32(g) * inv_scale, and a flag on the device set when any value is inf/NaN,
one kernel per gradient instead of a cast, a multiply and two reductions; the host reads the
flag once for all gradients.
"""
from __future__ import annotations

import math

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda._compile import dtype_name, get_kernel, register

_BODY = register("elementwise", r"""
#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (long long)blockDim.x * gridDim.x)
#define K0 ((A)0.7978845608028654)

extern "C" __global__ void gelu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n) {
    GRID_STRIDE(i, n) {
        A v = LD(x, i);
        A t = tanh_a(K0 * (v + (A)0.044715 * v * v * v));
        ST(y, i, (A)0.5 * v * ((A)1 + t));
    }
}

extern "C" __global__ void gelu_bwd(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ gx,
                                    long long n) {
    GRID_STRIDE(i, n) {
        A v = LD(x, i);
        A t = tanh_a(K0 * (v + (A)0.044715 * v * v * v));
        A d = (A)0.5 * ((A)1 + t) + (A)0.5 * v * ((A)1 - t * t) * K0 * ((A)1 + (A)0.134145 * v * v);
        ST(gx, i, LD(g, i) * d);
    }
}

extern "C" __global__ void unscale_to_float(const T* __restrict__ g, float* __restrict__ out, long long n,
                                            float inv_scale, int* __restrict__ bad) {
    GRID_STRIDE(i, n) {
        float v = (float)LD(g, i) * inv_scale;
        out[i] = v;
        if (!isfinite(v)) bad[0] = 1;      // every writer writes the same value: no atomic needed
    }
}

__device__ __forceinline__ void adamw_element(T* p, const T* g, T* m, T* v, long long i, A b1, A b2, A eps,
                                              A decay, A step_size, A inv_sqrt_bc2) {
    A gi = LD(g, i);
    A mi = b1 * LD(m, i) + ((A)1 - b1) * gi;
    A vi = b2 * LD(v, i) + ((A)1 - b2) * gi * gi;
    A pi = LD(p, i) * decay;
    pi -= step_size * mi / (sqrt_a(vi) * inv_sqrt_bc2 + eps);
    ST(m, i, mi);
    ST(v, i, vi);
    ST(p, i, pi);
}

extern "C" __global__ void adamw_step(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                                      T* __restrict__ v, long long n, A b1, A b2, A eps, A decay,
                                      A step_size, A inv_sqrt_bc2) {
    GRID_STRIDE(i, n) {
        adamw_element(p, g, m, v, i, b1, b2, eps, decay, step_size, inv_sqrt_bc2);
    }
}

// ptrs: 4 addresses per tensor (p, g, m, v); chunk c covers elements chunk_start[c] .. + chunk
// of tensor chunk_tensor[c] (fewer at a tensor's end)
extern "C" __global__ void adamw_multi(const unsigned long long* __restrict__ ptrs,
                                       const long long* __restrict__ sizes, const int* __restrict__ chunk_tensor,
                                       const long long* __restrict__ chunk_start, int n_chunks, long long chunk,
                                       A b1, A b2, A eps, A decay, A step_size, A inv_sqrt_bc2) {
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const long long lo = chunk_start[c];
        const long long hi = lo + chunk < sizes[k] ? lo + chunk : sizes[k];
        T* p = (T*)ptrs[4 * k];
        const T* g = (const T*)ptrs[4 * k + 1];
        T* m = (T*)ptrs[4 * k + 2];
        T* v = (T*)ptrs[4 * k + 3];
        for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            adamw_element(p, g, m, v, i, b1, b2, eps, decay, step_size, inv_sqrt_bc2);
        }
    }
}
""")


def _grid(n: int, block: int = 256) -> tuple:
    return (max(1, min(-(-n // block), 65535 * 8)),)


def gelu_array(x):
    xp = xp_of(x)
    xc = xp.ascontiguousarray(x)
    y = xp.empty_like(xc)
    if xc.size:
        get_kernel(_BODY, "gelu_fwd", dtype_name(x))(_grid(xc.size), (256,), (xc, y, np.int64(xc.size)))
    return y


def gelu_forward(node, x):
    node.x = x
    return gelu_array(x)


def gelu_backward(node, g):
    xp = xp_of(g)
    x = xp.ascontiguousarray(node.x)
    gc = xp.ascontiguousarray(g.astype(x.dtype, copy=False))
    gx = xp.empty_like(x)
    if x.size:
        get_kernel(_BODY, "gelu_bwd", dtype_name(x))(_grid(x.size), (256,), (gc, x, gx, np.int64(x.size)))
    return (gx,)


def unscale_to_float32(g, inv_scale: float, flag):
    """float32(g) * inv_scale as a new float32 array of g's shape; sets flag[0] = 1 (an int32
    device array) when a result is inf or NaN."""
    xp = xp_of(g)
    gc = xp.ascontiguousarray(g)
    out = xp.empty(gc.shape, dtype=np.float32)
    if gc.size:
        k = get_kernel(_BODY, "unscale_to_float", dtype_name(gc))
        k(_grid(gc.size), (256,), (gc, out, np.int64(gc.size), np.float32(inv_scale), flag))
    return out


def _adamw_scalars(dtype, lr, b1, b2, eps, wd, t) -> tuple:
    """The kernels' b1, b2, eps, decay, step_size, inv_sqrt_bc2 in the accumulation dtype."""
    a = acc_dtype(dtype).type
    return a(b1), a(b2), a(eps), a(1.0 - lr * wd), a(lr / (1.0 - b1 ** t)), a(1.0 / math.sqrt(1.0 - b2 ** t))


def _operands(p, g, m, v):
    """(p, g, m, v) for a kernel: g contiguous in p's dtype (a copy only when it is not)."""
    if not (p.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous):
        raise ValueError("adamw: parameter and moment arrays must be contiguous")
    return p, xp_of(p).ascontiguousarray(g.astype(p.dtype, copy=False)), m, v


def adamw_update(p, g, m, v, lr: float, b1: float, b2: float, eps: float, wd: float, t: int) -> None:
    """One AdamW step of parameter array `p` (contiguous, updated in place with m and v)."""
    p, g, m, v = _operands(p, g, m, v)
    n = p.size
    if not n:
        return
    k = get_kernel(_BODY, "adamw_step", dtype_name(p))
    k(_grid(n), (256,), (p, g, m, v, np.int64(n), *_adamw_scalars(p.dtype, lr, b1, b2, eps, wd, t)))


CHUNK = 1 << 16   # elements of one tensor per chunk of the multi-tensor launch


def _address(a) -> int:
    return a.data.ptr if hasattr(a.data, "ptr") else a.ctypes.data   # CuPy, or NumPy (the emulator)


def _chunks(sizes: tuple, xp) -> tuple:
    """(chunk_tensor int32, chunk_start int64, sizes int64) device arrays for tensors of `sizes`."""
    tensor = [k for k, n in enumerate(sizes) for _ in range(0, n, CHUNK)]
    start = [lo for n in sizes for lo in range(0, n, CHUNK)]
    return (xp.asarray(np.array(tensor, np.int32)), xp.asarray(np.array(start, np.int64)),
            xp.asarray(np.array(sizes, np.int64)))


def adamw_multi_update(quads: list, lr: float, b1: float, b2: float, eps: float, wd: float, t: int) -> None:
    """One AdamW step of many parameters in one launch: quads [(p, g, m, v)] of one dtype and
    device, all at step t with the same hyperparameters (a parameter group)."""
    quads = [_operands(*q) for q in quads if q[0].size]
    if not quads:
        return
    p0 = quads[0][0]
    xp = xp_of(p0)
    ptrs = xp.asarray(np.array([_address(a) for q in quads for a in q], dtype=np.uint64))
    tensor, start, sizes = _chunks(tuple(q[0].size for q in quads), xp)
    k = get_kernel(_BODY, "adamw_multi", dtype_name(p0))
    n_chunks = int(tensor.size)
    k((min(n_chunks, 65535),), (256,), (ptrs, sizes, tensor, start, np.int32(n_chunks), np.int64(CHUNK),
                                        *_adamw_scalars(p0.dtype, lr, b1, b2, eps, wd, t)))
