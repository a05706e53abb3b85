"""Central-difference gradient checks for modules: parameters and inputs together, in float64."""
from __future__ import annotations

import numpy as np

from autograd import Tensor


def check_gradients(fn, tensors, eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-8,
                    max_elems: int = 8, seed: int = 0) -> float:
    """Compare d(sum(fn() * w))/dt from backward with central differences for each tensor t.

    fn: () -> Tensor, recomputed for every perturbation; tensors: float64 leaves that require
    grad (parameters and inputs). Up to `max_elems` elements of each tensor are probed.
    Returns the worst absolute error; fails with the tensor and element that disagree.
    """
    rng = np.random.default_rng(seed)
    out = fn()
    assert out.dtype == np.float64, f"gradient checks run in float64, got {out.dtype}"
    w = rng.standard_normal(out.shape)
    for t in tensors:
        t.grad = None
    out.backward(w)
    worst = 0.0
    for ti, t in enumerate(tensors):
        analytic = np.zeros(t.shape) if t.grad is None else np.asarray(t.grad)
        flat = t.data.reshape(-1)
        assert np.shares_memory(flat, t.data), "probed tensor must be contiguous"
        picks = rng.choice(flat.size, size=min(max_elems, flat.size), replace=False)
        for i in picks:
            orig = flat[i]
            flat[i] = orig + eps
            up = float((fn().data * w).sum())
            flat[i] = orig - eps
            down = float((fn().data * w).sum())
            flat[i] = orig
            numeric = (up - down) / (2 * eps)
            got = analytic.reshape(-1)[i]
            err = abs(got - numeric)
            worst = max(worst, err)
            assert err <= atol + rtol * abs(numeric), (
                f"tensor {ti} shape {t.shape} element {np.unravel_index(i, t.shape)}: "
                f"analytic {got:.10g} vs numeric {numeric:.10g}"
            )
    return worst


def f64(*shape, seed: int = 0, scale: float = 1.0) -> Tensor:
    """A float64 leaf tensor of normal draws that requires grad."""
    rng = np.random.default_rng(seed)
    return Tensor(rng.standard_normal(shape) * scale, requires_grad=True)


def functional(module):
    """fn(x, *params) that runs `module` on x with its parameters replaced by the given tensors,
    so autograd.gradcheck (which perturbs its own copies of the inputs) can check parameters."""
    slots = []
    for name, _ in module.named_parameters():
        *path, leaf = name.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part)
        slots.append((owner, leaf))

    def fn(x, *params):
        saved = [getattr(owner, leaf) for owner, leaf in slots]
        try:
            for (owner, leaf), p in zip(slots, params):
                object.__setattr__(owner, leaf, p)  # bypass registration: a temporary swap
            return module(x)
        finally:
            for (owner, leaf), p in zip(slots, saved):
                object.__setattr__(owner, leaf, p)

    return fn
