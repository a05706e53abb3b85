"""Threads on the CPU: a small pool that splits NumPy work into row chunks, and OpenBLAS's threads.

NumPy releases the GIL inside a ufunc or reduction on large arrays, so an elementwise kernel, a
row-wise softmax or norm, or the AdamW update, cut into chunks along the leading axis, runs on
every core from plain Python threads. `for_chunks(fn, n)` calls fn(lo, hi) over chunks of the
rows 0..n: the caller's thread and the pool's threads take the next chunk as they come free, so
a thread slowed by another process on its core takes fewer chunks instead of holding up the
rest (an even split would wait for the slowest thread). Chunks are small enough (~64 Ki
elements, a few hundred KiB) that every pass of a multi-pass kernel over one chunk stays in
the core's cache. How work is cut depends only on the arrays' shapes, never on the number of
threads (one thread runs the same chunks in turn), so every result is the same bits on one
thread and on many: a run resumed under another load continues exactly. Work whose result is
read only after `drain()` (a leaf's weight gradients during backward) can be `defer`red to the
workers, which take it between the chunks of later ops (autograd/pool.py).

`set_threads(n)` sets both the pool's size and OpenBLAS's threads (the BLAS NumPy loaded, found
through /proc/self/maps and set the way threadpoolctl does; elsewhere only the pool changes).
Until someone calls it, the count is `gpt train`'s choice (autograd/threads.py: the free cores,
or GPT_THREADS / OPENBLAS_NUM_THREADS / OMP_NUM_THREADS; a rank under an MPI launcher takes its
share of them), made at the first op that would use the pool, since measuring the free cores
takes half a second: importing the package, small ops and `set_threads` never pay it. A forked
process starts without its parent's pool (threads are not copied by a fork) and chooses again at
its first such op, unless the count was set explicitly, which it keeps.
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading
from typing import Callable

import numpy as np

from autograd.pool import Pool
from autograd.sums import column_sums

CHUNK_ELEMENTS = 1 << 16   # elements per chunk: a multi-pass kernel's chunk stays in L2
MIN_PARALLEL = 1 << 17     # below this many elements the pool's wake-up costs more than it saves

_threads: int | None = None   # None: not chosen yet (chosen at the first op that would use the pool)
_set_by_user: int | None = None   # what set_threads was given, which a forked child keeps
_pool: Pool | None = None
_lock = threading.Lock()          # guards _threads and _pool
_choosing = threading.Lock()      # one thread measures the free cores, the others wait for it
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                 "openblas_set_num_threads64_", "openblas_set_num_threads")


def cpu_count() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _openblas():
    """(set, get) of the OpenBLAS NumPy has loaded, or None (another BLAS, or no /proc)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            if hasattr(lib, name):
                setter = getattr(lib, name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter = getattr(lib, name.replace("set_num", "get_num"), None)
                if getter is not None:
                    getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


def blas_threads() -> int | None:
    """OpenBLAS's thread count now, or None where it cannot be read."""
    found = _openblas()
    if found is None or found[1] is None:
        return None
    return int(found[1]())


def set_blas_threads(n: int) -> bool:
    """Make OpenBLAS use n threads from now on; False where NumPy's BLAS is not reachable."""
    found = _openblas()
    if found is None:
        return False
    found[0](max(1, int(n)))
    return True


def threads() -> int:
    """Threads the pool's work runs on (the caller's included); chooses them if nobody has."""
    if _threads is None:
        _choose()
    return _threads


def set_threads(n: int | None, blas: int | None = None) -> None:
    """Run chunked work, matrix products included, on n threads (the caller's plus n - 1 pool
    threads), and OpenBLAS on `blas` threads (default 1: the pool splits the products itself,
    which a busy core cannot stall the way OpenBLAS's even split is stalled). n=None: back to
    the default, chosen again at the next op that would use the pool."""
    global _set_by_user
    _set_by_user = None if n is None else max(1, int(n))
    if n is None:
        _resize(None)
        return
    _resize(_set_by_user)
    set_blas_threads(1 if blas is None else blas)


def _resize(n: int | None, only_if_unchosen: bool = False) -> None:
    global _threads, _pool
    with _lock:
        if only_if_unchosen and _threads is not None:
            return                     # set_threads ran while the free cores were measured
        if n != _threads:
            old, _pool = _pool, (Pool(n - 1) if n is not None and n > 1 else None)
            _threads = n
            if old is not None:
                old.close()


def _choose() -> None:
    """Set the default thread count (see the module docstring) unless someone set one meanwhile."""
    from autograd.threads import choose_threads, launched_local_ranks

    with _choosing:
        if _threads is not None:
            return
        n = _set_by_user if _set_by_user is not None else choose_threads(ranks=launched_local_ranks())
        _resize(n, only_if_unchosen=True)
        if _set_by_user is None:
            set_blas_threads(1)


def _pool_for_work() -> Pool | None:
    """The pool for work large enough to split (None: one thread), the count chosen first if
    nobody has chosen it."""
    if _threads is None:
        _choose()
    return _pool


def _after_fork_in_child() -> None:
    # The pool's threads are not in the child, and a lock may have been held by one of them.
    global _threads, _pool, _lock, _choosing
    _lock, _choosing = threading.Lock(), threading.Lock()
    _threads, _pool = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def chunk_rows(n_rows: int, row_elements: int) -> int:
    """Rows per chunk for rows of `row_elements` elements (at least 1)."""
    return max(1, CHUNK_ELEMENTS // max(1, row_elements))


def _whole(n_rows: int, row_elements: int) -> bool:
    """Whether for_chunks calls fn once over all the rows (too little work for the pool)."""
    return n_rows < 2 or n_rows * row_elements < MIN_PARALLEL


def chunk_bounds(n_rows: int, row_elements: int = 1, step: int | None = None) -> list:
    """The row ranges (lo, hi) that for_chunks(fn, n_rows, row_elements, step) calls fn with."""
    if _whole(n_rows, row_elements):
        return [(0, n_rows)]
    step = step or chunk_rows(n_rows, row_elements)
    return [(lo, min(n_rows, lo + step)) for lo in range(0, n_rows, step)]


def for_chunks(fn: Callable[[int, int], None], n_rows: int, row_elements: int = 1,
               step: int | None = None) -> None:
    """Call fn(lo, hi) for consecutive row ranges covering 0..n_rows, on the pool's threads when
    the work is large (n_rows * row_elements >= MIN_PARALLEL), else once as fn(0, n_rows).
    Ranges hold `step` rows (default: about CHUNK_ELEMENTS elements). fn must write disjoint
    outputs per range; its exceptions are raised here."""
    if _whole(n_rows, row_elements):
        fn(0, n_rows)
        return
    pool = _pool_for_work()
    bounds = chunk_bounds(n_rows, row_elements, step)
    if pool is None:  # the same ranges in order: results never depend on the thread count
        for lo, hi in bounds:
            fn(lo, hi)
        return
    take, finished = itertools.count(), itertools.count(1)   # next() on a count is atomic under the GIL
    n = len(bounds)
    # held until the last chunk is finished: a bare lock, which its finisher releases, costs a
    # fraction of an Event's Python-level set() and wait() (a small op's whole hand-off counts)
    done, errors = threading.Lock(), []
    done.acquire()

    def worker():
        for i in take:
            if i >= n:
                return
            try:
                fn(*bounds[i])
            except BaseException as exc:
                errors.append(exc)
            if next(finished) == n:
                done.release()

    # A worker busy with deferred work joins late or not at all: the caller takes what is left
    # and waits only for chunks a worker has started.
    pool.help(worker, min((_threads or 1) - 1, n - 1))
    worker()
    done.acquire()
    if errors:
        raise errors[0]


def defer(task: Callable[[], None]) -> None:
    """Run task() on a worker while the caller goes on, or now when there is no pool (or the
    thread count is not chosen yet: a small task alone does not choose it); its result must
    not be read before `drain()`."""
    pool = _pool
    if pool is None:
        task()
    else:
        pool.defer(task)


def drain() -> None:
    """Finish every deferred task (helping with those not started); raise the first error."""
    pool = _pool
    if pool is not None and pool.pending():
        pool.drain()


GEMM_MIN_FLOPS = 1 << 26   # smaller products run as one BLAS call (a decode step's never split)
# Larger ones run as this many blocks (whatever the thread count, so that a run on one thread
# and a run on two compute every number alike: exact resume does not depend on the load). Four,
# not eight: thinner blocks cost more than the balance they buy; a step's deferred weight
# gradients are a dozen tasks or more, which still spread across a slowed core.
GEMM_PARTS = 4


def matmul(a, b, out=None):
    """a @ b, split across the pool for NumPy arrays: 2-D products by blocks of the larger output
    side (rows of a, or columns of b), batched ones (equal batch shapes) by blocks of the first
    batch axis. Each block is one single-threaded BLAS call (set_threads leaves OpenBLAS one
    thread when the pool has several), taken from the shared queue, so a core slowed by another
    process takes fewer blocks instead of holding up the product. Other arrays (CuPy), small
    products and broadcasting shapes go to the backend's matmul unchanged."""
    # first, before the type checks: most products (a decode step's all) are small, and a small
    # product of NumPy or CuPy arrays is the operator either way. The operator, not np.matmul's
    # keyword call: the code after a decode step's weight product runs cold, where the keyword
    # path's extra work shows in the step's time.
    small = 2 * a.size * b.shape[-1] < GEMM_MIN_FLOPS
    if small and out is None:
        return a @ b
    if not (type(a) is np.ndarray and type(b) is np.ndarray):
        return a @ b if out is None else _xp_matmul(a, b, out)
    if small:
        return np.matmul(a, b, out=out)
    plan = _gemm_blocks(a, b, out)
    if plan is None:
        return np.matmul(a, b, out=out)
    out, block, n, step = plan
    for_chunks(block, n, 1 << 30, step)
    return out


def deferred_matmul(a, b):
    """a @ b (NumPy, 2-D or equal batch shapes) into a new array that is filled by deferred tasks
    (see `defer`): read it only after `drain()`. The same blocks, so the same bits, as `matmul`."""
    plan = None if 2 * a.size * b.shape[-1] < GEMM_MIN_FLOPS else _gemm_blocks(a, b, None)
    if plan is None:
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                       dtype=np.result_type(a.dtype, b.dtype))
        defer(lambda: np.matmul(a, b, out=out))
        return out
    out, block, n, step = plan
    _pool_for_work()             # a product this large chooses the thread count, as matmul's does
    for lo in range(0, n, step):
        defer(functools.partial(block, lo, min(n, lo + step)))
    return out


def deferred_row_sum(a2):
    """a2 (rows, n) summed over its rows into a new (n,) array that a deferred task fills (read it
    only after `drain()`); the same reduction as column_sums(a2)."""
    out = np.empty(a2.shape[1:], dtype=a2.dtype)
    defer(lambda: column_sums(a2, out))
    return out


def _gemm_blocks(a, b, out):
    """(out, block(lo, hi), n, step): how `matmul` cuts a large product, or None where it does
    not (1-D operands, broadcasting batch shapes, a batch of one)."""
    if (a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]
            or a.shape[-1] != b.shape[-2] or (a.ndim > 2 and a.shape[0] < 2)):
        return None
    M, N = a.shape[-2], b.shape[-1]
    if out is None:
        out = np.empty(a.shape[:-1] + (N,), dtype=np.result_type(a.dtype, b.dtype))
    parts = GEMM_PARTS
    if a.ndim > 2:                       # (n, ..., M, K) @ (n, ..., K, N): blocks of the first axis
        n = a.shape[0]
        return out, lambda lo, hi: np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi]), n, max(1, -(-n // parts))
    if M >= N:                           # blocks of rows
        return out, lambda lo, hi: np.matmul(a[lo:hi], b, out=out[lo:hi]), M, max(32, -(-M // parts))
    return out, lambda lo, hi: np.matmul(a, b[:, lo:hi], out=out[:, lo:hi]), N, max(32, -(-N // parts))


def _xp_matmul(a, b, out):
    from autograd.backend import xp_of

    return xp_of(a).matmul(a, b, out=out)


class CpuMeter:
    """CPU time of this process and of everything else on the machine between start() and
    stop(), from /proc (Linux); elsewhere the readings are None."""

    def start(self) -> "CpuMeter":
        self._t0, self._j0 = _now(), _jiffies()
        return self

    def stop(self, exclude: tuple = ()) -> dict:
        """{"self": cores this process used, "others": cores every other process used (minus
        the pids in `exclude`, reported as "excluded"), "seconds": wall time}."""
        t1, j1 = _now(), _jiffies(exclude)
        dt = max(t1 - self._t0, 1e-9)
        if self._j0 is None or j1 is None:
            return {"self": None, "others": None, "excluded": None, "seconds": dt}
        j0 = self._j0
        hz = os.sysconf("SC_CLK_TCK")
        mine, busy = (j1[1] - j0[1]) / hz, (j1[0] - j0[0]) / hz
        excl = sum(j1[2].values()) / hz - sum(j0[2].get(p, 0) for p in j1[2]) / hz
        return {"self": mine / dt, "others": max(0.0, busy - mine - excl) / dt,
                "excluded": excl / dt, "seconds": dt}


def _now() -> float:
    import time

    return time.perf_counter()


def _pid_jiffies(pid) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime (all threads)


def _jiffies(exclude: tuple = ()):
    """(busy jiffies of all CPUs, this process's jiffies, {pid: jiffies} of `exclude`) or None."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(v) for v in f.readline().split()[1:]]
        busy = sum(cpu[:8]) - cpu[3] - cpu[4]   # all but idle and iowait
        excl = {}
        for pid in exclude:
            try:
                excl[pid] = _pid_jiffies(pid)
            except OSError:
                pass
        return busy, _pid_jiffies("self"), excl
    except (OSError, ValueError, IndexError):
        return None


def other_cpu_use(seconds: float = 0.3) -> float | None:
    """Cores that other processes kept busy over the next `seconds` (sleeps that long), or None."""
    import time

    meter = CpuMeter().start()
    time.sleep(seconds)
    return meter.stop()["others"]


def map_rows(fn: Callable, *arrays, chunk_elements: int | None = None) -> None:
    """fn(*blocks) over blocks of rows of the arrays, each seen as (rows, its last axis): all must
    have the same number of rows (an (..., C) array and its (..., 1) row statistics, say). On the
    pool when the arrays are large C-contiguous NumPy arrays, else one call fn(*arrays). Blocks
    of about chunk_elements elements of the first array (default CHUNK_ELEMENTS)."""
    if arrays[0].size < MIN_PARALLEL or not all(
            type(a) is np.ndarray and a.ndim > 0 and a.flags.c_contiguous for a in arrays):
        fn(*arrays)  # what for_chunks would do with work this small, without the row views
        return
    views = [a.reshape(-1, a.shape[-1]) for a in arrays]
    n, width = views[0].shape
    step = max(1, chunk_elements // max(1, width)) if chunk_elements else None
    for_chunks(lambda lo, hi: fn(*[v[lo:hi] for v in views]), n, width, step)


def sum_rows(fn: Callable, n_rows: int, row_elements: int):
    """The sum over row blocks lo..hi of fn(lo, hi) (an array), blocks run on the pool and added
    in row order (the same result whichever thread ran which block)."""
    parts: dict = {}

    def run(lo, hi):
        parts[lo] = fn(lo, hi)

    for_chunks(run, n_rows, row_elements)
    keys = sorted(parts)
    total = parts[keys[0]]
    for k in keys[1:]:
        total = total + parts[k]
    return total


def side_by_side(*tasks: Callable) -> list:
    """[task() for task in tasks], the tasks run on the pool's threads at once (in order without
    a pool): for a few independent pieces of work that release the GIL, such as the two BLAS
    products of a matrix product's backward."""
    results: list = [None] * len(tasks)

    def run(lo, hi):
        for i in range(lo, hi):
            results[i] = tasks[i]()

    for_chunks(run, len(tasks), MIN_PARALLEL, step=1)
    return results
