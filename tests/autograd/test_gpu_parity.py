"""Every op on CuPy against the same op on NumPy: forward values and input gradients.

Skipped (with the reason) where CuPy or a GPU is missing. Run on a GPU machine with
`python -m pytest -q tests/autograd/test_gpu_parity.py` (benchmarks/gpu_check.sh does).
"""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import Tensor, ops

pytestmark = pytest.mark.gpu
if not autograd.cuda_available():
    pytest.skip("needs CuPy and an NVIDIA GPU (autograd.cuda_available() is False)", allow_module_level=True)

RNG = np.random.default_rng(0)
IDS = RNG.integers(0, 6, (3, 4))
MASK = RNG.standard_normal((3, 4)) > 0


def _x(*shape, positive=False):
    a = RNG.standard_normal(shape)
    return np.abs(a) + 0.1 if positive else a


# name -> (function of Tensors, list of input arrays)
CASES = {
    "add": (lambda a, b: a + b, [_x(3, 4), _x(4)]),
    "sub": (lambda a, b: a - b, [_x(3, 4), _x(3, 1)]),
    "mul": (lambda a, b: a * b, [_x(2, 3, 4), _x(3, 4)]),
    "div": (lambda a, b: a / b, [_x(3, 4), _x(3, 4, positive=True)]),
    "pow": (lambda a, b: a ** b, [_x(3, 4, positive=True), _x(3, 4)]),
    "pow_scalar": (lambda a: a ** 3 + 2.0 * a - 1.0 / (a + 5.0), [_x(3, 4)]),
    "neg": (lambda a: -a, [_x(3, 4)]),
    "matmul": (lambda a, b: a @ b, [_x(2, 3, 4), _x(4, 5)]),
    "matmul_batched": (lambda a, b: a @ b, [_x(2, 1, 3, 4), _x(3, 4, 2)]),
    "matmul_vec": (lambda a, b: a @ b, [_x(4), _x(2, 4, 3)]),
    "linear": (lambda a, w, b: ops.linear(a, w, b), [_x(2, 3, 4), _x(4, 5), _x(5)]),
    "sum": (lambda a: a.sum(axis=(0, 2), keepdims=True), [_x(2, 3, 4)]),
    "mean": (lambda a: a.mean(axis=-1), [_x(2, 3, 4)]),
    "max": (lambda a: a.max(axis=1), [_x(3, 4)]),
    "min": (lambda a: a.min(), [_x(3, 4)]),
    "var": (lambda a: a.var(axis=-1, ddof=1), [_x(3, 4)]),
    "exp": (lambda a: a.exp(), [_x(3, 4)]),
    "log": (lambda a: a.log(), [_x(3, 4, positive=True)]),
    "sqrt": (lambda a: a.sqrt(), [_x(3, 4, positive=True)]),
    "abs": (lambda a: a.abs(), [_x(3, 4)]),
    "clip": (lambda a: a.clip(-0.5, 0.5), [_x(3, 4)]),
    "tanh": (lambda a: a.tanh(), [_x(3, 4)]),
    "sigmoid": (lambda a: a.sigmoid(), [_x(3, 4)]),
    "relu": (lambda a: a.relu(), [_x(3, 4)]),
    "gelu_tanh": (lambda a: a.gelu(), [_x(3, 4)]),
    "gelu_erf": (lambda a: a.gelu(approximate="none"), [_x(3, 4) * 3]),
    "silu": (lambda a: a.silu(), [_x(3, 4)]),
    "reshape": (lambda a: a.reshape(4, -1), [_x(2, 3, 4)]),
    "transpose": (lambda a: a.transpose(0, 2) * 1.0, [_x(2, 3, 4)]),
    "permute": (lambda a: a.permute(2, 0, 1) * 1.0, [_x(2, 3, 4)]),
    "squeeze": (lambda a: a.unsqueeze(1).squeeze(), [_x(3, 4)]),
    "expand": (lambda a: a.expand(2, 3, 4), [_x(3, 1)]),
    "flatten": (lambda a: a.flatten(1), [_x(2, 3, 4)]),
    "getitem_basic": (lambda a: a[1:, ::2], [_x(3, 4)]),
    "getitem_rows": (lambda a: a[np.array([0, 2, 0, 0])], [_x(3, 4)]),
    "getitem_mask": (lambda a: a[MASK], [_x(3, 4)]),
    "getitem_adv": (lambda a: a[np.array([0, 1, 0]), np.array([1, 1, 1])], [_x(3, 4)]),
    "embedding": (lambda w: ops.embedding(w, IDS), [_x(6, 5)]),
    "gather": (lambda a: ops.gather(a, IDS % 4, axis=1), [_x(3, 4)]),
    "gather_one": (lambda a: ops.gather(a, IDS[:, :1] % 4, axis=1), [_x(3, 4)]),
    "concat": (lambda a, b: ops.concat([a, b], axis=1), [_x(3, 4), _x(3, 2)]),
    "stack": (lambda a, b: ops.stack([a, b], axis=1), [_x(3, 4), _x(3, 4)]),
    "split": (lambda a: ops.split(a, [1, 3], axis=1)[1] * ops.chunk(a, 2, axis=1)[0][:, :1], [_x(3, 4)]),
    "where": (lambda a, b: ops.where(MASK, a, b), [_x(3, 4), _x(4)]),
    "masked_fill": (lambda a: a.masked_fill(MASK, -3.0), [_x(3, 4)]),
    "tril": (lambda a: a.tril(-1) + a.triu(1), [_x(2, 4, 4)]),
    "astype": (lambda a: a.astype("float32").astype("float64"), [_x(3, 4)]),
}
FUSED = {
    "softmax": (lambda a: ops.softmax(a, axis=-1), [_x(3, 5)]),
    "log_softmax": (lambda a: ops.log_softmax(a, axis=-1), [_x(3, 5)]),
    "cross_entropy": (lambda a: ops.cross_entropy(a, np.array([0, 4, 2])), [_x(3, 5)]),
    "layer_norm": (lambda a, w, b: ops.layer_norm(a, w, b), [_x(3, 5), _x(5), _x(5)]),
    "rms_norm": (lambda a, w: ops.rms_norm(a, w), [_x(3, 5), _x(5)]),
    "attention": (lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=True),
                  [_x(1, 2, 4, 3), _x(1, 2, 4, 3), _x(1, 2, 4, 3)]),
}
_FUSED_OPS = {"attention": "scaled_dot_product_attention"}
for _name, _case in FUSED.items():
    if hasattr(ops, _FUSED_OPS.get(_name, _name)):  # the fused ops land separately
        CASES[_name] = _case


def _run(fn, arrays, device, dtype):
    ts = [Tensor(a.astype(dtype), requires_grad=True, device=device) for a in arrays]
    out = fn(*ts)
    w = Tensor(np.random.default_rng(1).standard_normal(out.shape).astype(dtype), device=device)
    (out * w).sum().backward()
    return out.numpy(), [t.grad if isinstance(t.grad, np.ndarray) else t.grad.get() for t in ts], ts


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-9), (np.float32, 2e-4)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_on_gpu_matches_cpu(name, dtype, rtol):
    fn, arrays = CASES[name]
    out_cpu, grads_cpu, _ = _run(fn, arrays, "cpu", dtype)
    out_gpu, grads_gpu, ts = _run(fn, arrays, "cuda", dtype)
    assert all(t.device == "cuda:0" and t.grad is not None and not isinstance(t.grad, np.ndarray) for t in ts)
    np.testing.assert_allclose(out_gpu, out_cpu, rtol=rtol, atol=rtol)
    for g_gpu, g_cpu in zip(grads_gpu, grads_cpu):
        assert g_gpu.dtype == dtype
        np.testing.assert_allclose(g_gpu, g_cpu, rtol=rtol, atol=rtol)


def test_moving_between_devices_is_differentiable():
    x = Tensor(_x(3, 4), requires_grad=True)
    y = (x.to("cuda") * 2).cpu()
    assert y.device == "cpu"
    y.sum().backward()
    assert isinstance(x.grad, np.ndarray)
    np.testing.assert_allclose(x.grad, 2.0)


def test_factories_and_random_on_the_gpu():
    autograd.manual_seed(3)
    a = autograd.randn(4, 5, device="cuda")
    autograd.manual_seed(3)
    b = autograd.randn(4, 5, device="cuda")
    assert a.device == "cuda:0" and a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert autograd.zeros(2, 3, device="cuda").device == "cuda:0"
    assert autograd.arange(5, device="cuda").tolist() == [0, 1, 2, 3, 4]
    # a NumPy generator gives the same numbers on either device
    c = autograd.randn(6, device="cuda", generator=np.random.default_rng(2))
    d = autograd.randn(6, generator=np.random.default_rng(2))
    np.testing.assert_array_equal(c.numpy(), d.numpy())


def test_dropout_on_the_gpu_keeps_dtype_and_scales():
    x = Tensor(np.ones((64, 64), dtype=np.float32), requires_grad=True, device="cuda")
    out = ops.dropout(x, 0.25)
    vals = out.numpy()
    assert out.dtype == np.float32
    np.testing.assert_allclose(vals[vals != 0], 1 / 0.75, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.get(), vals, rtol=1e-6)


def test_mixing_a_gpu_and_a_cpu_tensor_says_so():
    with pytest.raises(RuntimeError, match="different devices"):
        Tensor(np.ones(2)) + Tensor(np.ones(2), device="cuda")
