"""Optimizers against hand-computed updates, clipping, schedules, and exact resume."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from nn import Parameter
from nn.optim import SGD, AdamW, clip_grad_norm, constant_with_warmup, cosine_schedule, linear_warmup_decay, \
    warmup_cosine


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(rng.standard_normal((3, 2))), Parameter(rng.standard_normal(4))]


def fake_grad(p_array, step):
    """A deterministic gradient that depends on the parameter and the step."""
    return np.sin(3.0 * p_array + step) + 0.1 * step


def run(opt, params, steps, start=0):
    for s in range(start, start + steps):
        for p in params:
            p.grad = fake_grad(p.data, s)
        opt.step()


@pytest.mark.parametrize("momentum,nesterov,wd,damp", [
    (0.0, False, 0.0, 0.0), (0.9, False, 0.0, 0.0), (0.9, True, 0.0, 0.0),
    (0.9, True, 0.05, 0.0), (0.5, False, 0.1, 0.2), (0.0, False, 0.1, 0.0),
])
def test_sgd_matches_hand_computed_updates_over_several_steps(momentum, nesterov, wd, damp):
    params = make_params()
    ref = [p.data.copy() for p in params]
    bufs = [None] * len(ref)
    opt = SGD(params, lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd, dampening=damp)
    for step in range(5):
        run(opt, params, 1, start=step)
        for i, w in enumerate(ref):
            d = fake_grad(w, step) + wd * w
            if momentum:
                bufs[i] = d.copy() if bufs[i] is None else momentum * bufs[i] + (1 - damp) * d
                d = d + momentum * bufs[i] if nesterov else bufs[i]
            ref[i] = w - 0.1 * d
        for p, w in zip(params, ref):
            np.testing.assert_allclose(p.data, w, rtol=1e-13, atol=1e-14)


def test_adamw_matches_hand_computed_updates_with_groups():
    decay, no_decay = make_params(0)
    opt = AdamW([{"params": [decay], "weight_decay": 0.1}, {"params": [no_decay], "weight_decay": 0.0}],
                lr=0.01, betas=(0.8, 0.95), eps=1e-6)
    refs = {id(decay): (decay.data.copy(), 0.1), id(no_decay): (no_decay.data.copy(), 0.0)}
    moments = {k: (0.0, 0.0) for k in refs}
    for step in range(6):
        run(opt, [decay, no_decay], 1, start=step)
        t = step + 1
        for p in (decay, no_decay):
            w, wd = refs[id(p)]
            m, v = moments[id(p)]
            g = fake_grad(w, step)
            w = w * (1 - 0.01 * wd)
            m = 0.8 * m + 0.2 * g
            v = 0.95 * v + 0.05 * g * g
            m_hat, v_hat = m / (1 - 0.8 ** t), v / (1 - 0.95 ** t)
            w = w - 0.01 * m_hat / (np.sqrt(v_hat) + 1e-6)
            refs[id(p)], moments[id(p)] = (w, wd), (m, v)
            np.testing.assert_allclose(p.data, w, rtol=1e-12, atol=1e-13)


def test_first_adam_step_moves_each_weight_by_about_lr():
    (p,) = make_params()[:1]
    opt = AdamW([p], lr=0.001, weight_decay=0.0)
    before = p.data.copy()
    run(opt, [p], 1)
    np.testing.assert_allclose(np.abs(p.data - before), 0.001, rtol=1e-4)


def test_updates_are_in_place_and_record_no_graph():
    params = make_params()
    arrays = [p.data for p in params]
    for opt in (SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1), AdamW(params, lr=0.1)):
        run(opt, params, 3)
        assert all(p.data is a for p, a in zip(params, arrays))
        assert all(p.is_leaf and p.requires_grad for p in params)


def test_gradient_is_not_modified_by_a_step():
    params = make_params()
    for opt in (SGD(params, lr=0.1, momentum=0.9, nesterov=True), SGD(params, lr=0.1, momentum=0.9),
                AdamW(params, lr=0.1)):
        for p in params:
            p.grad = fake_grad(p.data, 0)
        grads = [p.grad.copy() for p in params]
        opt.step()
        opt.step()
        for p, g in zip(params, grads):
            np.testing.assert_array_equal(p.grad, g)


def test_parameters_without_gradients_are_skipped_and_zero_grad_clears():
    params = make_params()
    before = params[1].data.copy()
    opt = AdamW(params, lr=0.1)
    params[0].grad = np.ones_like(params[0].data)
    opt.step()
    np.testing.assert_array_equal(params[1].data, before)
    opt.zero_grad()
    assert params[0].grad is None


@pytest.mark.parametrize("make", [
    lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
    lambda ps: AdamW([{"params": ps[:1]}, {"params": ps[1:], "weight_decay": 0.0}], lr=0.01),
])
def test_state_dict_round_trip_resumes_bit_for_bit(make):
    a = make_params()
    opt_a = make(a)
    run(opt_a, a, 3)
    saved_params = [p.data.copy() for p in a]
    saved_state = opt_a.state_dict()
    saved_state = {"state": {i: {k: (v.copy() if hasattr(v, "copy") else v) for k, v in s.items()}
                             for i, s in saved_state["state"].items()},
                   "param_groups": saved_state["param_groups"]}
    run(opt_a, a, 4, start=3)

    b = make_params(seed=99)
    for p, w in zip(b, saved_params):
        p.data[...] = w
    opt_b = make(b)
    opt_b.load_state_dict(saved_state)
    run(opt_b, b, 4, start=3)
    for pa, pb in zip(a, b):
        assert np.array_equal(pa.data, pb.data)


def test_load_state_dict_restores_learning_rates_and_checks_shapes():
    a = make_params()
    opt = AdamW(a, lr=0.01)
    run(opt, a, 1)
    sd = opt.state_dict()
    sd["param_groups"][0]["lr"] = 0.5
    fresh = AdamW(make_params(), lr=0.01)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["lr"] == 0.5 and fresh.param_groups[0]["betas"] == (0.9, 0.999)
    other = AdamW([Parameter(np.zeros((2, 2))), Parameter(np.zeros(4))])
    with pytest.raises(ValueError, match=r"state 'exp_avg' of parameter 0: shape \(3, 2\) vs parameter \(2, 2\)"):
        other.load_state_dict(sd)
    with pytest.raises(ValueError, match="1 parameter groups"):
        AdamW([{"params": a[:1]}, {"params": a[1:]}]).load_state_dict(sd)


def test_load_state_dict_refuses_a_state_missing_a_moment_before_any_step():
    a = make_params() + [Parameter(np.ones(5))]
    opt = AdamW(a, lr=0.01)
    run(opt, a, 1)
    sd = opt.state_dict()
    del sd["state"][1]["exp_avg"]
    fresh = AdamW(make_params() + [Parameter(np.ones(5))], lr=0.01)
    with pytest.raises(ValueError, match=r"state of parameter 1 has no 'exp_avg' \(each needs step, exp_avg, "
                                         r"exp_avg_sq\)"):
        fresh.load_state_dict(sd)
    assert fresh.state == {}  # nothing half-loaded


def test_bad_options_and_params_are_clear_errors():
    p = make_params()
    with pytest.raises(ValueError, match="betas"):
        AdamW(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="nesterov needs momentum"):
        SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="more than one group"):
        AdamW([{"params": p}, {"params": p[:1]}])
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['momentum'\]"):
        AdamW([{"params": p, "momentum": 0.9}])
    with pytest.raises(TypeError, match="single Tensor"):
        SGD(p[0], lr=0.1)


def test_clip_grad_norm_scales_exactly_and_returns_the_norm_before():
    params = make_params()
    grads = [np.full(p.shape, 2.0) for p in params]
    for p, g in zip(params, grads):
        p.grad = g.copy()
    total = math.sqrt(sum((g ** 2).sum() for g in grads))  # sqrt(10 * 4)
    assert clip_grad_norm(params, 1.0) == pytest.approx(total, rel=1e-15)
    scale = 1.0 / (total + 1e-6)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad, g * scale, rtol=1e-15)
    after = math.sqrt(sum((p.grad ** 2).sum() for p in params))
    assert after == pytest.approx(1.0, rel=1e-6)
    # under the limit: untouched
    assert clip_grad_norm(params, 5.0) == pytest.approx(after)
    np.testing.assert_allclose(params[0].grad, grads[0] * scale, rtol=1e-15)


def test_clip_grad_norm_leaves_non_finite_gradients_alone_and_float16_works():
    p = Parameter(np.ones(3, np.float16))
    p.grad = np.array([np.inf, 1, 1], np.float16)
    assert math.isinf(clip_grad_norm([p], 1.0))
    assert p.grad[1] == 1
    p.grad = np.full(3, 100.0, np.float16)  # squares overflow float16; the norm does not
    assert clip_grad_norm([p], 1.0) == pytest.approx(100 * math.sqrt(3), rel=1e-3)


def test_grad_norm_of_float32_gradients_is_the_float64_norm_and_stays_an_array_on_request():
    from nn.optim import grad_norm

    rng = np.random.default_rng(5)
    params = [Parameter(np.zeros(s, np.float32)) for s in [(7, 3), (5,), (4, 2, 2)]]
    for p in params:
        p.grad = rng.standard_normal(p.shape).astype(np.float32)
    expected = math.sqrt(sum((p.grad.astype(np.float64) ** 2).sum() for p in params))
    assert grad_norm(params) == pytest.approx(expected, rel=1e-6)
    on_device = grad_norm(params, to_host=False)
    assert isinstance(on_device, np.ndarray) and on_device.shape == ()
    assert float(on_device) == grad_norm(params)


def test_warmup_cosine_shape():
    kw = dict(warmup=10, total=110, lr_max=1.0, lr_min=0.1)
    assert warmup_cosine(0, **kw) == pytest.approx(0.1)
    assert warmup_cosine(9, **kw) == pytest.approx(1.0)
    assert warmup_cosine(10, **kw) == pytest.approx(1.0)
    assert warmup_cosine(60, **kw) == pytest.approx(0.55)
    assert warmup_cosine(110, **kw) == pytest.approx(0.1) == warmup_cosine(500, **kw)
    lrs = [warmup_cosine(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert cosine_schedule is warmup_cosine
    with pytest.raises(ValueError, match="total=5 must be >= warmup=10"):
        warmup_cosine(0, 10, 5, 1.0)


def test_linear_and_constant_schedules():
    assert linear_warmup_decay(4, 5, 15, 1.0) == pytest.approx(1.0)
    assert linear_warmup_decay(10, 5, 15, 1.0, 0.0) == pytest.approx(0.5)
    assert linear_warmup_decay(20, 5, 15, 1.0, 0.2) == pytest.approx(0.2)
    assert constant_with_warmup(1, 4, 2.0) == pytest.approx(1.0)
    assert constant_with_warmup(1000, 4, 2.0) == 2.0
    assert constant_with_warmup(0, 0, 2.0) == 2.0


def test_weight_decay_groups_skip_biases_norms_and_embeddings():
    import nn
    from nn.optim import weight_decay_groups

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(10, 4)
            self.wpe = nn.LearnedPositions(8, 4)
            self.ln = nn.LayerNorm(4)
            self.fc = nn.Linear(4, 4)
            self.head = nn.Linear(4, 10, bias=False)

    m = M()
    decay, rest = weight_decay_groups(m, 0.1)
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert decay["params"] == [m.fc.weight, m.head.weight]
    assert rest["params"] == [m.wte.weight, m.wpe.weight, m.ln.weight, m.ln.bias, m.fc.bias]
    with_tables = weight_decay_groups(m, 0.1, decay_embeddings=True)[0]["params"]
    assert {id(m.wte.weight), id(m.wpe.weight)} <= {id(p) for p in with_tables}   # tensors: == is elementwise
    AdamW(weight_decay_groups(m, 0.1), lr=1e-3)  # valid groups for the optimizer


@given(lr=st.floats(1e-5, 1.0), b1=st.floats(0.0, 0.99), b2=st.floats(0.5, 0.9999), eps=st.floats(1e-10, 1e-3),
       wd=st.floats(0.0, 0.5), steps=st.integers(1, 5), seed=st.integers(0, 1000))
def test_adamw_matches_the_reference_for_any_hyperparameters(lr, b1, b2, eps, wd, steps, seed):
    (p,) = make_params(seed)[:1]
    opt = AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    w, m, v = p.data.copy(), 0.0, 0.0
    for t in range(1, steps + 1):
        run(opt, [p], 1, start=t - 1)
        g = fake_grad(w, t - 1)
        w = w * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    np.testing.assert_allclose(p.data, w, rtol=1e-10, atol=1e-12)


def test_clipping_without_a_host_read_gives_the_same_gradients():
    """to_host=False keeps the norm and the factor on the gradients' device (no GPU sync)."""
    from nn.optim import clip_grad_norm

    rng = np.random.default_rng(0)
    a = [Parameter(rng.standard_normal((3, 4)).astype(np.float32)) for _ in range(2)]
    b = [Parameter(p.data.copy()) for p in a]
    for p, q in zip(a, b):
        p.grad = rng.standard_normal(p.shape).astype(np.float32) * 5
        q.grad = p.grad.copy()
    host = clip_grad_norm(a, 1.0)
    device = clip_grad_norm(b, 1.0, to_host=False)
    assert isinstance(host, float) and isinstance(device, np.ndarray) and device.ndim == 0
    assert float(device) == pytest.approx(host, rel=1e-12)
    for p, q in zip(a, b):
        np.testing.assert_allclose(p.grad, q.grad, rtol=1e-6)
