"""AdamW's flat update of a group of small host parameters (nn/optim/adamw.py FlatAdamW) gives the
per-parameter update's bits, on one thread and two; its moments stay the per-parameter state
that state_dict saves and load_state_dict restores; groups it cannot take update one by one."""
from __future__ import annotations

import numpy as np
import pytest

from autograd import parallel
from nn import Parameter
from nn.optim import AdamW
from nn.optim.adamw import FlatAdamW

SHAPES = [(7, 5), (5,), (3, 4, 2), (), (40,), (6, 6)]


def _params(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal(s).astype(dtype)) for s in SHAPES]


def _grads(params, step):
    return [(np.sin(3.0 * p.data + step) + 0.1 * step).astype(p.data.dtype) for p in params]


def _train(params, opt, steps, start=0, skip=None):
    for s in range(start, start + steps):
        for i, (p, g) in enumerate(zip(params, _grads(params, s))):
            p.grad = None if (skip is not None and i == skip and s % 2) else g
        opt.step()


def _groups(params):
    return [{"params": params[:4], "weight_decay": 0.1}, {"params": params[4:], "weight_decay": 0.0}]


def _one_by_one(monkeypatch):
    monkeypatch.setattr(FlatAdamW, "takes", classmethod(lambda cls, items: False))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_update_gives_the_per_parameter_bits_on_one_thread_and_two(monkeypatch, dtype):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)      # the runs split across the pool
    results = []
    for threads, flat in ((1, False), (1, True), (2, True)):
        with monkeypatch.context() as m:
            if not flat:
                _one_by_one(m)
            parallel.set_threads(threads)
            try:
                params = _params(dtype)
                opt = AdamW(_groups(params), lr=0.05, betas=(0.8, 0.95), eps=1e-6)
                _train(params, opt, 5)
            finally:
                parallel.set_threads(1)
            assert bool(getattr(opt, "_flat", None)) == flat
            results.append([p.data for p in params] + [opt.state[p]["exp_avg_sq"] for p in params])
    for ref, other in zip(results[0], results[1]):
        np.testing.assert_array_equal(ref, other)
    for ref, other in zip(results[0], results[2]):
        np.testing.assert_array_equal(ref, other)


def test_flat_moments_are_the_saved_state_and_a_restored_state_resumes_bit_for_bit():
    params = _params()
    opt = AdamW(_groups(params), lr=0.05)
    _train(params, opt, 3)
    saved = {k: {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in s.items()}
             for k, s in opt.state_dict()["state"].items()}
    assert saved[0]["exp_avg"].shape == SHAPES[0] and saved[3]["step"] == 3
    snapshot = [p.data.copy() for p in params]
    _train(params, opt, 2, start=3)
    expected = [p.data.copy() for p in params]

    for p, s in zip(params, snapshot):
        p.data[...] = s
    again = AdamW(_groups(params), lr=0.05)
    again.load_state_dict({"state": saved, "param_groups": opt.state_dict()["param_groups"]})
    _train(params, again, 2, start=3)
    for p, e in zip(params, expected):
        np.testing.assert_array_equal(p.data, e)


def test_a_group_whose_parameters_skip_steps_updates_as_one_by_one_does(monkeypatch):
    """A parameter without a gradient every other step: its step count falls behind, and the
    group then updates one by one (FlatAdamW.takes is false), with the same results."""
    runs = []
    for flat in (True, False):
        with monkeypatch.context() as m:
            if not flat:
                _one_by_one(m)
            params = _params()
            opt = AdamW(_groups(params), lr=0.05)
            _train(params, opt, 4, skip=1)
            runs.append([p.data.copy() for p in params])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_only_small_host_groups_of_one_dtype_update_flat():
    items = [(p.data, p.data, {}) for p in _params()]
    assert FlatAdamW.takes(items)
    assert not FlatAdamW.takes(items + [(np.ones(3), np.ones(3), {})])             # float64 among float32
    assert not FlatAdamW.takes([(np.ones(2, np.float16), np.ones(2, np.float16), {})] * 2)
    big = np.zeros(FlatAdamW.FLAT_MAX + 1, np.float32)
    assert not FlatAdamW.takes(items + [(big, big, {})])
    assert not FlatAdamW.takes(items[:1] + [(items[1][0], items[1][1], {"step": 2})])
