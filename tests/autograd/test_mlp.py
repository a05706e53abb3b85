"""The fused GELU MLP (autograd/ops/mlp.py) against Linear -> GELU -> Linear composed from the
engine's own ops, forward and every gradient, float64; finite differences; one thread's bits on
the pool; nn.MLP takes it only where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import nn
from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import mlp as mlp_op
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows, so that small tests still cut several."""
    monkeypatch.setattr(mlp_op, "MIN_ROWS", 3)
    monkeypatch.setattr(mlp_op, "BLOCK_ELEMENTS", 16)


def _composed(x, w1, b1, w2, b2):
    return ops.linear(ops.gelu(ops.linear(x, w1, b1)), w2, b2)


def _composed_nobias(x, w1, w2):
    return ops.linear(ops.gelu(ops.linear(x, w1)), w2)


def _arrays(shape, C, H, Cout):
    return [RNG.standard_normal(shape + (C,)), RNG.standard_normal((C, H)), RNG.standard_normal(H),
            RNG.standard_normal((H, Cout)), RNG.standard_normal(Cout)]


@pytest.mark.parametrize("shape", [(7,), (2, 5), (3, 4, 2)])
def test_fused_mlp_equals_the_composed_layers(shape):
    assert_same(mlp_op.gelu_mlp, _composed, _arrays(shape, 6, 10, 4))


def test_fused_mlp_without_biases_equals_the_composed_layers():
    x, w1, _, w2, _ = _arrays((4, 3), 5, 8, 5)
    assert_same(lambda x, w1, w2: mlp_op.gelu_mlp(x, w1, None, w2, None), _composed_nobias, [x, w1, w2])


def test_fused_mlp_gradients_of_some_inputs_only():
    assert_same(mlp_op.gelu_mlp, _composed, _arrays((9,), 4, 6, 4), grad_inputs=[1, 4])


def test_fused_mlp_passes_a_finite_difference_check():
    ts = [Tensor(a, requires_grad=True) for a in _arrays((2, 5), 4, 7, 3)]
    assert gradcheck(mlp_op.gelu_mlp, ts)


def test_fused_mlp_on_the_pool_gives_one_threads_bits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    arrays = [a.astype(np.float32) for a in _arrays((6, 11), 8, 16, 8)]
    seed = RNG.standard_normal((6, 11, 8)).astype(np.float32)
    assert_same_bits_on_one_thread_and_two(mlp_op.gelu_mlp, arrays, seed)


def test_nn_mlp_fuses_gelu_only_and_gives_the_layers_result():
    x = Tensor(RNG.standard_normal((2, 3, 8)).astype(np.float32), requires_grad=True)
    fused = nn.MLP(8, 16)
    assert isinstance(fused(x)._node, mlp_op.GeluMLP)
    composed = fused.c_proj(fused.act(fused.c_fc(x)))
    np.testing.assert_allclose(fused(x).data, composed.data, rtol=1e-5, atol=1e-6)
    assert not isinstance(nn.MLP(8, 16, activation="relu")(x)._node, mlp_op.GeluMLP)
    hooked = nn.MLP(8, 16)
    hooked.act.register_forward_hook(lambda m, a, out: out * 2)
    assert not isinstance(hooked(x)._node, mlp_op.GeluMLP)


def _last_backward_check(fn, arrays, saved: tuple, seed):
    """Run fn's op, then a backward with retain_graph and a last one: the saved arrays are left
    alone by the first and the gradients of both are the same bits. Returns the node's arrays
    `saved` as they were after the forward, and the same buffers after the last backward."""
    ts = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    node = out._node
    before = [getattr(node, n).copy() for n in saved]
    buffers = [getattr(node, n) for n in saved]
    out.backward(seed, retain_graph=True)
    for b, n in zip(before, saved):
        np.testing.assert_array_equal(getattr(node, n), b, err_msg=f"{n} changed by a retained backward")
    first = [t.grad.copy() for t in ts]
    for t in ts:
        t.grad = None
    out.backward(seed)
    for i, (t, g) in enumerate(zip(ts, first)):
        np.testing.assert_array_equal(t.grad, g, err_msg=f"gradient of input {i}")
    return before, buffers


def test_fused_mlps_last_backward_writes_h_over_u_and_its_gradient_over_a():
    arrays = [a.astype(np.float32) for a in _arrays((3, 4), 5, 6, 5)]
    seed = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    (u, a), (u_buf, a_buf) = _last_backward_check(mlp_op.gelu_mlp, arrays, ("u", "a"), seed)
    np.testing.assert_array_equal(u_buf, a * u)                  # GELU's output, as the forward made it
    assert not np.array_equal(a_buf, a)


def test_gelu_ops_last_backward_writes_its_gradient_over_its_a():
    x = RNG.standard_normal((40, 7)).astype(np.float32)
    seed = RNG.standard_normal((40, 7)).astype(np.float32)
    _, (a_buf,) = _last_backward_check(lambda t: ops.gelu(t, approximate="tanh"), [x], ("a",), seed)
    ts = Tensor(x, requires_grad=True)
    ops.gelu(ts, approximate="tanh").backward(seed)
    np.testing.assert_array_equal(a_buf, ts.grad)
