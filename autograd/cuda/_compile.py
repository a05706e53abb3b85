"""Building the fused CUDA kernels: per-dtype sources, lazy compilation, a cache, launch helpers.

Every kernel source is written once against three type names and compiled per dtype:
    T   the storage type of the arrays (float, double, or the 16 bits of a half or a bfloat16),
    A   the accumulation type (float for float16, bfloat16 and float32, double for float64),
    LD(p, i) / ST(p, i, v)   load p[i] as A / store A v into p[i] (converting for 16 bits).
Half values are handled as raw 16-bit integers and converted with the PTX cvt instruction;
bfloat16 values (uint16 arrays, as nn.bfloat16 holds them: NumPy and CuPy have no bfloat16
dtype) with the bit operations of bf2f / f2bf below. So no CUDA header is needed: the same
source compiles with NVRTC at run time (CuPy's RawModule) and offline without a GPU
(`compile_all` below, used by tests/autograd/test_cuda_kernels.py).

CuPy is imported only when a kernel is first needed, through autograd.backend.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

_PRELUDE_HALF = r"""
typedef unsigned short T;
typedef float A;
__device__ __forceinline__ float h2f(unsigned short h) {
    float f; asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h; asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f)); return h;
}
#define LD(p, i) h2f((p)[i])
#define ST(p, i, v) ((p)[i] = f2h((float)(v)))
"""

_PRELUDE_BFLOAT16 = r"""
typedef unsigned short T;
typedef float A;
#define LD(p, i) bf2f((p)[i])
#define ST(p, i, v) ((p)[i] = f2bf((float)(v)))
"""

_PRELUDE_FLOAT = r"""
typedef float T;
typedef float A;
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (float)(v))
"""

_PRELUDE_DOUBLE = r"""
typedef double T;
typedef double A;
#define LD(p, i) ((p)[i])
#define ST(p, i, v) ((p)[i] = (double)(v))
"""

_COMMON = r"""
#define NEG_INF (-__int_as_float(0x7f800000))
__device__ __forceinline__ float exp_a(float x) { return expf(x); }
__device__ __forceinline__ double exp_a(double x) { return exp(x); }
__device__ __forceinline__ float log_a(float x) { return logf(x); }
__device__ __forceinline__ double log_a(double x) { return log(x); }
__device__ __forceinline__ float sqrt_a(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_a(double x) { return sqrt(x); }
__device__ __forceinline__ float tanh_a(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_a(double x) { return tanh(x); }
__device__ __forceinline__ A max_a(A a, A b) { return a > b ? a : b; }

// bfloat16 <-> float32 as nn.bfloat16 does on the host: widening is exact (the top 16 bits);
// narrowing rounds to nearest, ties to even; a NaN stays a quiet NaN (its mantissa could carry)
__device__ __forceinline__ float bf2f(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Elementwise kernels: each thread takes elements i, i + the grid's size, ... below n.
#define GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (long long)blockDim.x * gridDim.x)

// Block-wide reductions over blockDim.x threads (a multiple of 32, at most 1024); `shared`
// holds 32 values of A. Every thread gets the result.
__device__ __forceinline__ A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) v = max_a(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ A block_sum(A v, A* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : (A)0;
    return warp_sum(v);
}
__device__ A block_max(A v, A* shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : (A)NEG_INF;
    return warp_max(v);
}
"""

_PRELUDES = {"float16": _PRELUDE_HALF, "float32": _PRELUDE_FLOAT, "float64": _PRELUDE_DOUBLE,
             "bfloat16": _PRELUDE_BFLOAT16}
SUPPORTED = ("float16", "float32", "float64")   # the ops' dtypes: each kernel source's default
WITH_BFLOAT16 = SUPPORTED + ("bfloat16",)        # sources that also take bfloat16 storage (amp's)


def full_source(body: str, dtype: str, defines: tuple = ()) -> str:
    """The complete CUDA source of `body` for storage dtype `dtype` (a name in WITH_BFLOAT16)."""
    lines = [f"#define {k} {v}" for k, v in defines]
    return "\n".join(lines) + _PRELUDES[dtype] + _COMMON + body


def dtype_name(array: Any, bfloat16: bool = False) -> str:
    """The prelude of an array's dtype: float16/32/64 by name; with bfloat16=True (a caller that
    holds bfloat16 bit patterns) uint16 as "bfloat16", so an integer array never passes as one."""
    name = np.dtype(array.dtype).name
    if bfloat16 and name == "uint16":
        return "bfloat16"
    if name not in SUPPORTED:
        raise TypeError(f"fused CUDA kernels take float16, float32 or float64 arrays, got {name}")
    return name


@functools.lru_cache(maxsize=None)
def _module(body: str, dtype: str, defines: tuple):
    from autograd.backend import cupy_module

    cp = cupy_module()
    return cp.RawModule(code=full_source(body, dtype, defines))  # NVRTC defaults (C++17 on CUDA 12/13)


def get_kernel(body: str, name: str, dtype: str, defines: tuple = ()):
    """The compiled kernel `name` of `body` for `dtype` (compiled once per process and device)."""
    return _module(body, dtype, tuple(defines)).get_function(name)


def block_size_for(n: int, cap: int = 1024) -> int:
    """Threads per block for a row of n elements: a multiple of 32, at least 32, at most cap."""
    b = 32
    while b < n and b < cap:
        b *= 2
    return b


def grid_1d(n: int, block: int = 256) -> tuple:
    """Blocks for an elementwise (GRID_STRIDE) kernel over n elements: enough for one element a
    thread, at most 65535 * 8 (each thread then takes several)."""
    return (max(1, min(-(-n // block), 65535 * 8)),)


# ---- offline check (no GPU needed, only NVRTC) ----------------------------------------------
_REGISTRY: list[tuple[str, str, tuple, tuple]] = []   # (label, body, dtypes, defines)


def register(label: str, body: str, dtypes: tuple = SUPPORTED, defines: tuple = ()) -> str:
    """Record a kernel source so `compile_all` can check it; returns `body`."""
    _REGISTRY.append((label, body, tuple(dtypes), tuple(defines)))
    return body


def kernel_modules() -> tuple:
    """The modules of autograd.cuda that hold kernel sources and launch them with get_kernel."""
    from autograd.cuda import activation, adamw, amp, attention, loss, norm, softmax

    return activation, adamw, amp, attention, loss, norm, softmax


def compile_all(arch: str = "compute_90") -> list[str]:
    """Compile every registered source for every dtype with NVRTC (no GPU, no driver needed);
    returns the labels compiled, raises with the compiler's log on the first error."""
    from cupy.cuda import compiler

    kernel_modules()   # importing them registers the sources
    done = []
    for label, body, dtypes, defines in _REGISTRY:
        for dt in dtypes:
            src = full_source(body, dt, defines)
            prog = compiler._NVRTCProgram(src, f"{label}_{dt}.cu")
            try:
                prog.compile((f"-arch={arch}",))
            except Exception as exc:
                raise RuntimeError(f"kernel {label} ({dt}) does not compile:\n{exc}") from None
            done.append(f"{label}[{dt}]")
    return done
