"""Half-precision storage on the fused CUDA kernels, run on the CPU through the emulator
(tests/autograd/cuda_emulator.py, as in test_cuda_emulated.py): float16 ops and training with
float32 master weights, loss-scale unscaling, and the bfloat16 conversions (uint16 bit patterns)
against nn.bfloat16, bit for bit. Skips without a C++ compiler."""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import cuda as acuda
from tests.autograd import cuda_emulator
from tests.autograd.test_cuda_emulated import _run, emu_dir  # noqa: F401  (emu_dir: the fixture)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ to emulate the CUDA kernels")]

RNG = np.random.default_rng(1)


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


# ---- bfloat16 storage (uint16 bit patterns; float32 arithmetic inside the kernels) ---------------
def _float32_edge_bits() -> np.ndarray:
    """float32 bit patterns: zeros, infinities, NaNs whose rounding would carry, the largest
    finite values, subnormals, exact ties both ways, and random patterns."""
    special = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
               0x7FFFFFFF, 0xFFFFFFFF, 0x7F80FFFF, 0x7FBFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF,
               0x7F7F8000, 0x7F7F8001, 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF, 0x3F808000,
               0x3F818000, 0x3F807FFF, 0x3F808001, 0x3F800000]
    rand = np.random.default_rng(3).integers(0, 2 ** 32, 20000, dtype=np.uint64)
    return np.concatenate([np.array(special, np.uint64), rand]).astype(np.uint32)


def test_bfloat16_narrowing_kernel_gives_the_bits_of_nn_bfloat16(emu_dir):
    """Round to nearest even, NaN stays a quiet NaN, inf stays, overflow to inf: the same bit
    patterns as the host conversion, from float32, float64 and float16."""
    from autograd.cuda.amp import to_bfloat16
    from nn import bfloat16

    x = _float32_edge_bits().view(np.float32)
    with cuda_emulator.emulated_kernels(emu_dir), np.errstate(over="ignore", invalid="ignore"):
        got = {dt: to_bfloat16(x.astype(dt)) for dt in (np.float32, np.float64, np.float16)}
    for dt, bits in got.items():
        assert bits.dtype == np.uint16
        with np.errstate(over="ignore", invalid="ignore"):   # float16 overflows; NaNs cast
            want = bfloat16.from_float(x.astype(dt))
        np.testing.assert_array_equal(bits, want, err_msg=np.dtype(dt).name)
    b = got[np.float32]
    assert b[2] == 0x7F80 and b[3] == 0xFF80 and b[11] == 0x7F80     # inf, -inf; max float32 overflows
    assert all(b[i] & 0x7FC0 == 0x7FC0 for i in range(4, 11))         # NaNs stay quiet NaNs
    assert b[20] == 0x3F80 and b[21] == 0x3F82                        # ties to even, down and up


def test_bfloat16_widening_kernel_is_exact_for_every_pattern(emu_dir):
    from autograd.cuda.amp import bfloat16_to_float32
    from nn import bfloat16

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    with cuda_emulator.emulated_kernels(emu_dir):
        got = bfloat16_to_float32(bits)
    assert got.dtype == np.float32 and got.shape == bits.shape
    np.testing.assert_array_equal(got.view(np.uint32), bfloat16.to_float32(bits).view(np.uint32))


def test_unscale_takes_bfloat16_gradients(emu_dir):
    from autograd.cuda.amp import unscale_to_float32
    from nn import bfloat16

    g = bfloat16.from_float(RNG.standard_normal((5, 7)).astype(np.float32) * 1024)
    want = bfloat16.to_float32(g) * np.float32(1 / 1024)
    bad = g.copy()
    bad[1, 3] = 0x7F80   # +inf
    flags = np.zeros(1, np.int32), np.zeros(1, np.int32)
    with cuda_emulator.emulated_kernels(emu_dir):
        out = unscale_to_float32(g, 1 / 1024, flags[0])
        unscale_to_float32(bad, 1 / 1024, flags[1])
    np.testing.assert_array_equal(out, want)
    assert flags[0][0] == 0 and flags[1][0] == 1
