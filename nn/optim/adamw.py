"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019), bias-corrected."""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from autograd import cuda
from autograd.cuda import adamw as kernels
from autograd.ops._util import host_floats
from nn.optim.optimizer import Optimizer


class AdamW(Optimizer):
    """For step t (counted per parameter), gradient g, parameter p:

        p *= 1 - lr * weight_decay                 (decoupled: not part of the gradient)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    m and v ("exp_avg", "exp_avg_sq") have the parameter's shape, dtype and device. Groups let
    biases, norms and embeddings use weight_decay=0.0. On the GPU (autograd/cuda/adamw.py) the
    float32 and float64 updates are the host's bit for bit: the same roundings in the same order.
    """

    STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, dict(lr=float(lr), betas=tuple(float(b) for b in betas), eps=float(eps),
                                      weight_decay=float(weight_decay)))
        self._flat: dict = {}   # id(group) -> its FlatAdamW layout (host groups of small parameters)

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        betas = tuple(group["betas"])
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW: betas must be two numbers in [0, 1), got {group['betas']}")
        group["betas"] = betas
        self._check_non_negative(group, "eps", "weight_decay")

    def _update(self, p, g, group: dict, state: dict) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t, m, v = _advance(p, state)
        if cuda.use(p):  # CuPy arrays: one fused kernel per parameter
            return kernels.adamw_update(p, g, m, v, lr, b1, b2, eps, wd, t)
        _adamw_arrays(p, g, m, v, lr, b1, b2, eps, wd, t)

    def _update_group(self, items: list, group: dict) -> None:
        """On the GPU, one launch per dtype, device and step count of the group (usually one)
        instead of one per parameter (a multi-tensor kernel, autograd/cuda/adamw.py). On the host, a
        group of many small parameters updates as flat buffers (FlatAdamW)."""
        if len(items) < 2:
            return super()._update_group(items, group)
        if not cuda.use(items[0][0]):
            if not FlatAdamW.takes(items):
                return super()._update_group(items, group)
            layout = self._flat.get(id(group))
            if layout is None or not layout.holds(items):   # first step, or new states or params
                layout = self._flat[id(group)] = FlatAdamW(items)
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            return layout.update(items, lr, b1, b2, eps, wd)
        from autograd.backend import device_of

        batches: dict = {}
        for p, g, state in items:
            t, m, v = _advance(p, state)
            batches.setdefault((p.dtype, device_of(p), t), []).append((p, g, m, v))
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        for (_, _, t), quads in batches.items():
            kernels.adamw_multi_update(quads, lr, b1, b2, eps, wd, t)


def _advance(p, state: dict) -> tuple:
    """(step t, exp_avg, exp_avg_sq) of a parameter after counting this step; zeros at first."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = p * 0  # zeros with p's shape, dtype and device
        state["exp_avg_sq"] = p * 0
    state["step"] += 1
    return state["step"], state["exp_avg"], state["exp_avg_sq"]


# Elements per pool task of a large parameter's update: its ~14 passes over a block of the pool's
# usual 64 Ki elements are too short to release the GIL for long, so two threads queue on it;
# much larger blocks no longer fit in cache between passes.
CHUNK_ELEMENTS = 1 << 18


def _moments(g, m, v, tmp, lr, b1, b2, eps, t) -> None:
    """m and v of the class docstring updated in place from g, and the step that p adds into tmp
    (p's decay is separate: elementwise, the order of the two does not change a bit). The GPU
    kernel (autograd/cuda/adamw.py) repeats these roundings in this order: change both together."""
    xp = _xp(g)
    xp.multiply(g, 1.0 - b1, out=tmp)
    m *= b1
    m += tmp
    xp.multiply(g, g, out=tmp)
    tmp *= 1.0 - b2
    v *= b2
    v += tmp
    xp.sqrt(v, out=tmp)
    tmp *= 1.0 / math.sqrt(1.0 - b2 ** t)
    tmp += eps
    xp.divide(m, tmp, out=tmp)
    tmp *= -lr / (1.0 - b1 ** t)


def _adamw_arrays(p, g, m, v, lr, b1, b2, eps, wd, t) -> None:
    """The update of the class docstring on backend arrays, in place; NumPy arrays in blocks on
    autograd.parallel's threads (each block's passes in cache, one block-sized scratch)."""
    from autograd import parallel

    def update(p, g, m, v):
        if wd:
            p *= 1.0 - lr * wd
        tmp = _xp(g).empty_like(g)   # the one scratch array of the step
        _moments(g, m, v, tmp, lr, b1, b2, eps, t)
        p += tmp

    if p.size >= parallel.MIN_PARALLEL and all(
            type(a) is np.ndarray and a.flags.c_contiguous for a in (p, g, m, v)):
        # rows of 1024 elements where the size allows (else one row: one block)
        flat = [a.reshape(-1, 1024) if a.size % 1024 == 0 else a.reshape(1, -1) for a in (p, g, m, v)]
        parallel.map_rows(update, *flat, chunk_elements=CHUNK_ELEMENTS)
    else:
        update(p, g, m, v)


class FlatAdamW:
    """A group's update on the host as a few large passes instead of ~14 small ones per parameter:
    the moments of every parameter are views of two flat buffers (exp_avg, exp_avg_sq; so they
    stay the per-parameter state that state_dict saves), the gradients are gathered into a
    third, and the update runs in FLAT_PARTS runs of whole parameters of about equal size, one
    pool task each. Why: a small model's parameters are tens of thousands of numbers, whose
    passes are too short to release the GIL for long, so they cannot share the cores; the same
    arithmetic over long runs can. The same bits as the per-parameter update (the same
    operations, element by element), whatever the thread count (the runs depend on the shapes)."""

    FLAT_MAX = 1 << 22   # elements of a group above which its parameters are large enough alone
    FLAT_PARTS = 4

    @classmethod
    def takes(cls, items: list) -> bool:
        """Whether a group's [(parameter, gradient, state)] updates flat: NumPy float32/64 arrays
        of one dtype, one step count, FLAT_MAX elements at most in all."""
        step = items[0][2].get("step", 0)
        return (host_floats(*(a for p, g, _ in items for a in (p, g)))
                and sum(p.size for p, _, _ in items) <= cls.FLAT_MAX
                and all(s.get("step", 0) == step for _, _, s in items))

    def __init__(self, items: list):
        sizes = [p.size for p, _, _ in items]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        total, dtype = self.offsets[-1], items[0][0].dtype
        self.m, self.v = np.zeros(total, dtype), np.zeros(total, dtype)
        self.g, self.tmp = np.empty(total, dtype), np.empty(total, dtype)
        self.views = []
        for (p, _, state), lo, hi in zip(items, self.offsets, self.offsets[1:]):
            m, v = self.m[lo:hi].reshape(p.shape), self.v[lo:hi].reshape(p.shape)
            if state:                                    # a restored or earlier state: moved in
                m[...], v[...] = state["exp_avg"], state["exp_avg_sq"]
            else:
                state["step"] = 0
            state["exp_avg"], state["exp_avg_sq"] = m, v
            self.views.append((m, v))
        # runs of whole parameters, about total / FLAT_PARTS elements each
        cuts = sorted({int(np.searchsorted(self.offsets, total * k / self.FLAT_PARTS)) for k in
                       range(1, self.FLAT_PARTS)} | {0, len(items)})
        self.parts = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

    def holds(self, items: list) -> bool:
        """Whether these are still the parameters (shapes) and states this layout was built for."""
        return len(items) == len(self.views) and all(
            s.get("exp_avg") is m and s.get("exp_avg_sq") is v and p.shape == m.shape
            for (p, _, s), (m, v) in zip(items, self.views))

    def update(self, items: list, lr, b1, b2, eps, wd) -> None:
        from autograd import parallel

        for _, _, state in items:
            state["step"] += 1
        t, off = items[0][2]["step"], self.offsets

        def run(part_lo, part_hi):
            for a, b in self.parts[part_lo:part_hi]:
                lo, hi = off[a], off[b]
                for (_, g, _), o, e in zip(items[a:b], off[a:b], off[a + 1:b + 1]):
                    self.g[o:e].reshape(g.shape)[...] = g
                _moments(self.g[lo:hi], self.m[lo:hi], self.v[lo:hi], self.tmp[lo:hi], lr, b1, b2, eps, t)
                for (p, _, _), o, e in zip(items[a:b], off[a:b], off[a + 1:b + 1]):
                    if wd:
                        p *= 1.0 - lr * wd
                    p += self.tmp[o:e].reshape(p.shape)

        parallel.for_chunks(run, len(self.parts), off[-1] // max(1, len(self.parts)), step=1)


def _xp(a):
    from autograd.backend import xp_of

    return xp_of(a)
