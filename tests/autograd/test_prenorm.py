"""A fused sublayer with its pre-norm and skip (autograd/ops/prenorm.py: x + f(norm(x)) in one op)
against the same sublayer composed from the engine's primitive ops, float64, forward and every
gradient; against the norm op, the plain fused op and an add, bit for bit; finite differences;
one thread's bits on the pool. Where the GPT block takes it: tests/gpt/test_block_fused.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import causal_attention as ca
from autograd.ops import mlp as mlp_op
from autograd.ops import self_attention as sa
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same, layer_norm_ref, rms_norm_ref
from tests.autograd.test_mlp import _composed as mlp_composed
from tests.autograd.test_self_attention import H, _composed as attn_composed

RNG = np.random.default_rng(17)
EPS = 1e-5


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows (MLP) and query blocks of 16 rows from T = 32 on (attention), so that
    small tests cut several."""
    monkeypatch.setattr(mlp_op, "MIN_ROWS", 3)
    monkeypatch.setattr(mlp_op, "BLOCK_ELEMENTS", 16)
    monkeypatch.setattr(ca, "MIN_ROWS", 16)


def _norm_ref(x, w, b, centered):
    return layer_norm_ref(x, w, b, EPS) if centered else rms_norm_ref(x, w, EPS)


def _mlp_arrays(B, T, C, Hd=10):
    return [RNG.standard_normal((B, T, C)), 1 + 0.3 * RNG.standard_normal(C), RNG.standard_normal(C),
            RNG.standard_normal((C, Hd)), RNG.standard_normal(Hd), RNG.standard_normal((Hd, C)),
            RNG.standard_normal(C)]


def _attn_arrays(B, T, C):
    return [RNG.standard_normal((B, T, C)), 1 + 0.3 * RNG.standard_normal(C), RNG.standard_normal(C),
            0.5 * RNG.standard_normal((C, 3 * C)), RNG.standard_normal(3 * C),
            0.5 * RNG.standard_normal((C, C)), RNG.standard_normal(C)]


def _fused(kind, centered, residual=True, norm_bias=True):
    """fn(x, nw, nb, w1, b1, w2, b2) -> the fused op with its norm (and, with residual, skip)."""
    def fn(x, nw, nb, w1, b1, w2, b2):
        norm = (centered, nw, nb if norm_bias and centered else None, EPS)
        if kind == "mlp":
            return mlp_op.gelu_mlp(x, w1, b1, w2, b2, norm=norm, residual=residual)
        return sa.causal_self_attention(x, w1, b1, w2, b2, H, norm=norm, residual=residual)
    return fn


def _composed(kind, centered, residual=True, norm_bias=True):
    """The same from primitives: the norm composed, then the sublayer composed, then the add."""
    f = mlp_composed if kind == "mlp" else attn_composed

    def fn(x, nw, nb, w1, b1, w2, b2):
        out = f(_norm_ref(x, nw, nb if norm_bias and centered else None, centered), w1, b1, w2, b2)
        return x + out if residual else out
    return fn


def _arrays(kind, B, T, C):
    return _mlp_arrays(B, T, C) if kind == "mlp" else _attn_arrays(B, T, C)


@pytest.mark.parametrize("kind", ["mlp", "attention"])
@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_prenorm_sublayer_equals_the_composed_one(kind, centered, residual):
    arrays = _arrays(kind, 3, 33, 6)
    grads = range(7) if centered else [0, 1, 3, 4, 5, 6]      # an RMSNorm has no shift
    assert_same(_fused(kind, centered, residual), _composed(kind, centered, residual), arrays,
                rtol=1e-9, atol=1e-11, grad_inputs=grads)


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 40), C=st.sampled_from([2, 4, 6]),
       kind=st.sampled_from(["mlp", "attention"]), norm_bias=st.booleans())
def test_prenorm_sublayer_equals_the_composed_one_over_shapes(B, T, C, kind, norm_bias):
    assert_same(_fused(kind, True, True, norm_bias), _composed(kind, True, True, norm_bias),
                _arrays(kind, B, T, C), rtol=1e-9, atol=1e-11,
                grad_inputs=[i for i in range(7) if norm_bias or i != 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [False, True])
@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("kind", ["mlp", "attention"])
def test_prenorm_sublayer_gives_the_norm_op_plain_op_and_add_bit_for_bit(kind, centered, pool, dtype, monkeypatch):
    """The norm's forward and backward are the norm op's own (LayerNorm, or RMSNorm), the
    sublayer's the plain fused op's, the skip the add's: every output and gradient the same bits,
    with C = 12 (not a power of two: sqrt(C) and 1 / sqrt(1 / C) differ in float64). The
    sublayer's blocks each normalise their own rows; with `pool` the norm op runs in row blocks of
    another size, by its large arrays' formula, and the backward rebuilds the norm's output by
    other calls."""
    if pool:
        monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
        monkeypatch.setattr(parallel, "CHUNK_ELEMENTS", 64)
    plain = mlp_op.gelu_mlp if kind == "mlp" else (lambda x, *p: sa.causal_self_attention(x, *p, H))

    def separate(x, nw, nb, w1, b1, w2, b2):
        n = ops.layer_norm(x, nw, nb, eps=EPS) if centered else ops.rms_norm(x, nw, eps=EPS)
        return x + plain(n, w1, b1, w2, b2)

    results = []
    arrays = [a.astype(dtype) for a in _arrays(kind, 4, 40, 12)]
    seed = RNG.standard_normal((4, 40, 12)).astype(dtype)
    for fn in (_fused(kind, centered), separate):
        ts = [Tensor(a.copy(), requires_grad=True) for a in arrays]
        out = fn(*ts)
        out.backward(seed)
        results.append([out.data] + [t.grad for t in ts])
    for i, (a, b) in enumerate(zip(*results)):
        np.testing.assert_array_equal(a, b, err_msg="output" if i == 0 else f"gradient of input {i - 1}")


@pytest.mark.parametrize("kind", ["mlp", "attention"])
def test_prenorm_sublayer_gradients_of_some_inputs_only(kind):
    arrays = _arrays(kind, 2, 9, 4)
    for grads in ([1, 2], [2, 5], [0]):                     # the norm's alone; x alone
        assert_same(_fused(kind, True), _composed(kind, True), arrays, rtol=1e-9, atol=1e-11,
                    grad_inputs=grads)


@pytest.mark.parametrize("kind", ["mlp", "attention"])
@pytest.mark.parametrize("centered", [True, False])
def test_prenorm_sublayer_passes_a_finite_difference_check(kind, centered):
    ts = [Tensor(a, requires_grad=i != 2 or centered)      # an RMSNorm has no shift
          for i, a in enumerate(_arrays(kind, 2, 33 if kind == "attention" else 3, 4))]
    assert gradcheck(_fused(kind, centered), ts)


@pytest.mark.parametrize("kind", ["mlp", "attention"])
def test_prenorm_sublayer_on_the_pool_gives_one_threads_bits(kind, monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    monkeypatch.setattr(parallel, "CHUNK_ELEMENTS", 64)     # the norm in several row blocks too
    arrays = [a.astype(np.float32) for a in _arrays(kind, 5, 40, 8)]
    seed = RNG.standard_normal((5, 40, 8)).astype(np.float32)
    assert_same_bits_on_one_thread_and_two(_fused(kind, True), arrays, seed)


@pytest.mark.parametrize("kind", ["mlp", "attention"])
@pytest.mark.parametrize("centered", [True, False])
def test_prenorm_sublayer_keeps_no_norm_output_between_forward_and_backward(kind, centered, monkeypatch):
    """The norm's output (N, C) is dropped after the forward (here: it is large, from 16 values on)
    and rebuilt from xhat for the first product's weight gradient: the same gradients, and the
    same again from a retained graph."""
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    ts = [Tensor(a.astype(np.float32), requires_grad=True) for a in _arrays(kind, 2, 33, 8)]
    if not centered:
        ts[2] = Tensor(ts[2].data)                           # an RMSNorm has no shift
    seed = RNG.standard_normal((2, 33, 8)).astype(np.float32)
    out = _fused(kind, centered)(*ts)
    node = out._node
    assert node.rows_in is None and node.norm.out is None
    assert node.norm.xhat.shape == (66, 8)
    out.backward(seed, retain_graph=True)
    first = [t.grad.copy() for t in ts if t.requires_grad]
    for t in ts:
        t.grad = None
    out.backward(seed)                                       # the rows rebuilt in the first are kept
    for a, t in zip(first, [t for t in ts if t.requires_grad]):
        np.testing.assert_array_equal(t.grad, a)


def test_residual_needs_as_many_outputs_as_inputs_and_an_rms_norm_no_shift():
    x, nw, nb, w1, b1, _, _ = (Tensor(a) for a in _mlp_arrays(1, 2, 4))
    with pytest.raises(ValueError, match="residual needs Cout = C"):
        mlp_op.gelu_mlp(x, w1, b1, Tensor(np.ones((10, 3))), None, residual=True)
    with pytest.raises(ValueError, match="RMSNorm has no shift"):
        mlp_op.gelu_mlp(x, w1, b1, Tensor(np.ones((10, 4))), None, norm=(False, nw, nb, EPS))
