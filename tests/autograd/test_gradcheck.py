"""gradcheck itself: it passes correct gradients and catches wrong ones, saying where."""
from __future__ import annotations

import numpy as np
import pytest

from autograd import Function, Tensor, gradcheck


class _WrongSquare(Function):
    """x ** 2 with a backward that is off by a factor at one element."""

    def forward(self, x):
        self.x = x
        return x * x

    def backward(self, g):
        grad = 2 * self.x * g
        grad.reshape(-1)[-1] *= 1.5
        return (grad,)


def test_passes_and_reports_small_errors():
    x = Tensor(np.random.default_rng(0).standard_normal((3, 2)), requires_grad=True)
    report = gradcheck(lambda t: (t * t).tanh(), [x])
    assert report.ok and report.max_abs_error < 1e-8 and report.checked == [0]
    assert "passed" in str(report)


def test_fails_with_the_worst_element_named():
    x = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    with pytest.raises(AssertionError, match=r"FAILED.*max rel error 0.5 at input 0 index \(1, 1\) \(analytic"):
        gradcheck(lambda t: _WrongSquare.apply(t), [x])


def test_only_inputs_requiring_grad_are_checked_and_others_pass_through():
    a = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = Tensor(np.array([3.0, 4.0]))
    report = gradcheck(lambda x, y, scale: x * y * scale, [a, b, 2.0])
    assert report.checked == [0]


def test_float32_inputs_are_checked_in_float64():
    x = Tensor(np.array([0.3, -0.7], dtype=np.float32), requires_grad=True)
    report = gradcheck(lambda t: t.exp(), [x])
    assert report.ok
    assert x.dtype == np.float32 and x.grad is None  # the caller's tensor is untouched


def test_several_outputs_are_all_checked():
    x = Tensor(np.array([0.5, 1.5]), requires_grad=True)
    gradcheck(lambda t: (t.exp(), t * 3), [x])


def test_nan_gradients_fail():
    x = Tensor(np.array([-1.0, 1.0]), requires_grad=True)
    with pytest.raises(AssertionError):
        gradcheck(lambda t: t.sqrt(), [x])


def test_nothing_to_check_is_an_error():
    with pytest.raises(ValueError, match="no input requires a gradient"):
        gradcheck(lambda t: t * 2, [Tensor(np.ones(2))])
