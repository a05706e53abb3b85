"""Dynamic loss scaling and float32 master weights (nn.amp), checked on the CPU with NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import Tensor
from nn import Linear
from nn.amp import DynamicLossScaler, MixedPrecision, configure
from nn.optim import SGD, AdamW


def _param(values, dtype=np.float32):
    from nn import Parameter

    return Parameter(np.asarray(values, dtype=dtype))


def test_overflow_halves_the_scale_and_skips_the_step():
    scaler = DynamicLossScaler(init_scale=1024.0, growth_interval=3)
    p = _param([1.0, 2.0])
    p.grad = np.array([np.inf, 1.0], dtype=np.float32)
    opt = SGD([p], lr=0.1)
    took = scaler.step(opt, [p])
    assert took is False
    assert scaler.scale == 512.0 and scaler.skipped == 1 and scaler.good_steps == 0
    np.testing.assert_array_equal(p.data, [1.0, 2.0])       # parameters untouched
    assert p.grad is None                                     # the bad gradient is dropped


def test_nan_gradient_also_skips():
    scaler = DynamicLossScaler(init_scale=8.0)
    p = _param([1.0])
    p.grad = np.array([np.nan], dtype=np.float32)
    assert scaler.step(SGD([p], lr=1.0), [p]) is False
    assert scaler.scale == 4.0


def test_good_steps_unscale_and_grow_after_the_interval():
    scaler = DynamicLossScaler(init_scale=4.0, growth_interval=3, growth_factor=2.0)
    p = _param([0.0])
    opt = SGD([p], lr=1.0)
    for i in range(3):
        p.grad = np.array([4.0 * 0.5], dtype=np.float32)      # scaled gradient of 0.5
        assert scaler.step(opt, [p]) is True
        assert p.data[0] == pytest.approx(-0.5 * (i + 1))       # the unscaled gradient was used
        assert scaler.scale == (4.0 if i < 2 else 8.0)
    assert scaler.good_steps == 0


def test_overflow_resets_the_growth_count():
    scaler = DynamicLossScaler(init_scale=16.0, growth_interval=2)
    scaler.update(False)
    scaler.update(True)
    scaler.update(False)
    assert scaler.scale == 8.0 and scaler.good_steps == 1


def test_scale_stays_within_bounds():
    scaler = DynamicLossScaler(init_scale=2.0, min_scale=1.0, max_scale=4.0, growth_interval=1)
    for _ in range(5):
        scaler.update(True)
    assert scaler.scale == 1.0
    for _ in range(5):
        scaler.update(False)
    assert scaler.scale == 4.0


def test_backward_seeds_with_the_scale():
    scaler = DynamicLossScaler(init_scale=64.0)
    x = Tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    scaler.backward((x * x).sum())
    np.testing.assert_allclose(x.grad, 64.0 * 2 * np.array([1.0, 2.0]))
    assert not scaler.unscale_([x.grad])
    np.testing.assert_allclose(x.grad, [2.0, 4.0])


def test_state_dict_round_trip_and_bad_state():
    a = DynamicLossScaler(init_scale=256.0)
    a.update(True)
    a.update(False)
    b = DynamicLossScaler()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == {"scale": 128.0, "good_steps": 1, "skipped": 1}
    with pytest.raises(ValueError, match="malformed"):
        b.load_state_dict({"nope": 1})


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="backoff_factor"):
        DynamicLossScaler(backoff_factor=2.0)


def _tiny_model(seed=0):
    autograd.manual_seed(seed)
    return Linear(4, 3)


def test_mixed_precision_keeps_float32_masters_and_float16_model():
    model = _tiny_model()
    ref = {k: v.copy() for k, v in model.state_dict().items()}
    amp = MixedPrecision(model)
    assert all(p.dtype == np.float16 for p in model.parameters())
    assert all(m.dtype == np.float32 for m in amp.masters)
    for (name, _), m in zip(amp.named, amp.masters):
        np.testing.assert_array_equal(m.data, ref[name])        # the masters are exact copies
    sd = amp.state_dict()
    assert all(v.dtype == np.float32 for v in sd.values())


def test_mixed_precision_step_matches_a_float32_step_on_the_same_gradients():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    model16, model32 = _tiny_model(), _tiny_model()
    amp = MixedPrecision(model16)
    opt16 = AdamW(amp.master_groups(list(model16.parameters())), lr=1e-2)
    opt32 = AdamW(list(model32.parameters()), lr=1e-2)
    amp.backward((model16(Tensor(x.astype(np.float16))) ** 2).mean())
    took, norm = amp.step(opt16)
    assert took and np.isfinite(norm)
    ((model32(Tensor(x)) ** 2).mean()).backward()
    opt32.step()
    for m, p32, p16 in zip(amp.masters, model32.parameters(), model16.parameters()):
        np.testing.assert_allclose(m.data, p32.data, atol=2e-3)  # float16 forward, float32 update
        np.testing.assert_array_equal(p16.data, m.data.astype(np.float16))
        assert p16.grad is None


def test_mixed_precision_skips_an_overflowing_step():
    model = _tiny_model()
    amp = MixedPrecision(model)
    opt = SGD(amp.master_groups(list(model.parameters())), lr=0.1)
    before = [m.data.copy() for m in amp.masters]
    for p in model.parameters():
        p.grad = np.full(p.shape, np.inf, dtype=np.float16)
    took, norm = amp.step(opt)
    assert not took and norm == float("inf")
    assert amp.scaler.skipped == 1 and amp.scaler.scale == 2.0 ** 14
    for m, b in zip(amp.masters, before):
        np.testing.assert_array_equal(m.data, b)


def test_mixed_precision_load_state_dict_restores_masters():
    src = _tiny_model(seed=1)
    amp = MixedPrecision(_tiny_model(seed=2))
    amp.load_state_dict(src.state_dict())
    for (name, _), m in zip(amp.named, amp.masters):
        np.testing.assert_array_equal(m.data, src.state_dict()[name])


def test_configure_on_cpu_accepts_only_fp32():
    model = _tiny_model()
    assert configure(model, "fp32", "cpu") is None
    with pytest.raises(ValueError, match="needs a CUDA device"):
        configure(model, "fp16", "cpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        configure(model, "bf16", "cpu")
