"""The peak FLOP/s of this machine, for MFU (the FLOPs of a step: gpt.model.report.flops_per_token).

MFU = achieved FLOP/s / peak FLOP/s. The peak is measured here with a float32 matmul at
start-up (the best of a few runs), or given by the user; never a hard-coded GPU number. On the CPU
the product is the pool's (autograd.parallel.matmul, on the threads a training step uses): NumPy's
own would run on OpenBLAS's single thread there and report an MFU above 100%.
"""
from __future__ import annotations

import time

import numpy as np


def measure_peak_flops(device: str = "cpu", n: int | None = None, repeats: int = 5) -> float:
    """Best float32 FLOP/s of an n x n matmul on `device` (about a second at most)."""
    from autograd import backend, parallel

    xp = backend.module_for_device(device)
    if n is None:
        n = 1024 if xp is np else 8192
    if xp is np:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
    else:
        a = xp.random.standard_normal((n, n), dtype=xp.float32)
        b = xp.random.standard_normal((n, n), dtype=xp.float32)
    out = xp.empty((n, n), dtype=xp.float32)
    parallel.matmul(a, b, out=out)  # warm-up (thread pools, cuBLAS handles); CuPy's goes to cuBLAS
    best = float("inf")
    for _ in range(repeats):
        if xp is not np:
            xp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        parallel.matmul(a, b, out=out)
        if xp is not np:
            xp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best
