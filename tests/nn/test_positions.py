"""Learned, sinusoidal and rotary positions: formulas, distance properties, offsets, gradients."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
import nn
from autograd import Tensor
from tests.nn.gradcheck_util import check_gradients, f64


def test_sinusoidal_table_follows_the_2017_formula():
    t = nn.sinusoidal_table(50, 8, dtype=np.float64)
    assert t.shape == (50, 8) and t.dtype == np.float64
    pos, i = 7, 2
    angle = pos / 10000 ** (2 * i / 8)
    assert t[pos, 2 * i] == pytest.approx(math.sin(angle)) and t[pos, 2 * i + 1] == pytest.approx(math.cos(angle))
    np.testing.assert_allclose(nn.sinusoidal_table(5, 8, offset=7, dtype=np.float64), t[7:12])
    assert nn.sinusoidal_table(4, 5).shape == (4, 5)  # odd widths work too
    assert nn.sinusoidal_table(3, 4).dtype == np.float32


def test_sinusoidal_vectors_are_distinct_and_their_dot_product_falls_with_distance():
    t = nn.sinusoidal_table(1024, 64, dtype=np.float64)
    sq = (t ** 2).sum(-1)
    dist2 = sq[:, None] + sq[None, :] - 2 * t @ t.T  # squared distances between positions
    assert dist2[~np.eye(1024, dtype=bool)].min() > 1e-3  # every position has its own vector
    # the dot product depends on the distance only ...
    d_from_100, d_from_600 = t[100] @ t[100:400].T, t[600] @ t[600:900].T
    np.testing.assert_allclose(d_from_100, d_from_600, atol=1e-9)
    # ... is largest at distance 0, falls strictly over the first few steps, and falls on average
    assert d_from_100[0] == pytest.approx(32.0) and (d_from_100[1:] < 32.0 - 1e-6).all()
    assert all(a > b for a, b in zip(d_from_100[:6], d_from_100[1:6]))
    bands = [(1, 8), (8, 64), (64, 300)]
    means = [d_from_100[lo:hi].mean() for lo, hi in bands]
    assert means[0] > means[1] > means[2]


def test_sinusoidal_positions_module_has_no_parameters_and_honours_offsets():
    pe = nn.SinusoidalPositions(16, 8)
    assert pe.num_params() == 0 and pe.state_dict() == {}
    np.testing.assert_array_equal(pe(4, offset=3).data, nn.sinusoidal_table(16, 8)[3:7])
    np.testing.assert_array_equal(pe(np.array([[0, 5]])).data, nn.sinusoidal_table(16, 8)[[[0, 5]]])
    with pytest.raises(ValueError, match="positions 14..17 exceed the table's 16 positions"):
        pe(4, offset=14)


def test_learned_positions_rows_and_gradients():
    autograd.manual_seed(0)
    wpe = nn.LearnedPositions(10, 4)
    assert [n for n, _ in wpe.named_parameters()] == ["weight"] and wpe.weight.shape == (10, 4)
    assert abs(wpe.weight.data.std() - 0.02) < 0.01
    np.testing.assert_array_equal(wpe(3, offset=2).data, wpe.weight.data[2:5])
    np.testing.assert_array_equal(wpe(np.array([9, 0])).data, wpe.weight.data[[9, 0]])
    wpe.double()
    check_gradients(lambda: wpe(3, offset=2), [wpe.weight], max_elems=40)
    wpe.weight.grad = None
    wpe(3, offset=2).backward(np.ones((3, 4)))
    assert not wpe.weight.grad[:2].any() and not wpe.weight.grad[5:].any()
    with pytest.raises(ValueError, match="exceed"):
        wpe(11)


def rope_reference(x, offset, base=10000.0):
    """RoPE written out per pair, half-split layout."""
    *_, T, hs = x.shape
    half = hs // 2
    out = np.empty_like(x)
    for t in range(T):
        for i in range(half):
            theta = (offset + t) * base ** (-2 * i / hs)
            a, b = x[..., t, i], x[..., t, i + half]
            out[..., t, i] = a * math.cos(theta) - b * math.sin(theta)
            out[..., t, i + half] = a * math.sin(theta) + b * math.cos(theta)
    return out


def test_rope_matches_the_pairwise_rotation_and_keeps_norms():
    rope = nn.RotaryEmbedding(8, 32)
    x = f64(2, 3, 5, 8)
    y = rope.rotate(x, offset=4).data
    np.testing.assert_allclose(y, rope_reference(x.data, 4), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x.data, axis=-1), rtol=1e-12)
    np.testing.assert_array_equal(rope.rotate(x[:, :, :1], offset=0).data, x.data[:, :, :1])  # position 0: identity
    assert rope.num_params() == 0 and rope.state_dict() == {}


def test_rope_offset_equals_slicing_the_full_sequence():
    rope = nn.RotaryEmbedding(4, 16)
    x = f64(1, 2, 6, 4)
    full = rope.rotate(x).data
    for t in range(6):
        np.testing.assert_allclose(rope.rotate(x[:, :, t:t + 1], offset=t).data, full[:, :, t:t + 1], rtol=1e-13)
    with pytest.raises(ValueError, match="exceed the table's 16 positions"):
        rope.rotate(x, offset=11)


@given(hs=st.sampled_from([2, 4, 8, 16]), m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(0, 60),
       seed=st.integers(0, 2 ** 16))
def test_rope_dot_product_depends_only_on_the_position_difference(hs, m, n, shift, seed):
    rope = nn.RotaryEmbedding(hs, 128)
    rng = np.random.default_rng(seed)
    q = Tensor(rng.standard_normal((1, 1, 1, hs)))
    k = Tensor(rng.standard_normal((1, 1, 1, hs)))

    def score(a, b):
        return float((rope.rotate(q, offset=a).data * rope.rotate(k, offset=b).data).sum())

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), rel=1e-9, abs=1e-9)


def test_rope_gradients_and_fused_equals_composed_primitives():
    rope = nn.RotaryEmbedding(6, 20)
    x = f64(2, 2, 4, 6)
    check_gradients(lambda: rope.rotate(x, offset=3), [x], max_elems=20)

    x.grad = None
    cos = Tensor(rope.cos[3:7])
    sin = Tensor(rope.sin[3:7])
    x1, x2 = x[..., :3], x[..., 3:]
    composed = autograd.concat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    g = np.random.default_rng(1).standard_normal(x.shape)
    composed.backward(g)
    grad_composed, x.grad = x.grad.copy(), None
    fused = rope.rotate(x, offset=3)
    fused.backward(g)
    np.testing.assert_allclose(fused.data, composed.data, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(x.grad, grad_composed, rtol=1e-13, atol=1e-15)


def test_rope_keeps_float32_and_rejects_bad_sizes():
    rope = nn.RotaryEmbedding(4, 8)
    assert rope.rotate(Tensor(np.ones((1, 1, 2, 4), np.float32))).dtype == np.float32
    with pytest.raises(ValueError, match="even head_dim"):
        nn.RotaryEmbedding(5, 8)
    with pytest.raises(ValueError, match=r"expected x \(\.\.\., T, 4\)"):
        rope.rotate(Tensor(np.ones((1, 1, 2, 6))))


def test_the_rope_op_passes_float64_gradcheck_and_its_backward_is_the_inverse_rotation():
    from autograd.ops.rope import rope

    rot = nn.RotaryEmbedding(6, 20)
    cos, sin = rot._tables(np.empty((4, 6)), 2)  # positions 2..5
    x = f64(2, 3, 4, 6)
    report = autograd.gradcheck(lambda t: rope(t, cos, sin), [x], rtol=1e-6, atol=1e-9)
    assert report.ok and report.max_abs_error < 1e-8
    g = np.random.default_rng(3).standard_normal(x.shape)
    x.grad = None
    rope(x, cos, sin).backward(g)
    back = rope(Tensor(x.grad), cos, sin).data  # the forward rotation undoes backward's inverse one
    np.testing.assert_allclose(back, g, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="rope: expected x"):
        rope(x, cos[:3], sin[:3])


def test_rotary_step_on_arrays_equals_rotate_and_module_apply_still_walks_the_tree():
    rot = nn.RotaryEmbedding(4, 16)
    q, k = f64(1, 2, 1, 4), f64(1, 2, 1, 4)
    sq, sk = rot.step(q.data, k.data, 9)
    np.testing.assert_array_equal(sq, rot.rotate(q, offset=9).data)
    np.testing.assert_array_equal(sk, rot(k, offset=9).data)
    seen = []
    rot.apply(seen.append)  # Module.apply(fn), no longer shadowed
    assert seen == [rot]


def _eager_rope_tables(head_dim, n, base=10000.0):
    """The tables as RotaryEmbedding built them up front for all n positions, before they grew lazily."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(n, dtype=np.float64)[:, None] * inv_freq
    return np.cos(angles), np.sin(angles)


def test_a_huge_max_len_or_block_size_costs_memory_only_for_the_positions_used():
    rot = nn.RotaryEmbedding(8, 10**12)  # eager tables would take 64 TB
    pe = nn.SinusoidalPositions(10**12, 8)
    assert rot.cos.nbytes == rot.sin.nbytes == pe.table.nbytes == 0
    rot.rotate(Tensor(np.ones((1, 1, 5, 8))), offset=3)
    pe(4, offset=10)
    assert rot.cos.shape == (8, 4) and pe.table.shape == (14, 8)
    rot.rotate(Tensor(np.ones((1, 1, 1, 8))), offset=8)  # one decode step: the tables double
    assert rot.cos.shape == (16, 4)
    with pytest.raises(ValueError, match="exceed the table's 16 positions"):
        nn.RotaryEmbedding(8, 16).rotate(Tensor(np.ones((1, 1, 1, 8))), offset=16)


def test_tables_grown_step_by_step_hold_the_bits_of_eager_ones():
    cos, sin = _eager_rope_tables(6, 40)
    rot = nn.RotaryEmbedding(6, 40)
    x = np.random.default_rng(0).standard_normal((2, 3, 40, 6))
    full = rot.rotate(Tensor(x)).data
    for max_len in (40, 41, 1000):  # grown one position at a time, as a KV-cached decode does
        rot = nn.RotaryEmbedding(6, max_len)
        steps = [rot.step(x[..., t:t + 1, :], x[..., t:t + 1, :], t)[0] for t in range(40)]
        np.testing.assert_array_equal(np.concatenate(steps, axis=-2), full)
        np.testing.assert_array_equal(rot.cos[:40], cos)
        np.testing.assert_array_equal(rot.sin[:40], sin)
    pe = nn.SinusoidalPositions(64, 10)
    rows = [pe(1, offset=t).data for t in range(64)] + [pe(np.array([[63, 0, 17]])).data[0]]
    table = nn.sinusoidal_table(64, 10)
    np.testing.assert_array_equal(np.concatenate(rows[:64]), table)
    np.testing.assert_array_equal(rows[64], table[[63, 0, 17]])
    np.testing.assert_array_equal(pe.double()(64).data, nn.sinusoidal_table(64, 10, dtype=np.float64))
