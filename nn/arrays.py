"""Layers' no-graph steps: the autograd ops' own array forwards, called without a graph.

A cached decode step feeds one position per row, so a layer's arithmetic is a few small
products, and the autograd machinery around each op (a Tensor and a node per op, the public
functions' argument checks) costs as much again (benchmarks/bench_sample.py). So each layer the
GPT uses has a `step` on raw backend arrays beside its `forward`. Both run the same op code:
`forward` through the public op (which records the graph), `step` through these helpers, which
call the array function that is that op's forward (`layer_norm_array`, `attention_array`, ...).
A step therefore cannot compute other math than the forward it mirrors. On a GPU array the
helpers call the op's forward itself, which takes its fused kernel where it has one; an op
without a GPU kernel needs no helper, its layer's step calls the array function itself
(`linear_array`, `rotate_array`, `silu_array`) or the op's forward (`ReLU().forward`).
tests/gpt/test_generate.py checks the steps of every model variant against the uncached forward.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd.ops.activation import GELUErf, GELUTanh, gelu_tanh_array
from autograd.ops.attention import ScaledDotProductAttention, attention_array
from autograd.ops.norm import LayerNorm, RMSNorm, layer_norm_array, rms_norm_array


def layer_norm(x: Any, w: Any, b: Any, eps: float) -> Any:
    if type(x) is np.ndarray:
        return layer_norm_array(x, w, b, eps)[0]
    params = [p for p in (w, b) if p is not None]
    return LayerNorm().forward(x, *params, eps=eps, has_w=w is not None, has_b=b is not None)


def rms_norm(x: Any, w: Any, eps: float) -> Any:
    if type(x) is np.ndarray:
        return rms_norm_array(x, w, eps)[0]
    return RMSNorm().forward(x, *([w] if w is not None else []), eps=eps, has_w=w is not None)


def gelu(x: Any, approximate: str = "tanh") -> Any:
    if approximate != "tanh":
        return GELUErf().forward(x)
    return gelu_tanh_array(x)[0] if type(x) is np.ndarray else GELUTanh().forward(x)


def attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """q (B, H, Tq, hs) over k, v (B, H, Tk, hs) -> (B, H, Tq, hs), no dropout."""
    if type(q) is np.ndarray:
        return attention_array(q, k, v, causal)[0]
    return ScaledDotProductAttention().forward(q, k, v, causal=causal)
