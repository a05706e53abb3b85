"""The fused SwiGLU MLP (autograd/ops/swiglu.py) against Linear -> chunk -> silu * up -> Linear
composed from the engine's own ops, forward and every gradient, float64, with and without the
pre-norm and skip; finite differences; saturated gates; one thread's bits on the pool; the GPU
form on the emulated kernels; nn.SwiGLU takes it only where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import nn
from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import mlp as mlp_op
from autograd.ops import swiglu as swiglu_op
from tests.autograd import cuda_emulator
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same
from tests.autograd.test_prenorm import EPS, _norm_ref

RNG = np.random.default_rng(23)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows (the op takes the GELU MLP's block sizes), so small tests cut several."""
    monkeypatch.setattr(mlp_op, "MIN_ROWS", 3)
    monkeypatch.setattr(mlp_op, "BLOCK_ELEMENTS", 16)


def _composed(x, w1, b1, w2, b2):
    gate, up = ops.chunk(ops.linear(x, w1, b1), 2, axis=-1)
    return ops.linear(ops.silu(gate) * up, w2, b2)


def _arrays(shape, C, H, Cout, scale=1.0):
    return [scale * RNG.standard_normal(shape + (C,)), RNG.standard_normal((C, 2 * H)), RNG.standard_normal(2 * H),
            RNG.standard_normal((H, Cout)), RNG.standard_normal(Cout)]


@pytest.mark.parametrize("shape", [(7,), (2, 5), (3, 4, 2)])
def test_fused_swiglu_equals_the_composed_layers(shape):
    assert_same(swiglu_op.swiglu_mlp, _composed, _arrays(shape, 6, 5, 4))


def test_fused_swiglu_without_biases_and_with_some_gradients_only():
    x, w1, _, w2, _ = _arrays((4, 3), 5, 4, 5)
    assert_same(lambda x, w1, w2: swiglu_op.swiglu_mlp(x, w1, None, w2, None),
                lambda x, w1, w2: _composed(x, w1, None, w2, None), [x, w1, w2])
    assert_same(swiglu_op.swiglu_mlp, _composed, _arrays((9,), 4, 3, 4), grad_inputs=[1, 4])


def test_saturated_gates_give_the_composed_result_without_overflow_noise():
    """Gates of +-800: exp overflows in float64 and gives the sigmoid's exact limits, without a
    NaN or a warning that escapes the op."""
    arrays = _arrays((6,), 4, 3, 4, scale=400.0)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert_same(swiglu_op.swiglu_mlp, _composed, arrays, rtol=1e-9)


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_prenorm_sublayer_equals_the_composed_one(centered, residual):
    C = 6
    x, w1, b1, w2, b2 = _arrays((3, 11), C, 5, C)
    nw, nb = 1 + 0.3 * RNG.standard_normal(C), RNG.standard_normal(C)

    def fused(x, nw, nb, w1, b1, w2, b2):
        return swiglu_op.swiglu_mlp(x, w1, b1, w2, b2, norm=(centered, nw, nb if centered else None, EPS),
                                    residual=residual)

    def composed(x, nw, nb, w1, b1, w2, b2):
        out = _composed(_norm_ref(x, nw, nb if centered else None, centered), w1, b1, w2, b2)
        return x + out if residual else out

    grads = range(7) if centered else [0, 1, 3, 4, 5, 6]      # an RMSNorm has no shift
    assert_same(fused, composed, [x, nw, nb, w1, b1, w2, b2], rtol=1e-9, atol=1e-11, grad_inputs=grads)


def test_fused_swiglu_passes_a_finite_difference_check():
    ts = [Tensor(a, requires_grad=True) for a in _arrays((2, 5), 4, 3, 3)]
    assert gradcheck(swiglu_op.swiglu_mlp, ts)


def test_fused_swiglu_on_the_pool_gives_one_threads_bits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    arrays = [a.astype(np.float32) for a in _arrays((6, 11), 8, 8, 8)]
    seed = RNG.standard_normal((6, 11, 8)).astype(np.float32)
    assert_same_bits_on_one_thread_and_two(swiglu_op.swiglu_mlp, arrays, seed)


def test_mismatched_widths_are_refused_with_the_shapes():
    x, w1, _, w2, _ = (Tensor(a) for a in _arrays((2,), 4, 3, 4))
    with pytest.raises(ValueError, match=r"w1 must be \(C, 2H\).*\(4, 6\).*\(4, 4\)"):
        swiglu_op.swiglu_mlp(x, w1, None, Tensor(np.ones((4, 4))), None)
    with pytest.raises(ValueError, match="residual needs Cout = C"):
        swiglu_op.swiglu_mlp(x, w1, None, Tensor(np.ones((3, 5))), None, residual=True)


def test_nn_swiglu_fuses_without_hooks_and_gives_the_layers_result():
    x = Tensor(RNG.standard_normal((2, 3, 8)).astype(np.float32), requires_grad=True)
    layer = nn.SwiGLU(8, 12, bias=True)
    out = layer(x)
    assert isinstance(out._node, swiglu_op.SwiGLUMLP)
    gate, up = ops.chunk(layer.c_fc(x), 2, axis=-1)
    np.testing.assert_allclose(out.data, layer.c_proj(ops.silu(gate) * up).data, rtol=1e-5, atol=1e-6)
    layer.c_fc.register_forward_hook(lambda m, a, o: o * 2)
    assert not isinstance(layer(x)._node, swiglu_op.SwiGLUMLP)
    inspected = nn.SwiGLU(8, 12)
    inspected.hook = lambda name, t: t
    assert not isinstance(inspected(x)._node, swiglu_op.SwiGLUMLP)


@pytest.fixture(scope="module")
def emu_dir(tmp_path_factory):
    if not cuda_emulator.available():
        pytest.skip("needs g++ to emulate the CUDA kernels")
    return str(tmp_path_factory.mktemp("cuda_emu"))


@pytest.mark.parametrize("norm", [None, "layer", "rms"])
def test_gpu_form_on_the_emulated_kernels_equals_the_composed_ops(emu_dir, norm):
    """prenorm.on_device arrays (the emulator's NumPy stand-ins): the op runs its GPU form, one
    pass over all rows with the norm's kernels, and gives the composed CPU ops' numbers."""
    C = 8
    x, w1, b1, w2, b2 = _arrays((2, 9), C, 6, C)
    nw, nb = 1 + 0.3 * RNG.standard_normal(C), RNG.standard_normal(C)
    spec = None if norm is None else (norm == "layer", nw, nb if norm == "layer" else None, EPS)

    def run(fn):
        ts = [Tensor(a.copy(), requires_grad=True) for a in (x, nw, nb, w1, b1, w2, b2)]
        out = fn(*ts)
        device = getattr(out._node, "device", False)
        out.backward(np.ones(out.shape))   # releases the node's saved state
        return device, out.data, [t.grad for t in ts]

    def fused(x, nw, nb, w1, b1, w2, b2):
        n = None if spec is None else (spec[0], nw, nb if spec[2] is not None else None, EPS)
        return swiglu_op.swiglu_mlp(x, w1, b1, w2, b2, norm=n, residual=True)

    def composed(x, nw, nb, w1, b1, w2, b2):
        n = x if norm is None else _norm_ref(x, nw, nb if norm == "layer" else None, norm == "layer")
        return x + _composed(n, w1, b1, w2, b2)

    _, ref, ref_grads = run(composed)
    with cuda_emulator.emulated_kernels(emu_dir):
        device, got, grads = run(fused)
    assert device, "the op did not take its GPU form"
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11)
    for i, (a, b) in enumerate(zip(grads, ref_grads)):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=f"gradient of input {i}")


def test_fused_swiglus_last_backward_writes_its_gradient_over_u_and_h_over_s():
    from tests.autograd.test_mlp import _last_backward_check

    arrays = [a.astype(np.float32) for a in _arrays((3, 4), 5, 6, 5)]
    seed = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    (u, s), (u_buf, s_buf) = _last_backward_check(swiglu_op.swiglu_mlp, arrays, ("u", "s"), seed)
    a, b = u[..., :6], u[..., 6:]
    np.testing.assert_array_equal(s_buf, (a * s) * b)              # h, as the forward made it
    assert not np.array_equal(u_buf, u)
