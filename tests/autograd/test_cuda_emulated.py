"""The fused CUDA kernels, run on the CPU through a C++ emulation of the CUDA execution model.

tests/autograd/cuda_emulator.py compiles the very kernel sources of autograd/cuda with g++
(threads for CUDA threads, barriers for __syncthreads and warp shuffles) and patches
autograd.cuda so that each op's GPU branch (its Python glue and its kernels) runs on NumPy
arrays. Each fused op is compared, forward and backward, with the op's CPU code; so are AdamW's
kernels (bit for bit) and the fused sublayers' GPU forms (with NumPy's matmul for cuBLAS's).
float16 and bfloat16 storage: test_cuda_emulated_precision.py. This checks
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


ADAMW_SHAPES = [(7, 5), (300,), (13, 11), (1,), (130,), (2, 33)]


def _adamw_run(emu_dir, dtype, emulate, per_parameter=False, steps=3):
    """(weights, [(exp_avg, exp_avg_sq)]) after `steps` AdamW steps of parameters of
    ADAMW_SHAPES in two weight-decay groups (the same numbers each call), on NumPy or on the
    emulated kernels; per_parameter: one group per parameter (one adamw_step launch each)."""
    from nn import Parameter
    from nn.optim import AdamW

    rng = np.random.default_rng(5)
    ps = [Parameter(rng.standard_normal(s).astype(dtype)) for s in ADAMW_SHAPES]
    grads = [[(rng.standard_normal(s) * 10.0 ** rng.integers(-4, 2)).astype(dtype) for s in ADAMW_SHAPES]
             for _ in range(steps)]
    h = len(ps) // 2
    groups = [{"params": ps[:h], "weight_decay": 0.1}, {"params": ps[h:], "weight_decay": 0.0}]
    if per_parameter:
        groups = [{"params": [p], "weight_decay": g["weight_decay"]} for g in groups for p in g["params"]]
    opt = AdamW(groups, lr=1e-2, betas=(0.9, 0.95))
    with (cuda_emulator.emulated_kernels(emu_dir) if emulate else _nothing()):
        for gs in grads:
            for p, g in zip(ps, gs):
                p.grad = g.copy()
            opt.step()
    st = opt.state_dict()["state"]
    moments = [(st[i]["exp_avg"].copy(), st[i]["exp_avg_sq"].copy()) for i in range(len(ps))]
    return [p.data.copy() for p in ps], moments


def _assert_same_bits(got, want):
    for (w1, m1), (w0, m0) in zip(zip(*got), zip(*want)):
        np.testing.assert_array_equal(w1, w0)
        np.testing.assert_array_equal(m1[0], m0[0])
        np.testing.assert_array_equal(m1[1], m0[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adamw_kernels_give_the_numpy_update_bit_for_bit(emu_dir, dtype):
    """The per-parameter kernel and the multi-tensor kernel: the very bits of the host update
    (per parameter and flat), weights and both moments, float32 and float64."""
    host = _adamw_run(emu_dir, dtype, emulate=False)
    _assert_same_bits(_adamw_run(emu_dir, dtype, emulate=False, per_parameter=True), host)
    _assert_same_bits(_adamw_run(emu_dir, dtype, emulate=True, per_parameter=True), host)
    _assert_same_bits(_adamw_run(emu_dir, dtype, emulate=True), host)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adamw_updates_a_group_in_one_multi_tensor_launch(emu_dir, monkeypatch, dtype):
    """Small chunks, so tensors span several and end mid-chunk: one launch per group and step,
    the same bits as the host update."""
    import autograd.cuda.adamw as m_adamw

    monkeypatch.setattr(m_adamw, "CHUNK", 64)
    launches = []
    host = _adamw_run(emu_dir, dtype, emulate=False)
    with cuda_emulator.emulated_kernels(emu_dir):
        get = m_adamw.get_kernel   # the emulator's; restored before the block restores the real one
        m_adamw.get_kernel = lambda *a, **k: launches.append(a[1]) or get(*a, **k)
        try:
            got = _adamw_run(emu_dir, dtype, emulate=False)   # inside this block: the emulated kernels
        finally:
            m_adamw.get_kernel = get
    assert launches == ["adamw_multi"] * 6
    _assert_same_bits(got, host)


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


# ---- the fused sublayers' GPU forms (autograd/ops/mlp, self_attention, prenorm on the kernels) ---
def _sublayer_fns(kind, norm, residual):
    """(the fused sublayer, the same composed from primitives) over (x, nw, nb, w1, b1, w2, b2)
    (tests/autograd/test_prenorm.py's arrays); norm None: no norm, nw and nb unused."""
    from tests.autograd import test_prenorm as tp

    if norm is not None:
        return tp._fused(kind, norm == "layer", residual), tp._composed(kind, norm == "layer", residual)
    from autograd.ops import mlp as mlp_op
    from autograd.ops import self_attention as sa
    from tests.autograd.test_mlp import _composed as mlp_composed
    from tests.autograd.test_self_attention import H, _composed as attn_composed

    def fused(x, nw, nb, w1, b1, w2, b2):
        if kind == "mlp":
            return mlp_op.gelu_mlp(x, w1, b1, w2, b2, residual=residual)
        return sa.causal_self_attention(x, w1, b1, w2, b2, H, residual=residual)

    def composed(x, nw, nb, w1, b1, w2, b2):
        out = (mlp_composed if kind == "mlp" else attn_composed)(x, w1, b1, w2, b2)
        return x + out if residual else out
    return fused, composed


def _sublayer_run(fn, arrays, dtype, seed):
    """(how the output's op ran: (GPU form?, attention mode or None), output, {input: gradient})."""
    ts = [Tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    out = fn(*ts)
    node = out._node
    how = (getattr(node, "device", False), getattr(getattr(node, "attn", None), "mode", None))
    out.backward(seed.astype(dtype))   # releases the node's saved state
    used = [i for i, t in enumerate(ts) if t.grad is not None]
    return how, out.data.astype(np.float64), {i: ts[i].grad.astype(np.float64) for i in used}


@pytest.mark.parametrize("kind,mode", [("mlp", None), ("attention", "matmul"), ("attention", "flash")])
@pytest.mark.parametrize("norm", [None, "layer", "rms"])
@pytest.mark.parametrize("residual", [True, False])
def test_fused_sublayer_gpu_form_equals_the_composed_ops(emu_dir, kind, norm, residual, mode):
    """The GPU form (whole-array products, the norm, GELU and attention kernels) on the emulated
    kernels, NumPy's matmul standing in for cuBLAS's, against the primitives composed on the
    CPU: forward and every gradient; float64 (flash: float32, its kernels' dtypes)."""
    from tests.autograd import test_prenorm as tp

    dtype, tol = (np.float32, 3e-5) if mode == "flash" else (np.float64, 1e-9)
    arrays = tp._arrays(kind, 2, 9, 64 if mode == "flash" else 8)   # flash: hs = 32 (2 heads)
    fused, composed = _sublayer_fns(kind, norm, residual)
    seed = np.random.default_rng(2).standard_normal((2, 9, arrays[0].shape[-1]))
    _assert_gpu_form_equals(emu_dir, fused, composed, arrays, seed, dtype, tol, mode)


def _assert_gpu_form_equals(emu_dir, fused, composed, arrays, seed, dtype, tol, mode):
    """fused on the emulated kernels (attention `mode`, or None: the current one) in `dtype`
    took its GPU form and equals composed on the CPU in float64, forward and every gradient."""
    _, ref, ref_grads = _sublayer_run(composed, arrays, np.float64, seed)
    old = acuda.attention_mode()
    acuda.set_attention(mode or old)
    try:
        with cuda_emulator.emulated_kernels(emu_dir):
            out, got, grads = _sublayer_run(fused, arrays, dtype, seed)
    finally:
        acuda.set_attention(old)
    assert out == (True, mode), "the op did not take its GPU form"
    close = lambda a, b, what: np.testing.assert_allclose(  # noqa: E731  (float32: to the array's scale)
        a, b, rtol=tol, atol=tol * (np.abs(b).max() if dtype == np.float32 else 1.0), err_msg=what)
    close(got, ref, "forward")
    assert set(grads) == set(ref_grads)
    for i in ref_grads:
        close(grads[i], ref_grads[i], f"gradient of input {i}")


@pytest.mark.parametrize("block, mlp_op", [({}, "GeluMLP"),
                                           (dict(pos="rope", norm="rmsnorm", mlp="swiglu", bias=False), "SwiGLUMLP")])
def test_gpt_block_takes_the_fused_gpu_forms(emu_dir, block, mlp_op):
    """Block._fuses on arrays that take the kernels: two nodes, the two sublayers' GPU forms
    (GPT-2's block and LLaMA's)."""
    from gpt import GPT, GPTConfig
    from gpt.model.block import Block

    autograd.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=31, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, **block))
    block = next(m for m in model.modules() if isinstance(m, Block))
    x = Tensor(RNG.standard_normal((2, 5, 16)).astype(np.float32), requires_grad=True)
    with cuda_emulator.emulated_kernels(emu_dir):
        assert block._fuses(x)
        out = block(x)
    mlp_node = out._node
    assert type(mlp_node).__name__ == mlp_op and mlp_node.device
    assert type(mlp_node.parents[0]).__name__ == "CausalSelfAttention" and mlp_node.parents[0].device


@pytest.mark.parametrize("mode", ["matmul", "flash"])
@pytest.mark.parametrize("norm", [None, "rms"])
def test_fused_sublayer_gpu_form_with_rope_equals_the_composed_ops(emu_dir, norm, mode):
    """The GPU form with RoPE (q, k rotated after the projection, dq, dk rotated back, as
    whole-array ops) on the emulated kernels against the primitives with the rope op composed
    on the CPU: forward and every gradient; float64 (flash: float32)."""
    from tests.autograd import test_self_attention as tsa

    dtype, tol = (np.float32, 3e-5) if mode == "flash" else (np.float64, 1e-9)
    C, T = (64, 9) if mode == "flash" else (8, 9)   # flash: hs = 32 (2 heads)
    arrays = tsa._norm_arrays(2, T, C)
    cos, sin = tsa.rope_tables(T, C // tsa.H)
    fused = tsa._with_rope((cos.astype(dtype), sin.astype(dtype)), norm, residual=norm is not None)[0]
    composed = tsa._with_rope((cos, sin), norm, residual=norm is not None)[1]
    seed = np.random.default_rng(2).standard_normal((2, T, C))
    _assert_gpu_form_equals(emu_dir, fused, composed, arrays, seed, dtype, tol, mode)
