"""Run the fused CUDA kernels on the CPU, to test them where no GPU exists.

The kernel sources of autograd/cuda are compiled as C++ (g++) against a small emulation of the
CUDA execution model: each thread of a block is a coroutine (blocks run one after another), `__syncthreads()` is a barrier,
`__shared__` variables are per-block (blocks run one after another), and a warp shuffle is an
exchange through a block-wide buffer between two barriers (valid because every shuffle in these
kernels is reached by all threads of the block). Arrays are NumPy arrays passed by pointer.
float16: the two PTX conversion instructions of the half prelude are replaced by the C++
compiler's _Float16 conversions (both round to nearest even).

`emulated_kernels()` patches autograd.cuda so that the ops' GPU branches run on NumPy arrays
with these emulated kernels: the same Python glue and the same kernel source as on a GPU.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

HEADER = r"""
#include <ucontext.h>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <algorithm>
using std::min; using std::max; using std::isfinite;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
// Only one emulated thread runs at a time (cooperative coroutines), so plain globals suffice.
static dim3 threadIdx, blockIdx, blockDim, gridDim;
static ucontext_t emu_sched;
static std::vector<ucontext_t> emu_ctx;
static int emu_cur = 0;
static std::function<void()> emu_body;
static std::vector<char> emu_done;
static float g_shf[1024];
static double g_shd[1024];
inline void __syncthreads() { swapcontext(&emu_ctx[emu_cur], &emu_sched); }
inline int emu_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int t = emu_tid(); g_shf[t] = v; __syncthreads(); float r = g_shf[t ^ o]; __syncthreads(); return r;
}
inline double __shfl_xor_sync(unsigned, double v, int o) {
    int t = emu_tid(); g_shd[t] = v; __syncthreads(); double r = g_shd[t ^ o]; __syncthreads(); return r;
}
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int i; std::memcpy(&i, &f, 4); return i; }
// -O0 on x86-64 contracts nothing into an FMA: the plain operations round as the intrinsics do
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(n)
#define __shared__ static
static void emu_trampoline() { emu_body(); emu_done[emu_cur] = 1; swapcontext(&emu_ctx[emu_cur], &emu_sched); }
template <typename K, typename... Args>
void emu_launch(K kernel, dim3 grid, dim3 block, Args... args) {
    // Each CUDA thread of a block is a coroutine; __syncthreads() returns to the scheduler,
    // which resumes every thread in turn: one round = all threads reach the next barrier (or
    // finish). Blocks run one after another, so __shared__ (static) variables are per block.
    blockDim = block; gridDim = grid;
    int nt = block.x * block.y * block.z;
    const size_t stack = 64 * 1024;
    std::vector<char> stacks((size_t)nt * stack);
    emu_ctx.assign(nt, ucontext_t());
    emu_done.assign(nt, 0);
    emu_body = [&]() { kernel(args...); };
    for (unsigned bz = 0; bz < grid.z; bz++) for (unsigned by = 0; by < grid.y; by++)
    for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx = dim3{bx, by, bz};
        for (int t = 0; t < nt; t++) {
            getcontext(&emu_ctx[t]);
            emu_ctx[t].uc_stack.ss_sp = stacks.data() + (size_t)t * stack;
            emu_ctx[t].uc_stack.ss_size = stack;
            emu_ctx[t].uc_link = nullptr;
            makecontext(&emu_ctx[t], emu_trampoline, 0);
            emu_done[t] = 0;
        }
        int left = nt;
        while (left > 0) {
            int finished = 0, waiting = 0;
            for (int t = 0; t < nt; t++) {
                if (emu_done[t]) continue;
                emu_cur = t;
                threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                swapcontext(&emu_sched, &emu_ctx[t]);
                if (emu_done[t]) finished++; else waiting++;
            }
            if (finished && waiting) { std::fprintf(stderr, "emulator: some threads exited while others wait at a barrier\n"); std::abort(); }
            left = waiting;
        }
    }
}
"""

_SIG = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\w+\) )?(\w+)\((.*?)\)\s*\{', re.S)


def available() -> bool:
    return shutil.which("g++") is not None


def _params(sig: str) -> list[tuple[str, str]]:
    """[(type, name)] of a kernel's parameter list."""
    out = []
    for part in sig.split(","):
        part = " ".join(part.replace("__restrict__", "").split())
        typ, name = part.rsplit(" ", 1)
        while name.startswith("*"):
            typ, name = typ + "*", name[1:]
        out.append((typ, name))
    return out


def _ctype(typ: str, acc: str):
    if "*" in typ:
        return ctypes.c_void_p
    base = typ.replace("const", "").strip()
    if base == "A":
        base = acc
    return {"int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float,
            "double": ctypes.c_double}[base]


class _Lib:
    def __init__(self, source: str, acc: str, cache_dir: str):
        wrappers = []
        self.kernels = {}
        for name, sig in _SIG.findall(source):
            params = _params(sig)
            decl = ", ".join(f"{t} {n}" for t, n in params)
            names = ", ".join(n for _, n in params)
            wrappers.append(
                f'extern "C" void L_{name}(unsigned emu_gx, unsigned emu_gy, unsigned emu_gz, unsigned emu_bx, '
                f'unsigned emu_by, unsigned emu_bz, {decl}) {{ emu_launch({name}, dim3{{emu_gx, emu_gy, emu_gz}}, '
                f'dim3{{emu_bx, emu_by, emu_bz}}, {names}); }}')
            self.kernels[name] = [_ctype(t, acc) for t, _ in params]
        full = HEADER + source + "\n" + "\n".join(wrappers) + "\n"
        key = hashlib.sha1(full.encode()).hexdigest()[:16]
        so = os.path.join(cache_dir, f"k_{key}.so")
        if not os.path.exists(so):
            tmp = f"{so}.{os.getpid()}"
            src = tmp + ".cpp"
            with open(src, "w") as f:
                f.write(full)
            res = subprocess.run(["g++", "-std=c++17", "-O0", "-shared", "-fPIC", "-w", src, "-o", tmp],
                                 capture_output=True, text=True)
            os.remove(src)
            if res.returncode:
                raise RuntimeError(f"emulated kernel source does not compile:\n{res.stderr[:4000]}")
            os.replace(tmp, so)  # atomic: a concurrent run never loads a half-written library
        self.lib = ctypes.CDLL(so)

    def get(self, name: str):
        fn = getattr(self.lib, f"L_{name}")
        fn.argtypes = [ctypes.c_uint] * 6 + self.kernels[name]
        fn.restype = None
        return _Kernel(fn, name)


class _Kernel:
    def __init__(self, fn, name):
        self.fn, self.name = fn, name

    def __call__(self, grid, block, args, **_):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        conv = []
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous, f"{self.name}: non-contiguous array argument"
                conv.append(a.ctypes.data)
            elif isinstance(a, np.generic):
                conv.append(a.item())
            else:
                conv.append(a)
        self.fn(*grid, *block, *conv)


_ACC = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double"}
_PTX_TO_CPP = {
    'asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));': "{ _Float16 t; std::memcpy(&t, &h, 2); f = (float)t; }",
    'asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));': "{ _Float16 t = (_Float16)f; std::memcpy(&h, &t, 2); }",
}


def _cpu_source(body: str, dtype: str, defines: tuple) -> str:
    from autograd.cuda import _compile

    src = _compile.full_source(body, dtype, defines)
    for ptx, cpp in _PTX_TO_CPP.items():
        src = src.replace(ptx, cpp)
    assert "asm(" not in src, "unhandled inline PTX in a kernel source"
    return src


@contextlib.contextmanager
def emulated_kernels(cache_dir: str | None = None):
    """Within the block, ops on NumPy float16/32/64 arrays take their fused-GPU branch, with the
    kernels compiled for the CPU. Yields nothing; restores everything on exit."""
    import autograd.cuda as acuda
    from autograd.cuda._compile import kernel_modules

    cache_dir = cache_dir or tempfile.mkdtemp(prefix="cuda_emu_")
    libs: dict = {}

    def get_kernel(body, name, dtype, defines=()):
        key = (body, dtype, tuple(defines))
        if key not in libs:
            libs[key] = _Lib(_cpu_source(body, dtype, tuple(defines)), _ACC[dtype], cache_dir)
        return libs[key].get(name)

    patched = []
    for mod in kernel_modules():
        patched.append((mod, "get_kernel", mod.get_kernel))
        mod.get_kernel = get_kernel
    patched.append((acuda, "use", acuda.use))
    acuda.use = lambda a: acuda.fused_enabled() and isinstance(a, np.ndarray) and a.dtype.kind == "f"
    try:
        yield
    finally:
        for mod, name, old in patched:
            setattr(mod, name, old)
