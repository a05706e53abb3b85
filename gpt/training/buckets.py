"""The gradients of a data-parallel run in a few large flat buffers, so that each all-reduce
(gpt.training.dist) moves one contiguous buffer instead of one small one per parameter."""
from __future__ import annotations

import numpy as np

DEFAULT_BUCKET_BYTES = 32 * 1024 * 1024


class GradientBuckets:
    """Flat buffers holding the gradients of consecutive parameters, a few large ones per model.

    Parameters are grouped in order, per dtype, until a bucket holds `bucket_bytes`; each
    all-reduce then moves one large contiguous buffer instead of one small one per parameter.
    A bucket of n parameters holding sizes s_1..s_n is laid out as
        [grad_1 (s_1) | ... | grad_n (s_n) | has_grad (n)]
    where has_grad is 1 for a parameter whose .grad is set on this rank: after the sum, a
    parameter that had no gradient on any rank keeps .grad None (as on one process, so the
    optimizer skips it), and one that had a gradient on some rank gets the average.
    """

    def __init__(self, params: list, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        from autograd.backend import xp_of

        seen: set[int] = set()
        self.params = []
        for p in params:  # a shared (tied) parameter once
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                self.params.append(p)
        if not self.params:
            raise ValueError("no parameters that require gradients to all-reduce")
        xp = xp_of(self.params[0].data)
        self.xp = xp
        self.on_gpu = xp is not np
        self.groups: list[list] = []
        current: list = []
        size = 0
        for p in self.params:
            if current and (size + p.data.nbytes > bucket_bytes or p.data.dtype != current[0].data.dtype):
                self.groups.append(current)
                current, size = [], 0
            current.append(p)
            size += p.data.nbytes
        self.groups.append(current)
        self.flats = [xp.empty(sum(p.data.size for p in g) + len(g), dtype=g[0].data.dtype) for g in self.groups]

    def pack(self) -> None:
        """Copy every .grad into its bucket (zeros and has_grad 0 where .grad is None)."""
        for group, flat in zip(self.groups, self.flats):
            offset = 0
            for p in group:
                n = p.data.size
                if p.grad is None:
                    flat[offset:offset + n] = 0
                else:
                    flat[offset:offset + n] = p.grad.reshape(-1)
                offset += n
            has = np.array([p.grad is not None for p in group], dtype=flat.dtype)
            flat[offset:] = has if not self.on_gpu else self.xp.asarray(has)  # one copy, not one per flag

    def unpack(self, scale: float) -> None:
        """Set every .grad to `scale` times its bucket slice (None where no rank had one)."""
        for group, flat in zip(self.groups, self.flats):
            flags = flat[flat.size - len(group):]
            has = [bool(f) for f in (flags.get() if self.on_gpu else flags)]  # one sync per bucket
            values = flat[:flat.size - len(group)]
            values *= values.dtype.type(scale)
            offset = 0
            for p, had in zip(group, has):
                n = p.data.size
                if had:
                    view = values[offset:offset + n].reshape(p.data.shape)
                    if p.grad is None or p.grad.shape != p.data.shape or p.grad.dtype != view.dtype:
                        p.grad = view.copy()
                    else:
                        p.grad[...] = view
                offset += n
