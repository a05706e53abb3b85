"""Layers' no-graph steps: the autograd ops' own array forwards, called without a graph.

A cached decode step feeds one position per row, so a layer's arithmetic is a few small
products, and the autograd machinery around each op (a Tensor and a node per op, the public
functions' argument checks) costs as much again (benchmarks/bench_sample.py). So each layer the
GPT uses has a `step` on raw backend arrays beside its `forward`. Both run the same op code:
`forward` through the public op (which records the graph), `step` through these helpers, which
call that op's `forward` on arrays. A step therefore cannot compute other math than the forward
it mirrors, and it takes the op's fused GPU kernel where there is one. tests/gpt/test_generate.py
checks the steps of every model variant against the uncached forward.
"""
from __future__ import annotations

from typing import Any

from autograd.ops.activation import GELUErf, GELUTanh, ReLU, SiLU
from autograd.ops.attention import ScaledDotProductAttention
from autograd.ops.matmul import linear_array
from autograd.ops.norm import LayerNorm, RMSNorm
from autograd.ops.rope import Rotate


def linear(x: Any, w: Any, b: Any = None) -> Any:
    """x (..., K) @ w (K, N) + b (N,) -> (..., N)."""
    return linear_array(x, w, b)


def layer_norm(x: Any, w: Any, b: Any, eps: float) -> Any:
    params = [p for p in (w, b) if p is not None]
    return LayerNorm().forward(x, *params, eps=eps, has_w=w is not None, has_b=b is not None)


def rms_norm(x: Any, w: Any, eps: float) -> Any:
    return RMSNorm().forward(x, *([w] if w is not None else []), eps=eps, has_w=w is not None)


def gelu(x: Any, approximate: str = "tanh") -> Any:
    return (GELUTanh if approximate == "tanh" else GELUErf)().forward(x)


def relu(x: Any) -> Any:
    return ReLU().forward(x)


def silu(x: Any) -> Any:
    return SiLU().forward(x)


def rope(x: Any, cos: Any, sin: Any) -> Any:
    return Rotate().forward(x, cos, sin)


def attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """q (B, H, Tq, hs) over k, v (B, H, Tk, hs) -> (B, H, Tq, hs), no dropout."""
    return ScaledDotProductAttention().forward(q, k, v, causal=causal)
