"""autograd.parallel: blocks on the thread pool give what one thread gives.

The pool's size thresholds are lowered so that small test arrays are split into many blocks;
every op that runs on the pool is checked against its single-threaded self (which the rest of
the suite checks against composed primitives and finite differences), and the attention and
the norms get their own float64 gradcheck with the pool on.
"""
import numpy as np
import pytest

import autograd
from autograd import Tensor, gradcheck, ops, parallel


@pytest.fixture
def pool(monkeypatch):
    """Tiny blocks; the library's default thread count again afterwards (chosen when next needed)."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    monkeypatch.setattr(parallel, "CHUNK_ELEMENTS", 64)
    yield
    parallel.set_threads(None)


def _on(threads: int, fn):
    parallel.set_threads(threads)
    return fn()


def test_for_chunks_covers_every_row_once(pool):
    parallel.set_threads(2)
    seen = np.zeros(1000, dtype=int)

    def fn(lo, hi):
        seen[lo:hi] += 1

    parallel.for_chunks(fn, 1000, row_elements=4)
    assert (seen == 1).all()


def test_for_chunks_raises_the_blocks_error(pool):
    parallel.set_threads(2)

    def fn(lo, hi):
        if lo > 0:
            raise RuntimeError("block failed")

    with pytest.raises(RuntimeError, match="block failed"):
        parallel.for_chunks(fn, 1000, row_elements=4)


@pytest.mark.parametrize("shapes", [((37, 20), (20, 9)), ((9, 20), (20, 37)), ((5, 3, 11, 8), (5, 3, 8, 13)),
                                    ((20, 37), (37, 20))])
def test_split_matmul_equals_numpy(pool, shapes):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s) for s in shapes)
    parallel.set_threads(2)
    np.testing.assert_allclose(parallel.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(parallel.matmul(a.T.copy().T, b), a @ b, rtol=1e-12, atol=1e-12)


def _step(x, w, b, q_in, targets):
    """A small GPT-like graph: layer norm, attention, GELU MLP, cross-entropy; its loss and grads."""
    X, W, B, Q = (Tensor(a.copy(), requires_grad=True) for a in (x, w, b, q_in))
    h = ops.layer_norm(X, W, B)                                  # (2, 3, 16, 8)
    att = ops.scaled_dot_product_attention(h * Q, h, h, causal=True)
    u = ops.gelu(att @ Q[0, 0, :8] + h)                          # (8, 8) weight: a Linear-like GEMM
    loss = ops.cross_entropy(u.reshape(-1, 8), targets)
    loss.backward()
    return loss.data, X.grad, W.grad, B.grad, Q.grad


def test_a_step_on_the_pool_matches_one_thread(pool):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 16, 8))
    w, b = 1 + 0.1 * rng.standard_normal(8), 0.1 * rng.standard_normal(8)
    q = rng.standard_normal((2, 3, 16, 8))
    t = rng.integers(0, 8, 2 * 3 * 16)
    one = _on(1, lambda: _step(x, w, b, q, t))
    two = _on(2, lambda: _step(x, w, b, q, t))
    for a, c in zip(one, two):
        np.testing.assert_allclose(c, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["attention", "layer_norm", "gelu", "cross_entropy"])
def test_gradcheck_on_the_pool(pool, op):
    parallel.set_threads(2)
    rng = np.random.default_rng(2)
    if op == "attention":
        q, k, v = (Tensor(rng.standard_normal((3, 2, 6, 4)), requires_grad=True) for _ in range(3))
        fn, inputs = (lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=True)), [q, k, v]
    elif op == "layer_norm":
        x = Tensor(rng.standard_normal((5, 7, 6)), requires_grad=True)
        w = Tensor(1 + rng.standard_normal(6), requires_grad=True)
        b = Tensor(rng.standard_normal(6), requires_grad=True)
        fn, inputs = ops.layer_norm, [x, w, b]
    elif op == "gelu":
        fn, inputs = ops.gelu, [Tensor(rng.standard_normal((9, 11)), requires_grad=True)]
    else:
        t = rng.integers(0, 7, 20)
        fn, inputs = (lambda x: ops.cross_entropy(x, t)), [Tensor(rng.standard_normal((20, 7)), requires_grad=True)]
    assert gradcheck(fn, inputs)


def test_adamw_on_the_pool_matches_one_thread(pool):
    from nn import Parameter
    from nn.optim import AdamW

    rng = np.random.default_rng(3)
    start, grads = rng.standard_normal((4, 1024)), [rng.standard_normal((4, 1024)) for _ in range(3)]

    def run(threads):
        parallel.set_threads(threads)
        p = Parameter(start.copy())
        opt = AdamW([p], lr=1e-2, weight_decay=0.1)
        for g in grads:
            p.grad = g.copy()
            opt.step()
        return p.data

    np.testing.assert_array_equal(run(2), run(1))


def test_set_threads_sets_openblas_when_it_is_reachable(pool):
    if parallel.blas_threads() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS reachable through /proc/self/maps")
    parallel.set_threads(2, blas=2)
    assert parallel.blas_threads() == 2
    parallel.set_threads(2)
    assert parallel.blas_threads() == 1


def test_cpu_meter_sees_this_process_working():
    meter = parallel.CpuMeter().start()
    x = np.ones(10_000)
    for _ in range(2000):
        x = np.sqrt(x + 1.0)
    r = meter.stop()
    if r["self"] is None:
        pytest.skip("no /proc here")
    assert r["self"] > 0.05 and r["others"] >= 0.0


def test_autograd_exports_nothing_new_at_top_level():
    assert "parallel" not in autograd.__all__


def _linear_grads(x, w, b, shared: bool):
    """Gradients of linear -> gelu -> linear (the second layer reuses W and B when `shared`)."""
    X, W, B = (Tensor(a.copy(), requires_grad=True) for a in (x, w, b))
    W2, B2 = (W, B) if shared else (Tensor(w.T.copy(), requires_grad=True), Tensor(b[::-1].copy(), requires_grad=True))
    out = ops.linear(ops.gelu(ops.linear(X, W, B)), W2, B2)   # (4, 40, 24)
    (out * out).sum().backward()
    return X.grad, W.grad, B.grad, W2.grad, B2.grad


@pytest.mark.parametrize("shared", [False, True])
def test_deferred_weight_gradients_equal_one_threads_bits(pool, shared):
    rng = np.random.default_rng(4)
    x, w, b = rng.standard_normal((4, 40, 24)), rng.standard_normal((24, 24)), rng.standard_normal(24)
    one = _on(1, lambda: _linear_grads(x, w, b, shared))
    two = _on(2, lambda: _linear_grads(x, w, b, shared))
    for a, c in zip(one, two):
        np.testing.assert_array_equal(c, a)


def test_a_deferred_tasks_error_is_raised_by_drain(pool):
    parallel.set_threads(2)
    done = []

    def fail():
        raise RuntimeError("deferred task failed")

    parallel.defer(fail)
    parallel.defer(lambda: done.append(1))
    with pytest.raises(RuntimeError, match="deferred task failed"):
        parallel.drain()
    assert done == [1]
    parallel.drain()   # the error was reported once


def test_for_chunks_does_not_wait_for_a_worker_busy_with_deferred_work(pool):
    import threading

    parallel.set_threads(2)
    release = threading.Event()
    parallel.defer(lambda: release.wait(5))   # holds the only worker
    seen = np.zeros(1000, dtype=int)

    def fn(lo, hi):
        seen[lo:hi] += 1

    parallel.for_chunks(fn, 1000, row_elements=4)   # the caller takes every chunk itself
    release.set()
    parallel.drain()
    assert (seen == 1).all()


def test_side_by_side_returns_each_tasks_result_in_order(pool):
    import threading

    parallel.set_threads(2)
    started, seen = threading.Barrier(2, timeout=10), []

    def task(i):
        def run():
            started.wait()          # returns only when both tasks run at once, on two threads
            seen.append(threading.get_ident())
            return i * 10
        return run

    assert parallel.side_by_side(task(1), task(2)) == [10, 20]
    assert len(set(seen)) == 2
    parallel.set_threads(1)
    assert parallel.side_by_side(lambda: "a", lambda: "b") == ["a", "b"]


@pytest.mark.parametrize("tied", [False, True])
def test_matmul_gradients_side_by_side_gradcheck(pool, monkeypatch, tied):
    import importlib

    matmul_module = importlib.import_module("autograd.ops.matmul")   # autograd.ops.matmul is the function
    monkeypatch.setattr(matmul_module, "SIDE_BY_SIDE_FLOPS", 1)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 1 << 40)   # each product too small to split
    calls = []
    real = parallel.side_by_side
    monkeypatch.setattr(parallel, "side_by_side", lambda *t: calls.append(len(t)) or real(*t))
    parallel.set_threads(2)
    rng = np.random.default_rng(4)
    a = Tensor(rng.standard_normal((2, 5, 6)), requires_grad=True)
    w = Tensor(rng.standard_normal((7, 6) if tied else (6, 7)), requires_grad=True)
    fn = (lambda a, w: ops.matmul(a, w.T)) if tied else ops.matmul   # tied: an output head's wte.T
    assert gradcheck(fn, [a, w])
    assert calls and set(calls) == {2}


def test_pool_runs_deferred_work_and_exits_on_close():
    import threading

    from autograd.pool import Pool

    pool = Pool(2, name="test-pool")
    results, lock = [], threading.Lock()

    def task(i):
        def run():
            with lock:
                results.append(i)
        return run

    for i in range(50):
        pool.defer(task(i))
    pool.drain()
    assert sorted(results) == list(range(50)) and not pool.pending()
    pool.close()
    for t in pool._threads:
        t.join(timeout=10)
        assert not t.is_alive()


def test_a_waiting_helper_goes_before_deferred_work():
    import threading

    from autograd.pool import Pool

    pool = Pool(1, name="test-pool")
    started, gate, order = threading.Event(), threading.Event(), []
    pool.defer(lambda: (started.set(), gate.wait(10), order.append("first")))   # the worker, busy
    assert started.wait(10)
    pool.defer(lambda: order.append("deferred"))
    pool.help(lambda: order.append("helper"), 1)
    gate.set()
    for _ in range(1000):             # the worker's; drain() would run the queued task itself
        if len(order) == 3:
            break
        threading.Event().wait(0.01)
    pool.close()
    assert order == ["first", "helper", "deferred"]
