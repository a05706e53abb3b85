"""A stable sort of integer keys by radix, in NumPy: a few linear passes where a comparison
sort takes n log n (NumPy sorts 16-bit keys stably by radix; wider keys go 16 bits at a time)."""
from __future__ import annotations

import numpy as np


def radix_order(values: np.ndarray, bits: int) -> np.ndarray:
    """The stable order (intp) that sorts ``values`` (integers, each in 0 .. 2**bits - 1): an LSD
    radix sort by 16-bit digits, each digit one NumPy radix sort; equal values keep their order."""
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    for shift in range(16, bits, 16):
        digit = ((values[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
    return order
