"""The AdamW update on the GPU, in place (reference: _moments and _adamw_arrays in nn/optim/adamw.py):
    p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
bit for bit the NumPy update for float32 and float64 (the same roundings in the same order);
one launch for a whole parameter group (multi-tensor: a table of the tensors' addresses and of
chunks of CHUNK elements, each block of threads taking chunks), or one per parameter.
"""
from __future__ import annotations

import math

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda._compile import dtype_name, get_kernel, grid_1d, register

_BODY = register("adamw", r"""
// mul_rn/add_rn: no a*b+c contracted into one FMA (NVRTC's default), so each product and sum is
// rounded as in the NumPy update, whose order of operations this follows: the same bits
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

struct AdamWScalars { A b1, one_minus_b1, b2, one_minus_b2, eps, decay, neg_step_size, inv_sqrt_bc2; };

__device__ __forceinline__ void adamw_element(T* p, const T* g, T* m, T* v, long long i,
                                              const AdamWScalars& s) {
    A gi = LD(g, i);
    A mi = add_rn(mul_rn(LD(m, i), s.b1), mul_rn(gi, s.one_minus_b1));
    A vi = add_rn(mul_rn(LD(v, i), s.b2), mul_rn(mul_rn(gi, gi), s.one_minus_b2));
    A step = mul_rn(mi / add_rn(mul_rn(sqrt_a(vi), s.inv_sqrt_bc2), s.eps), s.neg_step_size);
    ST(m, i, mi);
    ST(v, i, vi);
    ST(p, i, add_rn(mul_rn(LD(p, i), s.decay), step));
}

// (the scalars are spelled out in each signature: tests/autograd/cuda_emulator.py reads them)
#define ADAMW_PACK {b1, one_minus_b1, b2, one_minus_b2, eps, decay, neg_step_size, inv_sqrt_bc2}

extern "C" __global__ void adamw_step(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m,
                                      T* __restrict__ v, long long n, A b1, A one_minus_b1, A b2,
                                      A one_minus_b2, A eps, A decay, A neg_step_size, A inv_sqrt_bc2) {
    const AdamWScalars s = ADAMW_PACK;
    GRID_STRIDE(i, n) {
        adamw_element(p, g, m, v, i, s);
    }
}

// ptrs: 4 addresses per tensor (p, g, m, v); chunk c covers elements chunk_start[c] .. + chunk
// of tensor chunk_tensor[c] (fewer at a tensor's end)
extern "C" __global__ void adamw_multi(const unsigned long long* __restrict__ ptrs,
                                       const long long* __restrict__ sizes, const int* __restrict__ chunk_tensor,
                                       const long long* __restrict__ chunk_start, int n_chunks, long long chunk,
                                       A b1, A one_minus_b1, A b2, A one_minus_b2, A eps, A decay,
                                       A neg_step_size, A inv_sqrt_bc2) {
    const AdamWScalars s = ADAMW_PACK;
    for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const int k = chunk_tensor[c];
        const long long lo = chunk_start[c];
        const long long hi = lo + chunk < sizes[k] ? lo + chunk : sizes[k];
        T* p = (T*)ptrs[4 * k];
        const T* g = (const T*)ptrs[4 * k + 1];
        T* m = (T*)ptrs[4 * k + 2];
        T* v = (T*)ptrs[4 * k + 3];
        for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            adamw_element(p, g, m, v, i, s);
        }
    }
}
""")


def _adamw_scalars(dtype, lr, b1, b2, eps, wd, t) -> tuple:
    """The kernels' scalars (AdamWScalars, in order) in the accumulation dtype, each computed in
    double and then rounded once, as NumPy rounds the Python floats of _moments in nn/optim/adamw.py."""
    a = acc_dtype(dtype).type
    return (a(b1), a(1.0 - b1), a(b2), a(1.0 - b2), a(eps), a(1.0 - lr * wd), a(-lr / (1.0 - b1 ** t)),
            a(1.0 / math.sqrt(1.0 - b2 ** t)))


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
    k(grid_1d(n), (256,), (p, g, m, v, np.int64(n), *_adamw_scalars(p.dtype, lr, b1, b2, eps, wd, t)))


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
