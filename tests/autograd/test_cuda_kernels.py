"""The fused CUDA kernels (autograd/cuda) against their references, forward and backward.

Each fused op on CuPy is compared with (1) the same op on NumPy in float64 and (2) the op's own
array code on CuPy with the kernels switched off (`autograd.cuda.fused(False)`). The GPU tests
skip with a reason where CuPy or a GPU is missing; `test_kernel_sources_compile` needs only
CuPy's NVRTC (no GPU) and skips without it. On a GPU machine: benchmarks/gpu_check.sh.
"""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import Tensor
from autograd import cuda as acuda

HAS_GPU = autograd.cuda_available()
_skip = pytest.mark.skipif(not HAS_GPU, reason="needs CuPy and an NVIDIA GPU (autograd.cuda_available() is False)")


def gpu(test):
    """Marks a GPU test: `pytest -m gpu` selects it; it skips with the reason without a GPU."""
    return pytest.mark.gpu(_skip(test))


# ---- runs everywhere --------------------------------------------------------------------------
def test_fused_kernels_never_run_on_numpy_arrays():
    assert acuda.use(np.ones(3, dtype=np.float32)) is False
    assert acuda.use(np.float32(1.0)) is False


def test_fused_switch_restores_its_state():
    assert acuda.fused_enabled()
    with acuda.fused(False):
        assert not acuda.fused_enabled()
    assert acuda.fused_enabled()


def _fake_kernel_op(monkeypatch, forward_returns):
    """A Function declared with kernel_op over fake kernel hooks; `use` holds for NumPy arrays."""
    calls = []

    def fwd(node, x, scale=2.0, tag=None):
        calls.append(("forward", scale, tag))
        node.x = x
        return forward_returns(x, scale)

    def bwd(node, g, tag=None):
        calls.append(("backward", tag))
        return (g * 10.0,)

    monkeypatch.setattr(acuda, "use", lambda a: isinstance(a, np.ndarray))
    monkeypatch.setattr(acuda, "_KERNEL_OPS", list(acuda._KERNEL_OPS))   # the fake op is not kept

    @acuda.kernel_op(fwd, bwd, tag="t")
    class Scale(autograd.Function):
        def forward(self, x, scale=2.0):
            calls.append(("array forward", scale))
            return x * scale

        def backward(self, g):
            calls.append(("array backward",))
            return (g * 2.0,)

    return Scale, calls


def test_kernel_op_runs_the_kernel_hooks_with_the_ops_defaults_and_its_own_options(monkeypatch):
    Scale, calls = _fake_kernel_op(monkeypatch, lambda x, scale: x * scale + 1.0)
    x = Tensor(np.ones(3), requires_grad=True)
    y = Scale.apply(x)
    assert y._node.fused
    np.testing.assert_array_equal(y.data, 3.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, 10.0)
    assert calls == [("forward", 2.0, "t"), ("backward", "t")]


def test_kernel_op_falls_back_to_the_array_code_when_the_hook_declines(monkeypatch):
    Scale, calls = _fake_kernel_op(monkeypatch, lambda x, scale: None)
    x = Tensor(np.ones(3), requires_grad=True)
    y = Scale.apply(x, scale=3.0)
    assert not y._node.fused
    np.testing.assert_array_equal(y.data, 3.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, 2.0)
    assert calls == [("forward", 3.0, "t"), ("array forward", 3.0), ("array backward",)]


def test_kernel_op_is_skipped_entirely_when_use_is_false():
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    y = autograd.softmax(x)
    assert not y._node.fused


def test_every_fused_op_is_declared_with_kernel_op():
    from autograd.ops.activation import GELUTanh
    from autograd.ops.attention import ScaledDotProductAttention
    from autograd.ops.loss import CrossEntropy
    from autograd.ops.norm import LayerNorm, RMSNorm
    from autograd.ops.softmax import LogSoftmax, Softmax

    assert set(acuda.kernel_ops()) == {
        Softmax, LogSoftmax, CrossEntropy, LayerNorm, RMSNorm,
        GELUTanh, ScaledDotProductAttention,
    }


def test_attention_mode_is_checked():
    old = acuda.attention_mode()
    with pytest.raises(ValueError, match="attention mode must be one of"):
        acuda.set_attention("fast")
    acuda.set_attention("flash")
    assert acuda.attention_mode() == "flash"
    acuda.set_attention(old)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU the tests below compile and run every kernel")
def test_kernel_sources_compile():
    """Every kernel source, for every dtype it is built for, compiles with NVRTC (no GPU needed)."""
    pytest.importorskip("cupy", reason="needs CuPy (for its NVRTC bindings) to compile the kernels")
    from autograd.cuda._compile import compile_all

    try:
        done = compile_all("compute_80")
    except Exception as exc:  # no libnvrtc on this machine: not a kernel error
        if "nvrtc" in str(exc).lower() and "does not compile" not in str(exc):
            pytest.skip(f"NVRTC is not loadable here: {exc}")
        raise
    assert any(d.startswith("flash_hs64") for d in done) and any(d.startswith("norm") for d in done)


# ---- GPU: helpers -----------------------------------------------------------------------------
RNG = np.random.default_rng(0)


def _run(fn, arrays, device, dtype, seed_grad):
    """fn over Tensors made of `arrays` on `device` in `dtype`; returns (output, input grads)."""
    ts = [Tensor(np.asarray(a, dtype=dtype), requires_grad=True, device=device) for a in arrays]
    out = fn(*ts)
    w = Tensor(np.asarray(seed_grad, dtype=dtype), device=device)
    (out * w).sum().backward()
    host = lambda a: a.get() if hasattr(a, "get") else np.asarray(a)  # noqa: E731
    return host(out.data).astype(np.float64), [host(t.grad).astype(np.float64) for t in ts]


def check(fn, arrays, dtype=np.float32, rtol=None, atol=None):
    """Fused GPU result vs NumPy float64 and vs the unfused GPU path, forward and input grads."""
    ref_out, ref_grads = _run(fn, arrays, "cpu", np.float64, _seed(fn, arrays))
    seed = _seed(fn, arrays)
    tol = {np.float64: (1e-10, 1e-10), np.float32: (2e-4, 2e-5), np.float16: (3e-2, 3e-2)}[dtype]
    rtol = rtol or tol[0]
    atol = atol or tol[1]
    out, grads = _run(fn, arrays, "cuda", dtype, seed)
    np.testing.assert_allclose(out, ref_out, rtol=rtol, atol=atol, err_msg="forward vs NumPy float64")
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"grad of input {i} vs NumPy float64")
    if dtype != np.float16:
        with acuda.fused(False):
            out2, grads2 = _run(fn, arrays, "cuda", dtype, seed)
        np.testing.assert_allclose(out, out2, rtol=rtol, atol=atol, err_msg="fused vs unfused CuPy")
        for g, r in zip(grads, grads2):
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg="fused vs unfused CuPy grad")


_SEEDS: dict = {}


def _seed(fn, arrays):
    key = (id(fn), tuple(np.shape(a) for a in arrays))
    if key not in _SEEDS:
        with autograd.no_grad():
            out = fn(*[Tensor(np.asarray(a, dtype=np.float64)) for a in arrays])
        _SEEDS[key] = RNG.standard_normal(out.shape)
    return _SEEDS[key]


DTYPES = [np.float32, np.float64, np.float16]


# ---- GPU: row ops -----------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((5, 37), -1), ((5, 37), 0), ((2, 3, 1000), -1), ((4, 1), -1),
                                        ((3, 2100), -1)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_kernels(dtype, shape, axis, log):
    op = autograd.log_softmax if log else autograd.softmax
    fn = lambda x: op(x, axis=axis)  # noqa: E731
    check(fn, [RNG.standard_normal(shape) * 3], dtype)


@gpu
def test_softmax_fully_masked_row_is_zero_like_the_cpu_op():
    import cupy as cp

    x = np.full((2, 5), -np.inf, dtype=np.float32)
    x[1] = RNG.standard_normal(5)
    y = autograd.softmax(Tensor(cp.asarray(x))).numpy()
    np.testing.assert_array_equal(y[0], 0)
    np.testing.assert_allclose(y[1], autograd.softmax(Tensor(x)).numpy()[1], rtol=1e-6)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 11), (2, 5, 50257), (3, 4, 300)])
def test_cross_entropy_kernels(dtype, reduction, shape):
    targets = RNG.integers(0, shape[-1], shape[:-1])
    targets.reshape(-1)[::4] = -100                          # some ignored positions
    fn = lambda x: autograd.cross_entropy(x, targets, reduction=reduction)  # noqa: E731
    rtol = 5e-2 if dtype == np.float16 else None
    check(fn, [RNG.standard_normal(shape) * 2], dtype, rtol=rtol, atol=rtol)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("C", [1, 7, 768, 1500])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_kernels(dtype, C, affine):
    x = RNG.standard_normal((3, 5, C)) * 2 + 0.5
    w = RNG.standard_normal(C)
    b = RNG.standard_normal(C)
    if affine == "none":
        check(lambda x: autograd.layer_norm(x), [x], dtype)
    elif affine == "weight":
        check(lambda x, w: autograd.layer_norm(x, w), [x, w], dtype)
    else:
        check(lambda x, w, b: autograd.layer_norm(x, w, b), [x, w, b], dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("C", [1, 7, 768])
@pytest.mark.parametrize("weighted", [False, True])
def test_rms_norm_kernels(dtype, C, weighted):
    x = RNG.standard_normal((4, 3, C)) * 2
    if weighted:
        check(lambda x, w: autograd.rms_norm(x, w), [x, RNG.standard_normal(C)], dtype)
    else:
        check(lambda x: autograd.rms_norm(x), [x], dtype)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (1000,), (3, 5, 7), (64, 3072)])
def test_gelu_kernel(dtype, shape):
    check(lambda x: autograd.gelu(x), [RNG.standard_normal(shape) * 3], dtype)


# ---- GPU: attention ---------------------------------------------------------------------------
ATTN_SHAPES = [  # B, H, Tq, Tk, hs
    (2, 3, 17, 17, 64), (1, 2, 1, 40, 64), (1, 2, 70, 130, 32), (2, 2, 65, 65, 128),
    (1, 1, 5, 3, 64), (1, 2, 200, 200, 64), (1, 1, 9, 9, 24),
]


@gpu
@pytest.mark.parametrize("mode", ["flash", "matmul"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", ATTN_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_attention_kernels(mode, causal, shape, dtype):
    B, H, Tq, Tk, hs = shape
    old = acuda.attention_mode()
    acuda.set_attention(mode)
    try:
        fn = lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v, causal=causal)  # noqa: E731
        arrays = [RNG.standard_normal((B, H, Tq, hs)), RNG.standard_normal((B, H, Tk, hs)),
                  RNG.standard_normal((B, H, Tk, hs))]
        check(fn, arrays, dtype, rtol=5e-2 if dtype == np.float16 else 1e-3,
              atol=5e-2 if dtype == np.float16 else 1e-4)
    finally:
        acuda.set_attention(old)


@gpu
def test_attention_with_mask_or_dropout_takes_the_array_path():
    import cupy as cp

    q = Tensor(cp.asarray(RNG.standard_normal((1, 1, 4, 8)), dtype=cp.float32), requires_grad=True)
    mask = np.tril(np.ones((4, 4), dtype=bool))
    out = autograd.scaled_dot_product_attention(q, q, q, causal=False, attn_mask=mask)
    assert not getattr(out._node, "fused", False)
    ref = autograd.scaled_dot_product_attention(Tensor(q.numpy()), Tensor(q.numpy()), Tensor(q.numpy()))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


# ---- GPU: optimizer ---------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_kernel_matches_the_numpy_update(wd):
    from nn import Parameter
    from nn.optim import AdamW

    w0 = RNG.standard_normal((33, 17)).astype(np.float32)
    grads = [RNG.standard_normal((33, 17)).astype(np.float32) for _ in range(4)]
    results = []
    for device in ("cpu", "cuda"):
        p = Parameter(Tensor(w0.copy(), device=device))
        opt = AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
        for g in grads:
            p.grad = Tensor(g, device=device).data
            opt.step()
        results.append((p.numpy(), opt.state_dict()))
    np.testing.assert_array_equal(results[1][0], results[0][0])   # bit for bit (no FMA contraction)
    s_cpu, s_gpu = results[0][1]["state"][0], results[1][1]["state"][0]
    assert s_cpu["step"] == s_gpu["step"] == 4
    np.testing.assert_array_equal(s_gpu["exp_avg"].get(), s_cpu["exp_avg"])
    np.testing.assert_array_equal(s_gpu["exp_avg_sq"].get(), s_cpu["exp_avg_sq"])


@gpu
def test_adamw_multi_tensor_launch_matches_the_numpy_update():
    """A group of parameters (one over CHUNK elements) updated in one launch on the GPU."""
    from nn import Parameter
    from nn.optim import AdamW

    shapes = [(300, 257), (17,), (33, 17), (1,)]
    w0 = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[RNG.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    results = []
    for device in ("cpu", "cuda"):
        ps = [Parameter(Tensor(w.copy(), device=device)) for w in w0]
        opt = AdamW([{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}], lr=1e-2)
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = Tensor(g, device=device).data
            opt.step()
        results.append([p.numpy() for p in ps])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, want)   # bit for bit, as on the emulator


# ---- GPU: the fused sublayers' GPU forms ------------------------------------------------------
@gpu
@pytest.mark.parametrize("kind,mode", [("mlp", "matmul"), ("attention", "matmul"), ("attention", "flash")])
@pytest.mark.parametrize("centered", [True, False])
def test_fused_sublayer_gpu_forms_match_the_composed_ops(kind, mode, centered):
    """x + f(norm(x)) as one op on CuPy (ops/mlp.py, ops/self_attention.py, ops/prenorm.py) vs
    the primitives composed on NumPy in float64, forward and every gradient."""
    from tests.autograd import test_prenorm as tp

    arrays = tp._arrays(kind, 2, 33, 64)
    fused, composed = tp._fused(kind, centered), tp._composed(kind, centered)
    seed = RNG.standard_normal((2, 33, 64))

    def run(fn, device, dtype):   # (output, gradients of the inputs that get one), on the host
        ts = [Tensor(np.asarray(a, dtype=dtype), requires_grad=True, device=device) for a in arrays]
        out = fn(*ts)
        out.backward(Tensor(seed.astype(dtype), device=device).data)
        host = lambda a: (a.get() if hasattr(a, "get") else a).astype(np.float64)  # noqa: E731
        return [host(out.data)] + [host(t.grad) for t in ts if t.grad is not None]

    want = run(composed, "cpu", np.float64)
    old = acuda.attention_mode()
    acuda.set_attention(mode)
    try:
        got = run(fused, "cuda", np.float32)
    finally:
        acuda.set_attention(old)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5 * np.abs(w).max())


# ---- GPU: bfloat16 storage --------------------------------------------------------------------
@gpu
def test_bfloat16_conversions_on_the_device_give_the_host_bits():
    """nn.bfloat16 on CuPy arrays (the kernels of autograd/cuda/amp.py): every pattern widens
    exactly; narrowing rounds to nearest even, keeps NaN and inf, as on the host."""
    import cupy as cp

    from nn import bfloat16

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    wide = bfloat16.to_float32(cp.asarray(bits)).get()
    np.testing.assert_array_equal(wide.view(np.uint32), bfloat16.to_float32(bits).view(np.uint32))
    edges = np.array([0x7F7FFFFF, 0x7F800001, 0xFFFFFFFF, 0x3F808000, 0x3F818000, 0x80000000], np.uint32)
    rand = RNG.integers(0, 2 ** 32, 100000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([edges, rand]).view(np.float32)
    np.testing.assert_array_equal(bfloat16.from_float(cp.asarray(x)).get(), bfloat16.from_float(x))


@gpu
def test_tf32_switch_is_applied():
    from autograd.cuda.precision import set_tf32, tf32_enabled

    try:
        assert set_tf32(True) is True and tf32_enabled() is True
    finally:
        set_tf32(False)
    assert tf32_enabled() is False
