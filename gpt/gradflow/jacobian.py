"""Jacobians of residual blocks: analytic forms in NumPy, computed ones through autograd, spectra.

A block maps one token vector x (C,) to y (C,). With a residual addition y = x + F(x) its
Jacobian is I + J_F; without it, J_F alone. Across a stack the input-output Jacobian is the
product J_L ... J_1, evaluated at the activations each block actually sees. Its singular values
say how a gradient arriving at the top is stretched on its way down: a bare product of L
matrices spreads them geometrically in L; with identity paths they stay near 1.

Convention: J[i, j] = d y_i / d x_j, shape (out, in), as `autograd.functional.jacobian` returns
for vector inputs. Rows are row vectors in the code (y = x @ W), so a linear block has J_F = W^T.

Two block kinds, both on a single token vector:
    "linear":  F(x) = x @ W                                  (no norm)
    "mlp":     F(z) = gelu_tanh(z @ W1 + b1) @ W2 + b2, with a norm N placed by the variant:
               pre-norm  y = x + F(N(x))      (nores: F(N(x)))
               post-norm y = N(x + F(x))      (nores: N(F(x)))
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autograd.ops.activation import GELU_TANH_CUBIC as _GELU_C
from autograd.ops.activation import GELU_TANH_SCALE as _GELU_K
from autograd.ops.norm import LAYER_NORM_EPS
from gpt.gradflow.variants import Variant
from nn.sublayer import sublayer


@dataclass
class BlockParams:
    """Weights of one toy block (float64 NumPy arrays). `W` for linear; W1, b1, W2, b2, g, b for mlp."""

    kind: str
    arrays: dict = field(default_factory=dict)


def init_stack(kind: str, depth: int, width: int, gain: float = 1.0, seed: int = 0,
               hidden: int | None = None) -> list[BlockParams]:
    """`depth` blocks of fan-in initialised weights: W ~ N(0, gain^2 / fan_in), biases 0, norm gains 1."""
    if kind not in ("linear", "mlp"):
        raise ValueError(f"block kind must be 'linear' or 'mlp', got {kind!r}")
    if depth < 1 or width < 1:
        raise ValueError(f"depth and width must be positive, got depth={depth}, width={width}")
    rng = np.random.default_rng(seed)
    hidden = hidden or 4 * width
    blocks = []
    for _ in range(depth):
        if kind == "linear":
            arrays = {"W": rng.standard_normal((width, width)) * gain / math.sqrt(width)}
        else:
            arrays = {
                "W1": rng.standard_normal((width, hidden)) * gain / math.sqrt(width),
                "b1": np.zeros(hidden),
                "W2": rng.standard_normal((hidden, width)) * gain / math.sqrt(hidden),
                "b2": np.zeros(width),
                "g": np.ones(width),
                "b": np.zeros(width),
            }
        blocks.append(BlockParams(kind, arrays))
    return blocks


# ---- analytic pieces (NumPy, float64) ----------------------------------------------------------
def gelu_tanh(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(_GELU_K * (z + _GELU_C * z ** 3)))


def gelu_tanh_grad(z: np.ndarray) -> np.ndarray:
    t = np.tanh(_GELU_K * (z + _GELU_C * z ** 3))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * _GELU_K * (1.0 + 3.0 * _GELU_C * z * z)


def norm_forward(x: np.ndarray, norm: str, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm (with bias b) or RMSNorm (no bias) of a vector x (C,)."""
    if norm == "layernorm":
        n = x - x.mean()
        return g * n / np.sqrt((n * n).mean() + eps) + b
    return g * x / np.sqrt((x * x).mean() + eps)


def norm_jacobian(x: np.ndarray, norm: str, g: np.ndarray, eps: float) -> np.ndarray:
    """d N(x) / dx, (C, C).

    LayerNorm: (g_i / s) (delta_ij - 1/C - xhat_i xhat_j / C) with s = sqrt(var + eps): the mean
    direction and (nearly) the radial direction are projected out, the rest divided by s.
    RMSNorm:   g_i (delta_ij / r - x_i x_j / (C r^3)) with r = sqrt(mean(x^2) + eps).
    """
    c = x.shape[0]
    if norm == "layernorm":
        n = x - x.mean()
        s = math.sqrt((n * n).mean() + eps)
        xhat = n / s
        core = (np.eye(c) - 1.0 / c - np.outer(xhat, xhat) / c) / s
    else:
        r = math.sqrt((x * x).mean() + eps)
        core = np.eye(c) / r - np.outer(x, x) / (c * r ** 3)
    return g[:, None] * core


def branch_forward(p: BlockParams, z: np.ndarray) -> np.ndarray:
    """F(z) of the block, without norm or residual."""
    a = p.arrays
    if p.kind == "linear":
        return z @ a["W"]
    return gelu_tanh(z @ a["W1"] + a["b1"]) @ a["W2"] + a["b2"]


def branch_jacobian(p: BlockParams, z: np.ndarray) -> np.ndarray:
    """J_F at z: W^T (linear) or W2^T diag(gelu'(z W1 + b1)) W1^T (mlp)."""
    a = p.arrays
    if p.kind == "linear":
        return a["W"].T.copy()
    d = gelu_tanh_grad(z @ a["W1"] + a["b1"])
    return (a["W2"].T * d) @ a["W1"].T


def block_forward(p: BlockParams, x: np.ndarray, variant: Variant, eps: float = LAYER_NORM_EPS) -> np.ndarray:
    """The block of x (C,) -> (C,), wired as nn.sublayer wires it (a linear block has no norm)."""
    def norm(z):
        return z if p.kind == "linear" else norm_forward(z, variant.norm, p.arrays["g"], p.arrays["b"], eps)

    return sublayer(x, norm, lambda z: branch_forward(p, z), variant.prenorm, variant.residual)[1]


def block_jacobian(p: BlockParams, x: np.ndarray, variant: Variant, eps: float = LAYER_NORM_EPS) -> np.ndarray:
    """Analytic d block(x) / dx, (C, C): I + J_F with a residual, J_F without (norm placed per variant)."""
    c = x.shape[0]
    eye = np.eye(c)
    if p.kind == "linear":
        jf = branch_jacobian(p, x)
        return eye + jf if variant.residual else jf
    g, b = p.arrays["g"], p.arrays["b"]
    if variant.prenorm:
        jf = branch_jacobian(p, norm_forward(x, variant.norm, g, b, eps)) @ norm_jacobian(x, variant.norm, g, eps)
        return eye + jf if variant.residual else jf
    jf = branch_jacobian(p, x)
    u = x + branch_forward(p, x) if variant.residual else branch_forward(p, x)
    return norm_jacobian(u, variant.norm, g, eps) @ (eye + jf if variant.residual else jf)


# ---- the same blocks on autograd tensors -------------------------------------------------------
def block_fn(p: BlockParams, variant: Variant, eps: float = LAYER_NORM_EPS, residual: bool | None = None):
    """A function Tensor (C,) -> Tensor (C,) computing the block with autograd ops (float64).

    `residual` overrides the variant's flag, so the same weights give the block and its branch.
    """
    import autograd

    res = variant.residual if residual is None else residual
    t = {k: autograd.Tensor(v) for k, v in p.arrays.items()}

    def norm(x):
        if p.kind == "linear":
            return x
        if variant.norm == "layernorm":
            return autograd.layer_norm(x, t["g"], t["b"], eps=eps)
        return autograd.rms_norm(x, t["g"], eps=eps)

    def branch(z):
        if p.kind == "linear":
            return z @ t["W"]
        return (z @ t["W1"] + t["b1"]).gelu(approximate="tanh") @ t["W2"] + t["b2"]

    def fn(x):
        return sublayer(x, norm, branch, variant.prenorm, res)[1]

    return fn


def computed_jacobian(fn, x: np.ndarray) -> np.ndarray:
    """d fn(x) / dx by reverse mode through autograd, reshaped to (out.size, x.size)."""
    import autograd
    from autograd.functional import jacobian

    xt = autograd.Tensor(np.asarray(x, dtype=np.float64))
    jac = jacobian(fn, xt)
    jac = jac.numpy() if hasattr(jac, "numpy") else np.asarray(jac)
    return jac.reshape(-1, xt.size)


# ---- spectra across depth ----------------------------------------------------------------------
def singular_values(j: np.ndarray) -> np.ndarray:
    return np.linalg.svd(j, compute_uv=False)


def stack_spectra(blocks: list[BlockParams], variant: Variant, x0: np.ndarray,
                  method: str = "analytic", eps: float = 1e-5) -> dict:
    """Singular values of each block's Jacobian and of the running product J_l ... J_1.

    Returns {"per_block": [sv (C,) for each block], "product": [sv of the product up to block l],
    "product_max" / "product_median" / "product_min": [one number per l]} as lists; `method`
    "autograd" computes each block's Jacobian by reverse mode instead of the analytic form.
    """
    if method not in ("analytic", "autograd"):
        raise ValueError(f"method must be 'analytic' or 'autograd', got {method!r}")
    x = np.asarray(x0, dtype=np.float64)
    jacs = []
    for p in blocks:
        if method == "analytic":
            jacs.append(block_jacobian(p, x, variant, eps))
        else:
            jacs.append(computed_jacobian(block_fn(p, variant, eps), x))
        x = block_forward(p, x, variant, eps)
    return _spectra(jacs)


def _spectra(jacs) -> dict:
    """Singular values of each Jacobian and of the running product, bottom block first."""
    prod = None
    per_block, product = [], []
    for j in jacs:
        prod = j if prod is None else j @ prod
        per_block.append(singular_values(j))
        product.append(singular_values(prod))
    return {
        "per_block": [s.tolist() for s in per_block],
        "product": [s.tolist() for s in product],
        "product_max": [float(s[0]) for s in product],
        "product_median": [float(np.median(s)) for s in product],
        "product_min": [float(s[-1]) for s in product],
    }


def jacobian_study(kinds=("linear", "mlp"), variants: list[Variant] | None = None, depth: int = 12,
                   width: int = 16, gain: float | None = None, seeds=(0,), method: str = "analytic") -> list[dict]:
    """Spectra for every (kind, variant, seed); linear stacks ignore the norm (one row per residual flag).

    `gain` scales every weight (W ~ N(0, gain^2 / fan_in)); the default 1/sqrt(depth) is the
    depth-scaled initialisation GPT-2 gives its residual projections, under which a residual
    stack's product stays bounded ((1 + 1/L)^(L/2) <= sqrt(e) for linear blocks) while the same
    weights without the additions shrink by about 1/sqrt(L) per block.
    """
    if depth < 1 or width < 1:
        raise ValueError(f"jacobian_study needs depth and width >= 1, got {depth} and {width}")
    variants = variants or [Variant(), Variant(residual=False)]
    gain = 1.0 / math.sqrt(depth) if gain is None else gain
    rows = []
    for kind in kinds:
        seen = set()
        for v in variants:
            key = (v.residual,) if kind == "linear" else (v.prenorm, v.residual, v.norm)
            if key in seen:
                continue
            seen.add(key)
            name = ("residual" if v.residual else "nores") if kind == "linear" else v.name
            for seed in seeds:
                blocks = init_stack(kind, depth, width, gain=gain, seed=seed)
                x0 = np.random.default_rng(10_000 + seed).standard_normal(width)
                spec = stack_spectra(blocks, v, x0, method=method)
                rows.append({"kind": kind, "variant": name, "seed": seed, "depth": depth,
                             "width": width, "gain": gain, **spec})
    return rows


def input_grad_norms(blocks: list[BlockParams], variant: Variant, x0: np.ndarray, cotangent: np.ndarray,
                     eps: float = 1e-5) -> list[float]:
    """||J_{1..l}^T v|| for l = 1..L: the gradient at the input of a stack cut after block l."""
    x = np.asarray(x0, dtype=np.float64)
    prod = np.eye(x.shape[0])
    out = []
    for p in blocks:
        prod = block_jacobian(p, x, variant, eps) @ prod
        out.append(float(np.linalg.norm(prod.T @ cotangent)))
        x = block_forward(p, x, variant, eps)
    return out


def log_slope(values) -> float:
    """Least-squares slope of ln(value) against position 1..n: ln of the per-step growth factor;
    NaN for fewer than 2 values (no rate to fit)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return math.nan
    v = np.maximum(v, np.finfo(np.float64).tiny)
    pos = np.arange(1, v.size + 1, dtype=np.float64)
    return float(np.polyfit(pos, np.log(v), 1)[0])


def gpt_block_spectra(model, idx) -> dict:
    """Spectra of each GPT block's Jacobian with respect to its whole input, at `idx` (1, T).

    A block maps the stream (1, T, C) to (1, T, C); its Jacobian, flattened to (T*C, T*C), is
    computed by reverse mode at the input the block sees in a forward pass of `idx`; the
    product runs from the bottom block up. Same return layout as `stack_spectra`.
    """
    from autograd import Tensor, no_grad
    from autograd.functional import jacobian

    model.trace(True)
    try:
        with no_grad():
            model(idx)
        inputs = [r["input"].data for r in model.records]
    finally:
        model.trace(False)
    n = int(np.prod(inputs[0].shape))

    def jacs():
        for block, x in zip(model.transformer.h, inputs):
            j = jacobian(lambda t, block=block: block(t), Tensor(x))
            yield (j.get() if hasattr(j, "get") else np.asarray(j)).reshape(n, n).astype(np.float64)

    return _spectra(jacs())
