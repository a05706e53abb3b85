"""Fused ops (softmax, log_softmax, cross_entropy, layer_norm, rms_norm, attention) against the
same functions composed from primitive ops, forward and backward, plus finite differences."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
from autograd import Tensor, gradcheck
from autograd import ops

RNG = np.random.default_rng(1234)


# ---- reference implementations from primitive ops ------------------------------------------
def softmax_ref(x, axis=-1):
    m = Tensor(x.data.max(axis=axis, keepdims=True))  # a constant shift: softmax ignores it
    e = (x - m).exp()
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_ref(x, axis=-1):
    m = Tensor(x.data.max(axis=axis, keepdims=True))
    z = x - m
    return z - z.exp().sum(axis=axis, keepdims=True).log()


def cross_entropy_ref(logits, targets, ignore_index=-100, reduction="mean"):
    V = logits.shape[-1]
    logp = log_softmax_ref(logits.reshape(-1, V))
    t = np.asarray(targets).reshape(-1)
    valid = t != ignore_index
    picked = logp[np.arange(t.size), np.where(valid, t, 0)]           # (N,)
    losses = -picked * Tensor(valid.astype(logits.dtype))
    if reduction == "none":
        return losses.reshape(*np.asarray(targets).shape)
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / float(valid.sum())


def layer_norm_ref(x, w=None, b=None, eps=1e-5):
    xc = x - x.mean(axis=-1, keepdims=True)
    y = xc / ((xc * xc).mean(axis=-1, keepdims=True) + eps).sqrt()
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rms_norm_ref(x, w=None, eps=1e-6):
    y = x / ((x * x).mean(axis=-1, keepdims=True) + eps).sqrt()
    return y * w if w is not None else y


def attention_ref(q, k, v, causal=True, attn_mask=None, scale=None):
    Tq, Tk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    allowed = np.ones((Tq, Tk), dtype=bool)
    if causal:
        allowed &= np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + (Tk - Tq)
    if attn_mask is not None:
        allowed = allowed & attn_mask
    s = s.masked_fill(~np.broadcast_to(allowed, s.shape), -np.inf)
    return softmax_ref(s) @ v


# ---- the comparison helper -----------------------------------------------------------------
def assert_same(fused, composed, arrays, rtol=1e-10, atol=1e-12, grad_inputs=None):
    """Run both functions on fresh float64 leaves; compare outputs and every input gradient."""
    grad_inputs = range(len(arrays)) if grad_inputs is None else grad_inputs
    results = []
    seed = None
    for fn in (fused, composed):
        ts = [Tensor(a.copy(), requires_grad=i in grad_inputs) for i, a in enumerate(arrays)]
        out = fn(*ts)
        if seed is None:
            seed = RNG.standard_normal(out.shape)
        out.backward(seed)
        results.append((out.data, [ts[i].grad for i in grad_inputs]))
    (o1, g1), (o2, g2) = results
    np.testing.assert_allclose(o1, o2, rtol=rtol, atol=atol, err_msg="forward")
    for i, a, b in zip(grad_inputs, g1, g2):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


# ---- softmax / log_softmax -----------------------------------------------------------------
@given(shape=shapes, data=st.data())
def test_softmax_and_log_softmax_match_composed(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = RNG.standard_normal(shape) * 3
    assert_same(lambda t: ops.softmax(t, axis), lambda t: softmax_ref(t, axis), [x])
    assert_same(lambda t: t.log_softmax(axis), lambda t: log_softmax_ref(t, axis), [x])


@given(shape=shapes)
def test_softmax_gradcheck(shape):
    x = Tensor(RNG.standard_normal(shape), requires_grad=True)
    gradcheck(lambda t: ops.softmax(t) * Tensor(np.arange(t.size).reshape(t.shape) + 1.0), [x])
    gradcheck(lambda t: ops.log_softmax(t, axis=0), [x])


def test_softmax_is_stable_for_huge_logits():
    x = Tensor(np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4]], dtype=np.float32))
    y = ops.softmax(x).numpy()
    ly = ops.log_softmax(x).numpy()
    assert np.isfinite(y).all() and np.isfinite(ly).all()
    expected = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(y[0], expected, rtol=1e-6)
    np.testing.assert_allclose(ly[1], [-2e4, -1e4, 0.0], rtol=1e-6)


# ---- cross_entropy -------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lead", [(6,), (2, 3)])
def test_cross_entropy_matches_composed(reduction, lead):
    V = 5
    logits = RNG.standard_normal(lead + (V,)) * 2
    targets = RNG.integers(0, V, size=lead)
    targets.reshape(-1)[[1, 4]] = -100                       # two ignored positions
    assert_same(lambda x: ops.cross_entropy(x, targets, reduction=reduction),
                lambda x: cross_entropy_ref(x, targets, reduction=reduction), [logits])


def test_cross_entropy_in_row_blocks_matches_composed(monkeypatch):
    import autograd.ops.loss as loss_module

    monkeypatch.setattr(loss_module, "_BLOCK_ELEMENTS", 7)   # 1 row per block for V = 5
    logits = RNG.standard_normal((3, 4, 5)) * 4
    targets = RNG.integers(0, 5, size=(3, 4))
    assert_same(lambda x: ops.cross_entropy(x, targets), lambda x: cross_entropy_ref(x, targets), [logits])


def test_cross_entropy_custom_ignore_index_and_values():
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]]))
    targets = np.array([0, 2, 1])
    loss = ops.cross_entropy(Tensor(logits), targets, reduction="none").numpy()
    np.testing.assert_allclose(loss, -np.log([0.5, 0.8, 1 / 3]), rtol=1e-12)
    mean = ops.cross_entropy(Tensor(logits), targets, ignore_index=2).item()
    np.testing.assert_allclose(mean, -(np.log(0.5) + np.log(1 / 3)) / 2, rtol=1e-12)


def test_cross_entropy_check_range_false_skips_only_the_range_check():
    x = RNG.standard_normal((4, 6))
    t = np.array([0, 5, -100, 3])
    want = ops.cross_entropy(Tensor(x), t)
    got = ops.cross_entropy(Tensor(x), t, check_range=False)
    assert got.item() == want.item()
    with pytest.raises(TypeError, match="integer"):
        ops.cross_entropy(Tensor(x), t.astype(float), check_range=False)   # the other checks stay


def test_cross_entropy_all_ignored_gives_nan_and_zero_grad():
    x = Tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    loss = ops.cross_entropy(x, np.full(3, -100))
    assert math.isnan(loss.item())
    loss.backward()
    assert np.all(x.grad == 0)


def test_cross_entropy_keeps_its_exponentials_only_for_a_backward():
    from autograd import no_grad
    from autograd.ops.loss import CrossEntropy

    x = Tensor(RNG.standard_normal((6, 7)).astype(np.float32), requires_grad=True)
    loss = ops.cross_entropy(x, RNG.integers(0, 7, 6))
    assert loss._node.e.shape == (6, 7) and not hasattr(loss._node, "x2")
    with no_grad():
        node = CrossEntropy()
        node.forward(x.data, RNG.integers(0, 7, 6))
    assert node.e is None


def test_cross_entropy_writes_its_last_backward_over_its_saved_exp():
    """Without retain_graph the gradient is the kept exp(x - max) buffer itself (an (N, V) array
    fewer at the peak of a step); with it, a new array, and the buffer stays for the next pass."""
    x = Tensor(RNG.standard_normal((6, 7)).astype(np.float32), requires_grad=True)
    t = RNG.integers(0, 7, 6)
    loss = ops.cross_entropy(x, t)
    kept = loss._node.e
    loss.backward(retain_graph=True)
    assert x.grad is not kept and loss._node.e is kept
    first, x.grad = x.grad.copy(), None
    loss.backward()
    assert x.grad is kept
    np.testing.assert_array_equal(x.grad, first)


def test_cross_entropy_gradient_of_huge_logits_is_the_softmax():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4], [3e4, 3e4, -3e4]], dtype=np.float32)
    t = np.array([2, 0, 1])
    xt = Tensor(x, requires_grad=True)
    ops.cross_entropy(xt, t, reduction="sum").backward(retain_graph=True)
    x64 = x.astype(np.float64)
    p = np.exp(x64 - x64.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(3), t] -= 1
    np.testing.assert_allclose(xt.grad, p, atol=1e-6)
    first = xt.grad.copy()
    xt.grad = None
    loss = ops.cross_entropy(xt, t, reduction="sum")
    loss.backward(retain_graph=True)
    xt.grad = None
    loss.backward()                                   # a retained graph's second backward
    np.testing.assert_array_equal(xt.grad, first)


@given(n=st.integers(1, 4), V=st.integers(1, 6), data=st.data())
def test_cross_entropy_gradcheck(n, V, data):
    targets = np.array(data.draw(st.lists(st.integers(0, V - 1) | st.just(-100), min_size=n, max_size=n)))
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]))
    if reduction == "mean" and np.all(targets == -100):
        targets[0] = 0
    x = Tensor(RNG.standard_normal((n, V)), requires_grad=True)
    gradcheck(lambda t: ops.cross_entropy(t, targets, reduction=reduction), [x])


def test_cross_entropy_bad_input_is_named():
    x = Tensor(np.zeros((2, 3, 5), dtype=np.float32))
    with pytest.raises(ValueError, match=r"targets of shape \(2, 4\).*\(2, 3\)"):
        ops.cross_entropy(x, np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(IndexError, match=r"cross_entropy: target 5 is outside \[0, 5\) \(or ignore_index=-100\)"):
        ops.cross_entropy(x, np.full((2, 3), 5))
    with pytest.raises(IndexError, match=r"target -2 is outside \[0, 5\) \(or ignore_index=-1\)"):
        ops.cross_entropy(x, np.array([[0, -1, -1], [4, -2, 0]]), ignore_index=-1)
    with pytest.raises(TypeError, match="integer"):
        ops.cross_entropy(x, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="reduction"):
        ops.cross_entropy(x, np.zeros((2, 3), dtype=int), reduction="avg")


# ---- layer_norm / rms_norm -----------------------------------------------------------------
@given(shape=shapes, affine=st.sampled_from(["none", "weight", "both", "bias"]))
def test_layer_norm_matches_composed(shape, affine):
    C = shape[-1]
    x = RNG.standard_normal(shape) * 2 + 1
    w = RNG.standard_normal(C) if affine in ("weight", "both") else None
    b = RNG.standard_normal(C) if affine in ("bias", "both") else None
    arrays = [x] + [a for a in (w, b) if a is not None]

    def split(ts):
        it = iter(ts[1:])
        return ts[0], (next(it) if w is not None else None), (next(it) if b is not None else None)

    assert_same(lambda *ts: ops.layer_norm(*split(ts)), lambda *ts: layer_norm_ref(*split(ts)),
                arrays, rtol=1e-9, atol=1e-10)


@given(shape=shapes, with_weight=st.booleans())
def test_rms_norm_matches_composed(shape, with_weight):
    x = RNG.standard_normal(shape)
    if with_weight:
        w = RNG.standard_normal(shape[-1])
        assert_same(lambda a, b: ops.rms_norm(a, b), lambda a, b: rms_norm_ref(a, b), [x, w],
                    rtol=1e-9, atol=1e-10)
    else:
        assert_same(lambda a: ops.rms_norm(a), lambda a: rms_norm_ref(a), [x], rtol=1e-9, atol=1e-10)


@given(rows=st.integers(1, 3), C=st.integers(2, 6))
def test_norms_gradcheck(rows, C):
    x = Tensor(RNG.standard_normal((rows, C)), requires_grad=True)
    w = Tensor(RNG.standard_normal(C), requires_grad=True)
    b = Tensor(RNG.standard_normal(C), requires_grad=True)
    gradcheck(lambda x, w, b: ops.layer_norm(x, w, b), [x, w, b])
    gradcheck(lambda x, w: ops.rms_norm(x, w), [x, w])


def test_norm_weight_of_wrong_shape_is_named():
    x = Tensor(np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"layer_norm: weight of shape \(3,\).*expected \(4,\)"):
        ops.layer_norm(x, Tensor(np.ones(3, dtype=np.float32)))
    with pytest.raises(ValueError, match=r"rms_norm: weight of shape \(4, 1\)"):
        ops.rms_norm(x, Tensor(np.ones((4, 1), dtype=np.float32)))


# ---- attention -----------------------------------------------------------------------------
def _qkv(B=2, H=2, Tq=4, Tk=4, hs=3, hv=None):
    return (RNG.standard_normal((B, H, Tq, hs)), RNG.standard_normal((B, H, Tk, hs)),
            RNG.standard_normal((B, H, Tk, hv or hs)))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("Tq,Tk", [(4, 4), (1, 5), (3, 6)])
def test_attention_matches_composed(causal, Tq, Tk):
    arrays = _qkv(Tq=Tq, Tk=Tk, hv=2)
    assert_same(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=causal),
                lambda q, k, v: attention_ref(q, k, v, causal=causal), arrays)


def test_attention_with_mask_and_scale_matches_composed():
    arrays = _qkv(Tq=3, Tk=5)
    mask = RNG.random((2, 1, 3, 5)) > 0.4
    mask[..., 0] = True                          # every query keeps at least one key
    assert_same(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=True, attn_mask=mask, scale=0.7),
                lambda q, k, v: attention_ref(q, k, v, causal=True, attn_mask=mask, scale=0.7), arrays)


def test_attention_decode_step_equals_last_row_of_full_causal():
    q, k, v = (Tensor(a) for a in _qkv(Tq=6, Tk=6))
    full = ops.scaled_dot_product_attention(q, k, v).numpy()
    for t in range(1, 7):  # a cache holding keys 0..t-1 and the query of position t-1
        step = ops.scaled_dot_product_attention(q[:, :, t - 1:t], k[:, :, :t], v[:, :, :t]).numpy()
        np.testing.assert_allclose(step[:, :, 0], full[:, :, t - 1], rtol=1e-12, atol=1e-12)


def test_attention_fully_masked_query_outputs_zeros_and_finite_grads():
    q, k, v = (Tensor(a, requires_grad=True) for a in _qkv(Tq=4, Tk=2))  # Tq > Tk: first rows see nothing
    out = ops.scaled_dot_product_attention(q, k, v)
    assert np.all(out.numpy()[:, :, :2] == 0)
    out.sum().backward()
    assert all(np.isfinite(t.grad).all() for t in (q, k, v))


@given(B=st.integers(1, 2), Tq=st.integers(1, 3), extra=st.integers(0, 2), hs=st.integers(1, 3),
       causal=st.booleans())
def test_attention_gradcheck(B, Tq, extra, hs, causal):
    q, k, v = (Tensor(a, requires_grad=True) for a in _qkv(B=B, H=1, Tq=Tq, Tk=Tq + extra, hs=hs))
    gradcheck(lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, causal=causal), [q, k, v])


def test_attention_dropout_is_seeded_and_matches_explicit_mask():
    arrays = _qkv(Tq=4, Tk=4)
    p = 0.3

    def fused(q, k, v):
        return ops.scaled_dot_product_attention(q, k, v, dropout_p=p, generator=np.random.default_rng(7))

    probs_shape = (2, 2, 4, 4)
    keep = np.random.default_rng(7).random(probs_shape) >= p

    def composed(q, k, v):
        s = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(3))
        causal = np.tril(np.ones((4, 4), dtype=bool))
        probs = softmax_ref(s.masked_fill(~np.broadcast_to(causal, s.shape), -np.inf))
        return (probs * Tensor(keep / (1 - p))) @ v

    assert_same(fused, composed, arrays)
    q, k, v = (Tensor(a, requires_grad=True) for a in arrays)
    gradcheck(fused, [q, k, v])


def test_attention_bad_shapes_are_named():
    q, k, v = (Tensor(a) for a in _qkv(Tq=3, Tk=4))
    with pytest.raises(ValueError, match="expected q"):
        ops.scaled_dot_product_attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="attn_mask of shape"):
        ops.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 3), dtype=bool))
    with pytest.raises(TypeError, match="boolean"):
        ops.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((3, 4)))


# ---- dtypes --------------------------------------------------------------------------------
def test_fused_ops_keep_float32():
    x = Tensor(RNG.standard_normal((2, 3, 8)).astype(np.float32), requires_grad=True)
    w = Tensor(np.ones(8, dtype=np.float32), requires_grad=True)
    q = x.reshape(2, 1, 3, 8)
    outs = [ops.softmax(x), ops.log_softmax(x), ops.layer_norm(x, w, w), ops.rms_norm(x, w),
            ops.scaled_dot_product_attention(q, q, q, dropout_p=0.1),
            ops.cross_entropy(x, np.zeros((2, 3), dtype=np.int64))]
    total = outs[-1]
    for o in outs:
        assert o.dtype == np.float32
        total = total + o.sum()
    total.backward()
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32


def _half_and_float64(fn, arrays):
    """fn on float16 tensors and on float64 tensors of the same (rounded) values: outputs and
    gradients of a weighted sum, as float64 arrays."""
    results = []
    for dtype in (np.float16, np.float64):
        ts = [Tensor(np.asarray(a, dtype=np.float16).astype(dtype), requires_grad=True) for a in arrays]
        out = fn(*ts)
        assert out.dtype == dtype
        w = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
        (out * Tensor(w)).sum().backward()
        assert all(t.grad.dtype == dtype for t in ts)
        results.append([out.numpy().astype(np.float64)] + [t.grad.astype(np.float64) for t in ts])
    return results


def test_float16_cross_entropy_sums_in_float32():
    x = Tensor(np.zeros((20000, 200), dtype=np.float16), requires_grad=True)
    loss = ops.cross_entropy(x, np.zeros(20000, dtype=np.int64))
    assert loss.dtype == np.float16
    assert loss.item() == pytest.approx(math.log(200), rel=1e-3)
    loss.backward()
    # 1 / (200 * 20000) = 2.5e-7 is a float16 subnormal (steps of 6e-8)
    np.testing.assert_allclose(x.grad[:, 1].astype(np.float64), 1 / 200 / 20000, rtol=0.1)
    assert np.isfinite(x.grad).all()
    per_row = ops.cross_entropy(Tensor(np.zeros((3, 100000), dtype=np.float16)), np.zeros(3, dtype=np.int64),
                                reduction="none")
    np.testing.assert_allclose(per_row.numpy().astype(np.float64), math.log(100000), rtol=1e-3)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_float16_cross_entropy_matches_float64(reduction):
    x = RNG.standard_normal((300, 50)) * 3
    t = RNG.integers(0, 50, 300)
    half, ref = _half_and_float64(lambda x: ops.cross_entropy(x, t, reduction=reduction), [x])
    for h, r in zip(half, ref):
        np.testing.assert_allclose(h, r, rtol=2e-2, atol=2e-3 * max(1.0, np.abs(r).max()))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_float16_softmax_of_a_long_row_sums_in_float32(name):
    x = RNG.standard_normal((2, 70000))        # 70,000 exp terms: more than float16's 65504
    half, ref = _half_and_float64(getattr(ops, name), [x])
    assert all(np.isfinite(h).all() for h in half)
    np.testing.assert_allclose(half[0], ref[0], rtol=1e-2, atol=1e-2 * np.abs(ref[0]).max())
    np.testing.assert_allclose(half[1], ref[1], rtol=5e-2, atol=5e-2 * np.abs(ref[1]).max())


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_float16_norms_of_large_values_and_many_rows(name):
    # |x| > 256 squares past float16's range; 40,000 rows of weight gradient sum past 2048,
    # where adding a float16 1 no longer changes a float16 sum
    x = RNG.standard_normal((40000, 4)) * 50 + 400
    w = RNG.uniform(0.5, 1.5, 4)
    half, ref = _half_and_float64(lambda x, w: getattr(ops, name)(x, w), [x, w])
    for h, r in zip(half, ref):
        assert np.isfinite(h).all()
        np.testing.assert_allclose(h, r, rtol=3e-2, atol=3e-2 * np.abs(r).max())


def test_exports_and_methods():
    x = Tensor(RNG.standard_normal((2, 3)))
    for name in ("softmax", "log_softmax", "cross_entropy", "layer_norm", "rms_norm",
                 "scaled_dot_product_attention"):
        assert getattr(autograd, name) is getattr(ops, name)
    np.testing.assert_allclose(x.softmax(0).numpy(), ops.softmax(x, axis=0).numpy())


# ---- GPU -----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not autograd.cuda_available(), reason="needs CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cross_entropy", "layer_norm", "rms_norm",
                                  "attention", "attention_mask"])
def test_fused_ops_on_gpu_match_cpu(name):
    x = RNG.standard_normal((2, 3, 4, 5))
    w, b = RNG.standard_normal(5), RNG.standard_normal(5)
    targets = RNG.integers(0, 5, size=(6, 4))
    targets[0, 0] = -100
    mask = RNG.random((2, 1, 4, 4)) > 0.3
    fns = {
        "softmax": (lambda x, w, b: ops.softmax(x, axis=1)),
        "log_softmax": (lambda x, w, b: ops.log_softmax(x)),
        "cross_entropy": (lambda x, w, b: ops.cross_entropy(x.reshape(6, 4, 5), targets)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b)),
        "rms_norm": (lambda x, w, b: ops.rms_norm(x, w)),
        "attention": (lambda x, w, b: ops.scaled_dot_product_attention(x[:, :, :2], x, x * 0.5)),
        "attention_mask": (lambda x, w, b: ops.scaled_dot_product_attention(
            x[..., :4], x[..., 1:], x, causal=False, attn_mask=mask)),
    }
    results = []
    for device in ("cpu", "cuda"):
        ts = [Tensor(a, requires_grad=True, device=device) for a in (x, w, b)]
        out = fns[name](*ts)
        out.backward(Tensor(np.ones(out.shape), device=device).data)
        results.append([out.numpy()] + [t.grad if device == "cpu" else t.grad.get() for t in ts if t.grad is not None])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-9, atol=1e-12)
