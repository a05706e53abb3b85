"""bpe/radix.py: the stable radix sort that the token table and training's hand-over use."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), bits=st.sampled_from([2, 16, 17, 40]))
def test_a_radix_order_is_a_stable_sort(seed, n, bits):
    from bpe.radix import radix_order

    # few distinct values among many: equal ones must keep their order (a small NumPy sort is
    # stable whatever its kind, so the arrays are long)
    values = np.random.default_rng(seed).integers(0, 1 << bits, n) & np.int64(7 << max(bits - 3, 0))
    assert radix_order(values, bits).tolist() == np.argsort(values, kind="stable").tolist()
