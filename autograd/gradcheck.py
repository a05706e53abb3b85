"""gradcheck: analytic gradients against central finite differences, in float64.

The scalar checked is sum(out * w) for fixed random weights w (one per output), so every
output element contributes with a different weight and a transposed or mis-summed gradient
cannot cancel out. Each input that requires a gradient is perturbed element by element.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from autograd.grad_mode import enable_grad, no_grad
from autograd.tensor import Tensor


@dataclass
class GradcheckReport:
    """Result of gradcheck: worst errors over all checked inputs and where they occurred."""

    ok: bool
    max_abs_error: float
    max_rel_error: float
    worst_input: int | None = None        # position of the input in `inputs`
    worst_index: tuple | None = None      # element index within that input
    analytic: float | None = None         # the two values at the worst element
    numeric: float | None = None
    checked: list = field(default_factory=list)  # positions of the inputs that were checked

    def __str__(self) -> str:
        where = (
            f" at input {self.worst_input} index {self.worst_index} "
            f"(analytic {self.analytic:.8g}, numeric {self.numeric:.8g})"
            if self.worst_index is not None else ""
        )
        return (f"gradcheck {'passed' if self.ok else 'FAILED'}: max abs error "
                f"{self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}{where}")


def _outputs(result) -> list:
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind in "fc"]


def _values(outs) -> list:
    return [o.numpy().astype(np.float64) for o in outs]


def _weighted_difference(plus, minus, weights) -> float:
    # Differences are taken per element before weighting, so large outputs that do not move
    # (a -1e9 mask fill) cancel exactly instead of drowning the change in rounding error.
    # (an unmoved inf, such as a -inf attention mask, contributes 0 rather than NaN)
    return float(sum((np.where(p == m, 0.0, p - m) * w).sum() for p, m, w in zip(plus, minus, weights)))


def _float64_leaves(inputs: Sequence[Any]) -> tuple[list, list]:
    """The arguments with each input that requires a gradient replaced by a private float64 CPU
    copy (to perturb), and the positions of those inputs."""
    args, checked = [], []
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.requires_grad:
            x = Tensor(np.array(x.numpy(), dtype=np.float64), requires_grad=True)
            checked.append(i)
        args.append(x)
    if not checked:
        raise ValueError("gradcheck: no input requires a gradient (pass Tensors with requires_grad=True)")
    return args, checked


def _backward_of_weighted_sum(fn: Callable[..., Any], args: list, checked: list, seed: int) -> list:
    """Run backward of sum(out * w) over fn's outputs (fills args[i].grad); returns the weights w."""
    with enable_grad():
        outs = _outputs(fn(*args))
    if not outs:
        raise ValueError("gradcheck: fn returned no floating-point Tensor")
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(o.shape) for o in outs]
    loss = None
    for o, w in zip(outs, weights):
        if not o.requires_grad:
            continue
        term = (o * Tensor(w.astype(o.dtype))).sum()
        loss = term if loss is None else loss + term
    for i in checked:
        args[i].grad = None
    if loss is not None:
        loss.backward()
    return weights


def _central_differences(fn: Callable[..., Any], args: list, x: Tensor, weights: list, eps: float):
    """d sum(fn(*args) * w) / dx element by element, as a flat float64 array."""
    flat = x.data.reshape(-1)  # a view: perturbing it perturbs the input
    numeric = np.empty(flat.size)
    with no_grad():
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = _values(_outputs(fn(*args)))
            flat[j] = orig - eps
            minus = _values(_outputs(fn(*args)))
            flat[j] = orig
            numeric[j] = _weighted_difference(plus, minus, weights) / (2 * eps)
    return numeric


def _compare(report: GradcheckReport, worst_excess: float, i: int, x: Tensor, numeric, atol: float,
             rtol: float) -> float:
    """Fold input i's errors into `report`; returns the new worst excess over the tolerance."""
    analytic = x.grad if x.grad is not None else np.zeros_like(x.data)
    a = np.asarray(analytic, dtype=np.float64).reshape(-1)
    abs_err = np.abs(a - numeric)
    rel_err = abs_err / np.maximum(np.abs(numeric), 1e-12)
    excess = abs_err - (atol + rtol * np.abs(numeric))
    excess[~(np.isfinite(a) & np.isfinite(numeric))] = np.inf  # NaN or inf never passes
    if not abs_err.size:
        return worst_excess
    report.max_abs_error = max(report.max_abs_error, float(abs_err.max()))
    report.max_rel_error = max(report.max_rel_error, float(np.where(abs_err > atol, rel_err, 0).max()))
    j = int(np.argmax(excess))
    if excess[j] > worst_excess:
        worst_excess = float(excess[j])
        report.worst_input = i
        report.worst_index = tuple(int(v) for v in np.unravel_index(j, x.shape))
        report.analytic, report.numeric = float(a[j]), float(numeric[j])
    return worst_excess


def gradcheck(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3, seed: int = 0) -> GradcheckReport:
    """Check d sum(fn(*inputs) * w) / d input against central differences.

    `inputs`: Tensors (those with requires_grad=True are checked; they must be float64 and
    on the CPU, or are converted to float64 CPU copies) and any other arguments, passed
    through unchanged. `fn` returns a Tensor or a tuple of Tensors.
    An element fails when |analytic - numeric| > atol + rtol * |numeric|.
    Raises AssertionError naming the worst element on failure; returns a GradcheckReport.
    """
    args, checked = _float64_leaves(inputs)
    weights = _backward_of_weighted_sum(fn, args, checked, seed)
    report = GradcheckReport(ok=True, max_abs_error=0.0, max_rel_error=0.0, checked=checked)
    worst_excess = -np.inf
    for i in checked:
        numeric = _central_differences(fn, args, args[i], weights, eps)
        worst_excess = _compare(report, worst_excess, i, args[i], numeric, atol, rtol)
    report.ok = worst_excess <= 0
    if not report.ok:
        raise AssertionError(str(report))
    return report
