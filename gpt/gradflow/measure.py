"""Per-layer measurements of one forward/backward pass of a GPT: where the gradient goes.

`measure(model, idx, targets)` turns on the blocks' activation records (`GPT.trace`), hooks
the residual stream at every block boundary, runs one backward of the loss and returns, per
block l (0 = bottom, the embeddings' output feeds block 0):

    x_rms            RMS of the residual stream entering block l: ||x_l|| / sqrt(B*T*C)
    grad_norm        ||dL/dx_l||, the Frobenius norm over (B, T, C) of the gradient there
    param_grad_norm  sqrt of the sum of squared gradient norms of block l's parameters
    sublayers        for "attn" and "mlp":
        branch_rms   RMS of the sublayer's contribution F (attn_out / mlp_out in the records)
        grad_in      ||dL/ds|| at the sublayer's input s
        grad_sum     ||dL/du|| at the residual sum u = s + F (None without residual additions)
        id_share     <dL/du, dL/ds> / ||dL/ds||^2
        id_ratio     ||dL/du|| / ||dL/ds||
        id_cos       cosine between dL/du and dL/ds

What "the fraction through the identity path" means. A residual sublayer adds its branch to
its input, u = s + F(N(s)) (pre-norm) or u = s + F(s) followed by a norm (post-norm). At the
addition the gradient splits exactly into two terms,

    dL/ds = dL/du  +  J_branch^T dL/du
            ^ identity path   ^ through the branch (its norm and weights)

so id_share is the scalar projection of dL/ds on the identity term, divided by ||dL/ds||:
id_share + branch_share = 1 with branch_share = <J^T dL/du, dL/ds> / ||dL/ds||^2. A share
near 1 means the gradient reaching s is mostly the one that came straight down the stream;
a share well below 1 means the branch rewrites it (above 1: the branch partly cancels it).
Without residual additions there is no identity term and id_share is None.

In a pre-norm block dL/du is the gradient of the recorded `mid` (attn) or `output` (mlp).
In a post-norm block u is the sum before the norm, which the block does not keep: dL/du is
the vector-Jacobian product of that norm at u = s + F with the gradient of its output, taken
with `autograd.functional.vjp` (the norm's parameter gradients are left untouched).

Hooks (`Tensor.register_hook`) see the summed gradient of a tensor just before the engine
propagates it further, the same array `retain_grad()` would keep; tests check both against
a backward of the network cut at that block.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from autograd import Tensor, no_grad


def _sq(a) -> float:
    """Sum of squares in float64, as a Python float (works for numpy and cupy arrays)."""
    a = a.astype("float64")
    return float((a * a).sum())


def _norm(a) -> float:
    return math.sqrt(_sq(a)) if a is not None else 0.0


def _rms(a) -> float:
    return math.sqrt(_sq(a) / max(a.size, 1))


def _dot(a, b) -> float:
    return float((a.astype("float64") * b.astype("float64")).sum())


def _identity_split(g_sum, g_in) -> dict:
    """id_share, id_ratio, id_cos of the identity term g_sum inside g_in (see module docstring)."""
    n_in, n_sum = _norm(g_in), _norm(g_sum)
    if n_in == 0.0:
        return {"id_share": None, "id_ratio": None, "id_cos": None}
    d = _dot(g_sum, g_in)
    return {
        "id_share": d / (n_in * n_in),
        "id_ratio": n_sum / n_in,
        "id_cos": d / (n_in * n_sum) if n_sum > 0 else 0.0,
    }


def sublayer_numbers(name: str, branch, g_s, g_u) -> dict:
    """The per-sublayer dict of `measure`: branch F's RMS, |dL/ds|, |dL/du| and the identity split
    (g_u None: no residual addition, no identity term). Arrays of one backend, any shape."""
    split = _identity_split(g_u, g_s) if g_u is not None else {"id_share": None, "id_ratio": None, "id_cos": None}
    return {"name": name, "branch_rms": _rms(branch), "grad_in": _norm(g_s),
            "grad_sum": None if g_u is None else _norm(g_u), **split}


def _vjp_keep_param_grads(module, u_data, v):
    """v^T d module(u) / du, leaving the module's parameter .grad as it was."""
    from autograd.functional import vjp

    params = list(module.parameters())
    saved = [p.grad for p in params]
    for p in params:
        p.grad = None if p.grad is None else p.grad.copy()
    try:
        _, g = vjp(module, Tensor(u_data), v)
    finally:
        for p, s in zip(params, saved):
            p.grad = s
    return g


class GradientCatcher:
    """Hooks that keep a copy of the gradient of each registered tensor, by tensor identity."""

    def __init__(self):
        self.grads: dict[int, Any] = {}
        self._handles = []

    def watch(self, t: Tensor) -> None:
        key = id(t)
        if key in self.grads or not t.requires_grad:
            return
        self.grads[key] = None

        def hook(grad, key=key):
            prev = self.grads.get(key)
            self.grads[key] = grad.copy() if prev is None else prev + grad
            return None

        self._handles.append(t.register_hook(hook))

    def grad(self, t: Tensor):
        """The captured gradient of `t` (zeros when no gradient reached it)."""
        g = self.grads.get(id(t))
        return g if g is not None else t.xp.zeros_like(t.data)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def sublayer_gradients(block, record: dict, catcher: GradientCatcher) -> list[dict]:
    """Per sublayer ("attn", "mlp") of one block after backward: the arrays behind the split.

    Each dict holds name, input s (Tensor), branch F (Tensor), grad_in = dL/ds and grad_sum =
    dL/du at the residual sum u (None without residual additions), backend arrays (B, T, C).
    """
    g_in, g_mid, g_out = catcher.grad(record["input"]), catcher.grad(record["mid"]), catcher.grad(record["output"])
    out = []
    sublayers = [("attn", record["input"], record["attn_out"], g_in, g_mid, block.ln_1)]
    if block.mlp is not None:  # an attention-only block (mlp="none") has one sublayer
        sublayers.append(("mlp", record["mid"], record["mlp_out"], g_mid, g_out, block.ln_2))
    for name, s, f, g_s, g_o, norm in sublayers:
        if not block.residual:
            g_u = None
        elif block.prenorm:  # u is the recorded output of the sublayer itself
            g_u = g_o
        else:  # u = s + F was normalised into the output: pull dL/d(out) back through the norm
            g_u = _vjp_keep_param_grads(norm, s.data + f.data, g_o)
        out.append({"name": name, "input": s, "branch": f, "grad_in": g_s, "grad_sum": g_u})
    return out


def traced_backward(model, idx: Any, targets: Any, retain_grad: bool = False):
    """Forward with the blocks' records on, hooks on the stream at every block boundary, backward.

    Returns (loss, records, catcher): records[l] holds block l's Tensors (gpt/block.py names),
    catcher.grad(t) the gradient the hook saw for any of input / mid / output. With
    `retain_grad` those tensors also keep `.grad` (for checking the hooks against it).
    """
    model.zero_grad()
    model.trace(True)
    catcher = GradientCatcher()
    try:
        _, loss = model(idx, targets)
        if loss is None:
            raise ValueError("measuring gradients needs targets (the loss is what is differentiated)")
        records = [dict(r) for r in model.records]
        for r in records:
            for key in ("input", "mid", "output"):
                catcher.watch(r[key])
                if retain_grad:
                    r[key].retain_grad()
        loss.backward()
    finally:
        catcher.remove()
        model.trace(False)
    return loss, records, catcher


def measure(model, idx: Any, targets: Any, per_param: bool = True) -> dict:
    """One forward and backward of `model` on (idx, targets) (B, T) ints; the per-layer numbers.

    Returns {"loss", "grad_out" (||dL/dx|| at the top of the stack), "stream_out" (its RMS),
    "layers": [per-block dict, bottom first], "params": {name: grad norm}}. The model's
    parameter gradients are zeroed first and hold this pass's gradients afterwards.
    """
    blocks = list(model.transformer.h)
    loss, records, catcher = traced_backward(model, idx, targets)
    params = dict(model.named_parameters())
    param_norms = {name: _norm(p.grad) for name, p in params.items()}
    layers = []
    with no_grad():
        for i, (block, r) in enumerate(zip(blocks, records)):
            prefix = f"transformer.h.{i}."
            pg = math.sqrt(sum(v * v for k, v in param_norms.items() if k.startswith(prefix)))
            g_in = catcher.grad(r["input"])
            subs = [sublayer_numbers(sub["name"], sub["branch"].data, sub["grad_in"], sub["grad_sum"])
                    for sub in sublayer_gradients(block, r, catcher)]
            layers.append({"x_rms": _rms(r["input"].data), "grad_norm": _norm(g_in),
                           "param_grad_norm": pg, "sublayers": subs})
    top = records[-1]["output"]
    return {
        "loss": float(loss.item()),
        "grad_out": _norm(catcher.grad(top)),
        "stream_out": _rms(top.data),
        "layers": layers,
        "params": param_norms if per_param else {},
    }


def summarize_run(run: dict) -> dict:
    """Scalars of one measured run that the sweep averages over seeds.

    grad_in   ||dL/dx_0|| at the bottom block's input     grad_out  ||dL/dx|| at the stack's top
    ratio     grad_in / grad_out: the gain of the whole stack on the way down
    factor    exp(-slope) of ln ||dL/dx_l|| fitted against l = 1..L: the per-block gain going down
              (None for one block: a single point has no slope)
    id_share  mean identity share over all residual sublayers (None without residuals)
    """
    from gpt.gradflow.jacobian import log_slope

    g = [layer["grad_norm"] for layer in run["layers"]]
    # Fit over the stream between blocks (inputs of blocks 1..L-1 and the top), top first since
    # the gradient travels downwards. Block 0 is left out: its input is the raw embedding sum,
    # whose small scale (std ~0.02) makes the first norm a one-off gain of ~1/rms(x_0).
    slope = log_slope(list(reversed(g[1:] + [run["grad_out"]])))
    shares = [s["id_share"] for layer in run["layers"] for s in layer["sublayers"] if s["id_share"] is not None]
    return {
        "loss": run["loss"],
        "grad_in": g[0],
        "grad_out": run["grad_out"],
        "ratio": g[0] / run["grad_out"] if run["grad_out"] > 0 else float("nan"),
        "factor": math.exp(slope) if math.isfinite(slope) else None,  # a 1-block stack has no per-block rate
        "id_share": float(np.mean(shares)) if shares else None,
        "stream_out": run["stream_out"],
    }
