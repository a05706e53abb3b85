"""The fused CUDA kernels, run on the CPU through a C++ emulation of the CUDA execution model.

tests/autograd/cuda_emulator.py compiles the very kernel sources of autograd/cuda with g++
(threads for CUDA threads, barriers for __syncthreads and warp shuffles) and patches
autograd.cuda so that each op's GPU branch (its Python glue and its kernels) runs on NumPy
arrays. Each fused op is compared, forward and backward, with the op's CPU code. This checks
the indexing, masking, tiling and reductions of every kernel where no GPU exists; it does not
check float16, speed or GPU-only failure modes (tests/autograd/test_cuda_kernels.py does, on a GPU).
Skips without a C++ compiler.
"""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import Tensor
from autograd import cuda as acuda

from tests.autograd import cuda_emulator

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the CUDA kernels")]

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def emu_dir(request, tmp_path_factory):
    """Compiled kernels are kept in pytest's cache folder (named by a hash of their source)."""
    cache = getattr(request.config, "cache", None)
    return str(cache.mkdir("cuda_emu") if cache is not None else tmp_path_factory.mktemp("cuda_emu"))


def _run(fn, arrays, dtype):
    ts = [Tensor(np.asarray(a, dtype=dtype), requires_grad=True) for a in arrays]
    out = fn(*ts)
    fused = bool(out._node is not None and getattr(out._node, "fused", False))
    w = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
    (out * Tensor(w)).sum().backward()
    return out.numpy(), [t.grad.copy() for t in ts], fused


def check(emu_dir, fn, arrays, dtype=np.float64, atol=1e-10):
    ref, ref_grads, ref_fused = _run(fn, arrays, dtype)
    assert not ref_fused
    with cuda_emulator.emulated_kernels(emu_dir):
        out, grads, fused = _run(fn, arrays, dtype)
    assert fused, "the op did not take its fused GPU branch"
    np.testing.assert_allclose(out, ref, rtol=atol, atol=atol, err_msg="forward")
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        np.testing.assert_allclose(g, r, rtol=atol, atol=atol, err_msg=f"gradient of input {i}")


def _one_call_per_kernel_op():
    """op class -> (fn, arrays): a small call of every op declared with autograd.cuda.kernel_op."""
    from autograd.ops.activation import GELUTanh
    from autograd.ops.attention import ScaledDotProductAttention
    from autograd.ops.loss import CrossEntropy
    from autograd.ops.norm import LayerNorm, RMSNorm
    from autograd.ops.softmax import LogSoftmax, Softmax

    x = RNG.standard_normal((3, 8))
    w, b = RNG.standard_normal(8), RNG.standard_normal(8)
    qkv = [RNG.standard_normal((1, 2, 5, 8)) for _ in range(3)]
    t = RNG.integers(0, 8, 3)
    return {
        Softmax: (autograd.softmax, [x]),
        LogSoftmax: (autograd.log_softmax, [x]),
        CrossEntropy: (lambda x: autograd.cross_entropy(x, t), [x]),
        LayerNorm: (autograd.layer_norm, [x, w, b]),
        RMSNorm: (autograd.rms_norm, [x, w]),
        GELUTanh: (autograd.gelu, [x]),
        ScaledDotProductAttention: (autograd.scaled_dot_product_attention, qkv),
    }


def test_every_kernel_op_is_emulated(emu_dir):
    """Each Function with a fused GPU path takes it under the emulator and matches its CPU code;
    a new kernel op fails here until it has a case."""
    cases = _one_call_per_kernel_op()
    assert set(cases) == set(acuda.kernel_ops())
    for cls, (fn, arrays) in cases.items():
        with cuda_emulator.emulated_kernels(emu_dir):
            out = fn(*[Tensor(a) for a in arrays])
        assert type(out._node) is cls or out._node is None
        check(emu_dir, fn, arrays)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,axis", [((5, 37), -1), ((3, 37), 0), ((2, 3, 100), -1), ((4, 1), -1)])
def test_softmax_kernels(emu_dir, log, shape, axis):
    op = autograd.log_softmax if log else autograd.softmax
    check(emu_dir, lambda x: op(x, axis=axis), [RNG.standard_normal(shape) * 3])


def test_softmax_kernel_gives_zeros_for_a_fully_masked_row(emu_dir):
    x = RNG.standard_normal((3, 6))
    x[1] = -np.inf
    with cuda_emulator.emulated_kernels(emu_dir):
        y = autograd.softmax(Tensor(x)).numpy()
    np.testing.assert_array_equal(y[1], 0.0)
    np.testing.assert_allclose(y[[0, 2]], autograd.softmax(Tensor(x)).numpy()[[0, 2]], rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 11), (2, 5, 130)])
def test_cross_entropy_kernels(emu_dir, reduction, shape):
    t = RNG.integers(0, shape[-1], shape[:-1])
    t.reshape(-1)[::4] = -100
    check(emu_dir, lambda x: autograd.cross_entropy(x, t, reduction=reduction), [RNG.standard_normal(shape) * 2])


@pytest.mark.parametrize("C", [1, 7, 130])
@pytest.mark.parametrize("kind", ["layer", "layer_w", "layer_wb", "rms", "rms_w"])
def test_norm_kernels(emu_dir, C, kind):
    x, w, b = RNG.standard_normal((3, 5, C)) * 2 + 0.5, RNG.standard_normal(C), RNG.standard_normal(C)
    cases = {
        "layer": (lambda x: autograd.layer_norm(x), [x]),
        "layer_w": (lambda x, w: autograd.layer_norm(x, w), [x, w]),
        "layer_wb": (lambda x, w, b: autograd.layer_norm(x, w, b), [x, w, b]),
        "rms": (lambda x: autograd.rms_norm(x), [x]),
        "rms_w": (lambda x, w: autograd.rms_norm(x, w), [x, w]),
    }
    check(emu_dir, *cases[kind])


def test_norm_weight_gradient_over_many_row_slabs(emu_dir):
    x, w, b = RNG.standard_normal((200, 40)), RNG.standard_normal(40), RNG.standard_normal(40)
    check(emu_dir, lambda x, w, b: autograd.layer_norm(x, w, b), [x, w, b], atol=1e-9)


@pytest.mark.parametrize("shape", [(1,), (1000,), (3, 5, 7)])
def test_gelu_kernel(emu_dir, shape):
    check(emu_dir, lambda x: autograd.gelu(x), [RNG.standard_normal(shape) * 3])


ATTN = [(1, 2, 17, 17, 64), (1, 1, 1, 40, 64), (1, 1, 70, 130, 32), (1, 1, 5, 3, 64), (1, 1, 9, 9, 24)]


@pytest.mark.parametrize("mode", ["flash", "matmul"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", ATTN)
def test_attention_kernels(emu_dir, mode, causal, shape):
    B, H, Tq, Tk, hs = shape
    flash = mode == "flash" and hs in (32, 64, 128)
    dtype = np.float32 if flash else np.float64        # the flash kernels are built for float16/float32
    arrays = [RNG.standard_normal((B, H, Tq, hs)), RNG.standard_normal((B, H, Tk, hs)),
              RNG.standard_normal((B, H, Tk, hs))]
    old = acuda.attention_mode()
    acuda.set_attention(mode)
    try:
        check(emu_dir, lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v, causal=causal), arrays,
              dtype, atol=2e-5 if flash else 1e-10)
    finally:
        acuda.set_attention(old)


def test_adamw_kernel(emu_dir):
    from nn import Parameter
    from nn.optim import AdamW

    w0 = RNG.standard_normal((7, 5))
    grads = [RNG.standard_normal((7, 5)) for _ in range(3)]
    results = []
    for emulate in (False, True):
        p = Parameter(w0.copy())
        opt = AdamW([p], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
        ctx = cuda_emulator.emulated_kernels(emu_dir) if emulate else _nothing()
        with ctx:
            for g in grads:
                p.grad = g.copy()
                opt.step()
        results.append(p.data.copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12, atol=1e-14)


def test_adamw_updates_a_group_in_one_multi_tensor_launch(emu_dir, monkeypatch):
    """Two groups of parameters of several sizes (small chunks, so tensors span several and end
    mid-chunk): the same weights and moments as the CPU update, one launch per group and step."""
    import autograd.cuda.adamw as m_adamw
    from nn import Parameter
    from nn.optim import AdamW

    monkeypatch.setattr(m_adamw, "CHUNK", 64)
    shapes = [(7, 5), (300,), (13, 11), (1,), (130,)]
    w0 = [RNG.standard_normal(s) for s in shapes]
    grads = [[RNG.standard_normal(s) for s in shapes] for _ in range(3)]
    results, launches = [], []
    for emulate in (False, True):
        ps = [Parameter(w.copy()) for w in w0]
        opt = AdamW([{"params": ps[:3], "weight_decay": 0.1}, {"params": ps[3:], "weight_decay": 0.0}],
                    lr=1e-2, betas=(0.9, 0.95))
        with (cuda_emulator.emulated_kernels(emu_dir) if emulate else _nothing()):
            if emulate:
                get = m_adamw.get_kernel
                monkeypatch.setattr(m_adamw, "get_kernel", lambda *a, **k: launches.append(a[1]) or get(*a, **k))
            for gs in grads:
                for p, g in zip(ps, gs):
                    p.grad = g.copy()
                opt.step()
        results.append(([p.data.copy() for p in ps], opt.state_dict()["state"]))
    assert launches == ["adamw_multi"] * 6
    for got, want in zip(results[1][0], results[0][0]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    for i in range(len(shapes)):
        for k in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(results[1][1][i][k], results[0][1][i][k], rtol=1e-12, atol=1e-16)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("mode", ["matmul", "flash"])
def test_gpt_training_steps_match_the_cpu_path(emu_dir, mode):
    """A whole model, llm.c style: losses and weights after AdamW steps, every fused op at once."""
    from gpt import GPT, GPTConfig
    from nn.optim import AdamW

    def train():
        autograd.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=31, block_size=8, n_layer=2, n_head=2, n_embd=64, dropout=0.0))
        opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        rng = np.random.default_rng(0)
        losses = []
        for _ in range(3):
            ids = rng.integers(0, 31, (2, 9))
            _, loss = model(ids[:, :-1], ids[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.item()))
        return losses, {k: v.copy() for k, v in model.state_dict().items()}

    ref_losses, ref_w = train()
    old = acuda.attention_mode()
    acuda.set_attention(mode)
    try:
        with cuda_emulator.emulated_kernels(emu_dir):
            losses, w = train()
    finally:
        acuda.set_attention(old)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for k in ref_w:
        np.testing.assert_allclose(w[k], ref_w[k], atol=3e-4, err_msg=k)


# ---- float16 storage (float32 arithmetic inside the kernels) ------------------------------------
def _half_vs_float64(emu_dir, fn, arrays, tol=2e-2):
    """Fused float16 result (emulated) against the CPU op in float64 on the same rounded inputs."""
    halves = [np.asarray(a, dtype=np.float16) for a in arrays]
    ref, ref_grads, _ = _run(fn, [h.astype(np.float64) for h in halves], np.float64)
    with cuda_emulator.emulated_kernels(emu_dir):
        out, grads, fused = _run(fn, halves, np.float16)
    assert fused
    assert out.dtype == np.float16 and all(g.dtype == np.float16 for g in grads)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=tol, atol=tol)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g.astype(np.float64), r, rtol=tol, atol=tol)


def test_float16_row_kernels(emu_dir):
    x = RNG.standard_normal((4, 50)) * 3
    _half_vs_float64(emu_dir, lambda x: autograd.softmax(x), [x])
    _half_vs_float64(emu_dir, lambda x: autograd.log_softmax(x), [x])
    t = RNG.integers(0, 50, 4)
    _half_vs_float64(emu_dir, lambda x: autograd.cross_entropy(x, t), [x])
    w, b = RNG.standard_normal(50), RNG.standard_normal(50)
    _half_vs_float64(emu_dir, lambda x, w, b: autograd.layer_norm(x, w, b), [x, w, b], tol=5e-2)
    _half_vs_float64(emu_dir, lambda x, w: autograd.rms_norm(x, w), [x, w], tol=5e-2)
    _half_vs_float64(emu_dir, lambda x: autograd.gelu(x), [x])


@pytest.mark.parametrize("mode", ["flash", "matmul"])
def test_float16_attention(emu_dir, mode):
    arrays = [RNG.standard_normal((1, 2, 20, 64)) for _ in range(3)]
    old = acuda.attention_mode()
    acuda.set_attention(mode)
    try:
        _half_vs_float64(emu_dir, lambda q, k, v: autograd.scaled_dot_product_attention(q, k, v), arrays)
    finally:
        acuda.set_attention(old)


def test_float16_training_with_master_weights(emu_dir):
    """nn.amp on the fused float16 kernels: the loss falls, masters stay float32, no skipped steps."""
    from gpt import GPT, GPTConfig
    from nn.amp import MixedPrecision
    from nn.optim import AdamW

    autograd.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=31, block_size=8, n_layer=1, n_head=2, n_embd=64, dropout=0.0))
    amp = MixedPrecision(model)
    opt = AdamW(amp.master_groups(list(model.parameters())), lr=1e-2)
    ids = np.random.default_rng(0).integers(0, 31, (2, 9))
    losses = []
    with cuda_emulator.emulated_kernels(emu_dir):
        for _ in range(8):
            _, loss = model(ids[:, :-1], ids[:, 1:])
            assert loss.dtype == np.float16
            amp.backward(loss)
            amp.step(opt, grad_clip=1.0)
            losses.append(float(loss.item()))
    assert losses[-1] < 0.7 * losses[0]
    assert amp.scaler.skipped == 0 and all(m.dtype == np.float32 for m in amp.masters)


def test_fused_unscale_finds_an_overflow_and_the_step_is_skipped(emu_dir):
    from nn import Linear
    from nn.amp import MixedPrecision
    from nn.optim import SGD

    autograd.manual_seed(0)
    model = Linear(3, 2)
    amp = MixedPrecision(model)
    opt = SGD(amp.master_groups(list(model.parameters())), lr=0.1)
    before = [m.data.copy() for m in amp.masters]
    with cuda_emulator.emulated_kernels(emu_dir):
        model.weight.grad = np.full((3, 2), 2.0 ** 15, dtype=np.float16)
        model.bias.grad = np.array([1.0, np.inf], dtype=np.float16)
        took, norm = amp.step(opt)
        assert not took and norm == float("inf") and amp.scaler.scale == 2.0 ** 14
        for m, b in zip(amp.masters, before):
            np.testing.assert_array_equal(m.data, b)
        model.weight.grad = np.full((3, 2), 2.0 ** 14, dtype=np.float16)   # = 1.0 after unscaling
        model.bias.grad = np.zeros(2, dtype=np.float16)
        took, _ = amp.step(opt)
    assert took
    np.testing.assert_allclose(amp.masters[0].data, before[0] - 0.1, rtol=1e-6)
