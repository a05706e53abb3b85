"""Benchmark of the autograd engine: per-op overhead, and one transformer block against NumPy.

    python benchmarks/bench_autograd.py                 # both parts, default sizes
    python benchmarks/bench_autograd.py --part block --repeats 7
    python benchmarks/bench_autograd.py --profile       # cProfile of the engine's block step
    python benchmarks/bench_autograd.py --part block --threads 2   # floor: 2 BLAS threads; engine: its pool

Part 1 times each op on small (16, 16) float32 tensors through the engine (graph recorded)
and as the bare NumPy call; the difference is the framework's overhead per op.
Part 2 runs forward + backward of one pre-norm transformer block (B=8, T=256, d=384, 6 heads,
MLP 4x, float32) written with the engine, and the same block written by hand in NumPy with a
manual backward (benchmarks/_numpy_block.py: the floor for any NumPy engine; its causal
attention skips the masked key blocks as the engine's does, so the floor is not naive there). It asserts that
both give the same output and gradients, then prints medians of several runs: time, achieved
matmul GFLOP/s, NumPy's own matmul GFLOP/s on the block's shapes, and peak traced memory.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path


def _blas_threads_from_argv(argv: list[str]) -> None:
    """Apply --blas-threads N before NumPy is imported (BLAS reads it once, at load)."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--blas-threads=") else (
            argv[i + 1] if arg == "--blas-threads" and i + 1 < len(argv) else None)
        if value is not None:
            for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[var] = value


_blas_threads_from_argv(sys.argv)

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _numpy_block when run as a script

import _numpy_block as floor  # noqa: E402
import autograd  # noqa: E402
from autograd import Tensor  # noqa: E402
from autograd import ops  # noqa: E402
from autograd.ops.mlp import gelu_mlp  # noqa: E402


# ---- timing helpers ------------------------------------------------------------------------
def _per_call_us(fn, number: int, repeats: int) -> float:
    """Median over `repeats` of the mean time of `number` calls, in microseconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times) * 1e6


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _peak_bytes(fn) -> int:
    """Peak traced allocation above the starting level while `fn` runs (its result kept)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak - base


# ---- part 1: per-op overhead ---------------------------------------------------------------
def bench_overhead(repeats: int) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np, c_np, d_np = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(4))
    a, b, c, d = (Tensor(z, requires_grad=True) for z in (a_np, b_np, c_np, d_np))
    cases = [
        ("add", lambda: a_np + b_np, lambda: a + b),
        ("mul", lambda: a_np * b_np, lambda: a * b),
        ("matmul", lambda: a_np @ b_np, lambda: a @ b),
        ("sum", lambda: a_np.sum(), lambda: a.sum()),
        ("exp", lambda: np.exp(a_np), lambda: a.exp()),
        ("getitem", lambda: a_np[2:10, 1:5], lambda: a[2:10, 1:5]),
        ("reshape", lambda: a_np.reshape(8, 32), lambda: a.reshape(8, 32)),
    ]

    def numpy_graph():
        # loss = sum(exp(a @ b + c) * d), forward and manual backward
        h = a_np @ b_np
        h += c_np
        e = np.exp(h)
        _ = (e * d_np).sum()
        ge = d_np * e            # dloss/dh
        return ge @ b_np.T, a_np.T @ ge, ge, e

    def engine_graph():
        for t in (a, b, c, d):
            t.grad = None
        loss = ((a @ b + c).exp() * d).sum()
        loss.backward()

    cases.append(("graph fwd+bwd (5 ops)", numpy_graph, engine_graph))
    print("\n## Per-op overhead on (16, 16) float32 (engine records the graph)\n")
    print(f"| {'op':<22} | {'NumPy us':>9} | {'engine us':>9} | {'overhead us':>11} | {'ratio':>6} |")
    print(f"|{'-' * 24}|{'-' * 11}|{'-' * 11}|{'-' * 13}|{'-' * 8}|")
    for name, np_fn, eng_fn in cases:
        n = 2000 if "graph" not in name else 500
        t_np = _per_call_us(np_fn, n, repeats)
        t_eng = _per_call_us(eng_fn, n, repeats)
        print(f"| {name:<22} | {t_np:>9.2f} | {t_eng:>9.2f} | {t_eng - t_np:>11.2f} | {t_eng / t_np:>6.1f} |")


# ---- part 2: one transformer block ---------------------------------------------------------
def engine_block(x: Tensor, P: dict, n_head: int) -> Tensor:
    """The block of _numpy_block.forward_backward, written with the engine's ops as the GPT's
    layers call them (linear, attention, the fused GELU MLP: nn.Linear, nn.MLP)."""
    B, T, C = x.shape
    N, hs = B * T, C // n_head
    x2 = x.reshape(N, C)
    h1 = ops.layer_norm(x2, P["ln1_w"], P["ln1_b"])
    qkv = ops.linear(h1, P["attn_w"], P["attn_b"])                # (N, 3C)
    q, k, v = (t.reshape(B, T, n_head, hs).transpose(1, 2)       # (B, H, T, hs) each
               for t in ops.split(qkv, C, axis=1))
    y = ops.scaled_dot_product_attention(q, k, v, causal=True)   # (B, H, T, hs)
    y2 = y.transpose(1, 2).reshape(N, C)                          # (N, C)
    x1 = x2 + ops.linear(y2, P["proj_w"], P["proj_b"])
    h2 = ops.layer_norm(x1, P["ln2_w"], P["ln2_b"])
    out = x1 + gelu_mlp(h2, P["fc_w"], P["fc_b"], P["fc2_w"], P["fc2_b"])
    return out.reshape(B, T, C)


def _engine_step(x_np, params_np, dout, n_head):
    x = Tensor(x_np, requires_grad=True)
    P = {k: Tensor(v, requires_grad=True) for k, v in params_np.items()}
    out = engine_block(x, P, n_head)
    out.backward(dout)
    grads = {k: t.grad for k, t in P.items()}
    grads["x"] = x.grad
    return out.data, grads


def _check_same(out_e, grads_e, out_f, grads_f, rtol: float) -> None:
    def close(a, b, what):
        scale = float(np.abs(b).max()) or 1.0
        err = float(np.abs(a - b).max())
        if not err <= rtol * scale:
            raise AssertionError(f"engine and NumPy floor differ on {what}: max abs error {err:.3g} "
                                 f"(scale {scale:.3g}, rtol {rtol})")

    close(out_e, out_f, "the output")
    for name in grads_f:
        close(grads_e[name], grads_f[name], f"grad of {name}")


def _matmul_shapes(B, T, C, H):
    """(batch, M, K, N) of every matmul in the block's forward and backward."""
    N, hs, F = B * T, C // H, 4 * C
    shapes = []
    for k_in, n_out in ((C, 3 * C), (C, C), (C, F), (F, C)):
        shapes += [(1, N, k_in, n_out), (1, N, n_out, k_in), (1, k_in, N, n_out)]
    for _ in range(2):  # q k^T and p v, each forward plus two backward products
        shapes += [(B * H, T, hs, T), (B * H, T, T, hs), (B * H, T, T, hs)]
    return shapes


def numpy_matmul_gflops(B, T, C, H, repeats) -> float:
    rng = np.random.default_rng(1)
    total_flops, total_s = 0, 0.0
    for batch, m, k, n in _matmul_shapes(B, T, C, H):
        shape_a = (m, k) if batch == 1 else (batch, m, k)
        shape_b = (k, n) if batch == 1 else (batch, k, n)
        a = rng.standard_normal(shape_a, dtype=np.float32)
        b = rng.standard_normal(shape_b, dtype=np.float32)
        np.matmul(a, b)
        t = _median_ms(lambda: np.matmul(a, b), repeats) / 1e3
        total_flops += 2 * batch * m * n * k
        total_s += t
    return total_flops / total_s / 1e9


def _check_both(x_np, params, dout, H) -> None:
    """Engine and floor agree: float64 on two entries (tight), then the float32 run that is timed."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    small = slice(0, 2)
    o_e, g_e = _engine_step(x_np[small].astype(np.float64), p64, dout[small].astype(np.float64), H)
    o_f, g_f = floor.forward_backward(x_np[small].astype(np.float64), p64, dout[small].astype(np.float64), H)
    _check_same(o_e, g_e, o_f, g_f, rtol=1e-9)
    o_e, g_e = _engine_step(x_np, params, dout, H)
    o_f, g_f = floor.forward_backward(x_np, params, dout, H)
    assert o_e.dtype == np.float32 and all(g.dtype == np.float32 for g in g_e.values()), "float32 was upcast"
    _check_same(o_e, g_e, o_f, g_f, rtol=2e-3)


def _on_threads(threads: int | None):
    """(floor_fn, engine_fn) wrappers: with `threads`, the floor runs on that many OpenBLAS
    threads (NumPy's own parallelism) and the engine on autograd.parallel's pool of that many
    (OpenBLAS one per thread); without, both as the process started (BLAS's own default)."""
    if threads is None:
        return (lambda fn: fn), (lambda fn: fn)
    from autograd import parallel

    def floor_side(fn):
        def run(*a):
            parallel.set_blas_threads(threads)
            return fn(*a)
        return run

    def engine_side(fn):
        def run(*a):
            parallel.set_threads(threads)   # the pool, and OpenBLAS back to one thread
            return fn(*a)
        return run

    return floor_side, engine_side


def bench_block(B, T, C, H, repeats, profile: bool, threads: int | None = None) -> None:
    floor_side, engine_side = _on_threads(threads)
    floor_fb, engine_step = floor_side(floor.forward_backward), engine_side(_engine_step)
    rng = np.random.default_rng(0)
    params = floor.init_params(C, rng)
    x_np = rng.standard_normal((B, T, C), dtype=np.float32)
    dout = rng.standard_normal((B, T, C), dtype=np.float32)

    _check_both(x_np, params, dout, H)

    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            _engine_step(x_np, params, dout, H)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)

    # Timing: interleave the two so that machine noise hits both alike.
    t_eng, t_np, cpu_eng, cpu_np = [], [], [], []
    for _ in range(repeats):
        for fn, wall, cpu in ((lambda: floor_fb(x_np, params, dout, H), t_np, cpu_np),
                              (lambda: engine_step(x_np, params, dout, H), t_eng, cpu_eng)):
            gc.collect()
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall.append((time.perf_counter() - w0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
    ms_eng, ms_np = statistics.median(t_eng), statistics.median(t_np)
    cpu_ms = {"floor": statistics.median(cpu_np), "engine": statistics.median(cpu_eng)}
    mem_eng = _peak_bytes(lambda: engine_step(x_np, params, dout, H))
    mem_np = _peak_bytes(lambda: floor_fb(x_np, params, dout, H))
    gflops_np_mm = numpy_matmul_gflops(B, T, C, H, max(3, repeats))
    flops = 3 * floor.matmul_flops(B, T, C, H)

    print(f"\n## Transformer block forward + backward: B={B}, T={T}, d={C}, heads={H}, MLP 4x, float32\n")
    print(f"matmul work per step: {flops / 1e9:.2f} GFLOP (3 x forward); medians of {repeats} runs; "
          f"NumPy {np.__version__}")
    print(f"NumPy float32 matmul alone on the block's shapes: {gflops_np_mm:.0f} GFLOP/s\n")
    print(f"| {'implementation':<22} | {'ms':>7} | {'CPU ms':>7} | {'GFLOP/s':>7} | {'peak MiB':>8} | "
          f"{'time ratio':>10} | {'CPU ratio':>9} | {'mem ratio':>9} |")
    print(f"|{'-' * 24}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 10}|{'-' * 12}|{'-' * 11}|{'-' * 11}|")
    for name, key, ms, mem in (("NumPy by hand (floor)", "floor", ms_np, mem_np),
                               ("autograd engine", "engine", ms_eng, mem_eng)):
        print(f"| {name:<22} | {ms:>7.1f} | {cpu_ms[key]:>7.1f} | {flops / ms / 1e6:>7.0f} | {mem / 2**20:>8.1f} | "
              f"{ms / ms_np:>10.2f} | {cpu_ms[key] / cpu_ms['floor']:>9.2f} | {mem / mem_np:>9.2f} |")
    print(f"\ntargets: time ratio <= 1.25, >= 120 GFLOP/s, memory ratio <= 1.5 "
          f"(all runs, ms: engine {sorted(round(t, 1) for t in t_eng)}, floor {sorted(round(t, 1) for t in t_np)})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("all", "overhead", "block"), default="all")
    ap.add_argument("--repeats", type=int, default=5, help="runs per measurement (median is printed)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the engine block step")
    ap.add_argument("--threads", type=int, default=None,
                    help="the floor on N OpenBLAS threads, the engine on autograd.parallel's pool of N")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="BLAS threads (default: the library's own choice, usually one per core)")
    args = ap.parse_args(argv)
    if args.dim % args.heads:
        ap.error(f"--dim {args.dim} is not divisible by --heads {args.heads}")
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    print(f"autograd benchmark: python {sys.version.split()[0]}, numpy {np.__version__}, {cores} cores, "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}, load average {load:.1f}")
    if load > 0.75 * cores:
        print(f"WARNING: the machine is busy (load {load:.1f} on {cores} cores): wall-clock numbers are "
              "unreliable; the CPU-time column and the ratios are the better guide")
    if args.part in ("all", "overhead"):
        bench_overhead(args.repeats)
    if args.part in ("all", "block"):
        bench_block(args.batch, args.seq, args.dim, args.heads, args.repeats, args.profile, args.threads)


if __name__ == "__main__":
    main()
