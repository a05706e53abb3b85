"""GELU's tanh form, forward: ours (through exp) beside the same passes through NumPy's tanh.

NumPy runs float32 exp in SIMD on AVX2 and AVX-512 machines, but float32 tanh in SIMD only with
AVX-512; on an AVX2 machine tanh costs several times exp. Ours computes (1 + tanh(z)) / 2 as
1 / (1 + e^(-2z)) (autograd/ops/activation.py). Prints, per block shape (rows of an MLP's hidden
activation, as the fused MLP cuts them), the medians of both, and the largest error of each
against the float64 formula: |dy| in units of eps * |x| (y's scale), and in units of eps * |y|
where |y| > 1e-3 |x|.

    python3 benchmarks/bench_gelu.py
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from autograd.ops.activation import _gelu_tanh_forward  # noqa: E402
from bench_bpe_long import load_average, processor  # noqa: E402

K, C = math.sqrt(2 / math.pi), 0.044715


def through_tanh(x, t, y) -> None:
    """The same passes with np.tanh: t = tanh(z), y = 0.5 x (1 + t)."""
    np.multiply(x, x, out=t)
    t *= C * K
    t += K
    t *= x
    np.tanh(t, out=t)
    np.add(t, 1.0, out=y)
    y *= x
    y *= 0.5


def median_us(f, *args, runs: int = 50) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def errors(f, x) -> tuple[float, float]:
    t, y = np.empty_like(x), np.empty_like(x)
    f(x, t, y)
    xe = x.astype(np.float64)
    ye = 0.5 * xe * (1 + np.tanh(K * (xe + C * xe**3)))
    eps = np.finfo(x.dtype).eps
    dy = np.abs(y - ye)
    big = np.abs(ye) > 1e-3 * np.abs(xe)
    return float(np.max(dy / (eps * np.maximum(np.abs(xe), 1e-300)))), float(np.max(dy[big] / (eps * np.abs(ye[big]))))


def main() -> int:
    from numpy._core._multiarray_umath import __cpu_features__ as features

    simd = ", ".join(f"{k} {'yes' if features.get(k) else 'no'}" for k in ("AVX2", "AVX512F", "AVX512_SKX"))
    print(f"{processor()}; NumPy {np.__version__} ({simd}); load average {load_average()}")
    rng = np.random.default_rng(0)
    print("| block (rows x hidden), float32 | ours us | through tanh us | ratio | ours error (eps|x|, eps|y|) "
          "| through tanh error |\n|---|---|---|---|---|---|")
    for rows, hidden in ((384, 512), (256, 1536), (2048, 1536)):
        x = (rng.standard_normal((rows, hidden)) * 3).astype(np.float32)
        t, y = np.empty_like(x), np.empty_like(x)
        ours, theirs = [], []
        for _ in range(3):  # taking turns
            ours.append(median_us(_gelu_tanh_forward, x, t, y))
            theirs.append(median_us(through_tanh, x, t, y))
        a, b = statistics.median(ours), statistics.median(theirs)
        e1, e2 = errors(_gelu_tanh_forward, x), errors(through_tanh, x)
        print(f"| {rows} x {hidden} | {a:.0f} | {b:.0f} | {a / b:.2f}x | {e1[0]:.2f}, {e1[1]:.2f} | {e2[0]:.2f}, {e2[1]:.2f} |")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
