"""autograd.sums: sums over one axis as BLAS products equal NumPy's sums, and a row's sum does
not depend on the rows around it."""
import numpy as np
import pytest

from autograd import sums


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 7), (37, 128), (3, 5, 65)])
def test_sums_equal_numpys(dtype, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    ref = x.astype(np.float64)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sums.row_sums(x), ref.sum(axis=-1, keepdims=True), **tol)
    np.testing.assert_allclose(sums.down_sums(x), ref.sum(axis=-2, keepdims=True), **tol)
    x2 = x.reshape(-1, shape[-1])
    np.testing.assert_allclose(sums.column_sums(x2), ref.reshape(-1, shape[-1]).sum(axis=0), **tol)
    out = np.empty(shape[-1], dtype=dtype)
    assert sums.column_sums(x2, out) is out
    for got in (sums.row_sums(x), sums.down_sums(x), sums.column_sums(x2)):
        assert got.dtype == dtype


def test_a_rows_sum_is_the_same_bits_alone_and_among_others():
    x = np.random.default_rng(1).standard_normal((300, 384)).astype(np.float32)
    whole = sums.row_sums(x)
    for i in (0, 7, 299):
        assert sums.row_sums(x[i:i + 1])[0, 0] == whole[i, 0]
        assert sums.row_sums(x[i])[0] == whole[i, 0]


def test_float16_sums_accumulate_in_float32():
    x = np.full((4, 3000), 30.0, dtype=np.float16)   # 90,000 per row: past float16's 65504
    np.testing.assert_array_equal(sums.row_sums(x), np.full((4, 1), 90000.0, dtype=np.float32))
    np.testing.assert_array_equal(sums.down_sums(x.T), np.full((1, 4), 90000.0, dtype=np.float32))


def test_the_ones_are_read_only():
    with pytest.raises(ValueError):
        sums.ones(5, "<f4")[0] = 2.0
