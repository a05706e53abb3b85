"""Gradient flow through nn.Transformer stacks: the 2017 encoder-decoder and the encoder-only model.

The layers of nn/transformer.py keep no activation records, so `StackTrace` turns them on for
one pass from outside: it wraps each layer's `block` (the stream going in and out, and the rest
of the call: masks, memory) and hooks its norms (their input and output Tensors). The sublayer
boundaries follow from nn/transformer.py's wiring. Sublayer k (self-attention, cross-attention
in a decoder layer, feed-forward) adds its branch F_k to the stream s_k, giving the residual
sum u_k = s_k + F_k:

    pre-norm (norm_first)   s_k = input of norm_k                 u_k = s_{k+1} (the layer's output for the last)
    post-norm (2017)        s_1 = the layer's input, s_k = output of norm_{k-1}     u_k = input of norm_k

so dL/du_k is hooked directly (in post-norm u_k is the norm's input), and the identity share at
each sublayer is measure.py's <dL/du, dL/ds> / |dL/ds|^2. A decoder's cross-attention also reads
the memory, which is not s_k: the split at s_k holds as it is.

The encoder's stream gets its gradient from every decoder layer's cross-attention, through the
final encoder norm; the decoder's from the output layer. The per-layer dicts have measure.py's
layout, one list per stack ("encoder", "decoder").
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from autograd import Tensor, no_grad
from gpt.gradflow.measure import GradientCatcher, _norm, _rms, sublayer_numbers

SUBLAYERS = {2: ("self_attn", "ff"), 3: ("self_attn", "cross_attn", "ff")}  # by the layer's norm count


def stacks_of(model) -> list[tuple[str, list, str]]:
    """(name, layers, parameter-name prefix) of each stack, bottom layer first: the encoder and
    decoder of a Seq2Seq (model.transformer), the encoder of an EncoderOnly (model.encoder)."""
    if hasattr(model, "transformer"):
        t = model.transformer
        return [("encoder", list(t.encoder.layers), "transformer.encoder.layers."),
                ("decoder", list(t.decoder.layers), "transformer.decoder.layers.")]
    if hasattr(model, "encoder") and hasattr(model.encoder, "layers"):
        return [("encoder", list(model.encoder.layers), "encoder.layers.")]
    raise TypeError(f"{type(model).__name__} has no nn.Transformer stacks (expected .transformer or .encoder)")


def _norms(layer) -> list:
    return [getattr(layer, f"norm{k}") for k in (1, 2, 3) if hasattr(layer, f"norm{k}")]


@contextmanager
def stack_trace(model):
    """Records every layer's pass while open: yields {stack name: [record per layer]}, each record
    {"input", "output" (Tensors (B, L, C)), "args", "kwargs" (the rest of the block call),
    "norms": [(input, output) per norm call]}. A layer's `block` is restored on exit."""
    records: dict[str, list[dict]] = {}
    handles, wrapped = [], []
    try:
        for name, layers, _ in stacks_of(model):
            records[name] = []
            for layer in layers:
                rec: dict = {"norms": []}
                records[name].append(rec)
                inner = layer.block

                def block(x, *args, _inner=inner, _rec=rec, **kwargs):
                    _rec.update(input=x, args=args, kwargs=kwargs, norms=[])
                    _rec["output"] = _inner(x, *args, **kwargs)
                    return _rec["output"]

                layer.block = block
                wrapped.append(layer)
                for norm in _norms(layer):
                    handles.append(norm.register_forward_hook(
                        lambda m, args, out, _rec=rec: _rec["norms"].append((args[0], out))))
        yield records
    finally:
        for h in handles:
            h.remove()
        for layer in wrapped:
            del layer.block


def sublayer_tensors(layer, rec: dict) -> list[tuple[str, Tensor, Tensor]]:
    """(name, s, u) of each sublayer of one recorded layer pass (see the module docstring)."""
    ins = [i for i, _ in rec["norms"]]
    outs = [o for _, o in rec["norms"]]
    if len(ins) not in SUBLAYERS:
        raise ValueError(f"expected 2 or 3 norm calls in one layer pass, recorded {len(ins)}")
    if layer.norm_first:
        s, u = ins, ins[1:] + [rec["output"]]
    else:
        s, u = [rec["input"]] + outs[:-1], ins
    return list(zip(SUBLAYERS[len(ins)], s, u))


def measure_stacks(model, loss_fn, per_param: bool = True) -> dict:
    """One forward (loss_fn(model) -> scalar loss Tensor, one pass through each stack) and backward.

    Returns {"loss", "stacks": {name: {"layers": [per-layer dict as measure.measure's, bottom
    first], "grad_out": |dL/dx| at the stack's top (last layer's output), "stream_out": its RMS}},
    "params": {name: grad norm}}. Parameter gradients hold this pass's afterwards."""
    model.zero_grad()
    catcher = GradientCatcher()
    try:
        with stack_trace(model) as records:
            loss = loss_fn(model)
        for recs in records.values():
            for rec in recs:
                for t in [rec["input"], rec["output"]] + [x for pair in rec["norms"] for x in pair]:
                    catcher.watch(t)
        loss.backward()
    finally:
        catcher.remove()
    param_norms = {name: _norm(p.grad) for name, p in model.named_parameters()}
    stacks = {}
    with no_grad():
        for name, layers, prefix in stacks_of(model):
            out = []
            for i, (layer, rec) in enumerate(zip(layers, records[name])):
                pg = math.sqrt(sum(v * v for k, v in param_norms.items() if k.startswith(f"{prefix}{i}.")))
                subs = [sublayer_numbers(sub, u.data - s.data, catcher.grad(s), catcher.grad(u))
                        for sub, s, u in sublayer_tensors(layer, rec)]
                out.append({"x_rms": _rms(rec["input"].data), "grad_norm": _norm(catcher.grad(rec["input"])),
                            "param_grad_norm": pg, "sublayers": subs})
            top = records[name][-1]["output"]
            stacks[name] = {"layers": out, "grad_out": _norm(catcher.grad(top)), "stream_out": _rms(top.data)}
    return {"loss": float(loss.item()), "stacks": stacks, "params": param_norms if per_param else {}}


def stack_block_spectra(model, forward) -> dict:
    """Per stack, the spectra of each layer's Jacobian with respect to its stream input, at the
    inputs a no-grad `forward(model)` gives it (memory and masks held fixed), flattened to
    (L*C, L*C); the product runs from the bottom layer up. {stack name: jacobian._spectra layout}."""
    from autograd.functional import jacobian
    from gpt.gradflow.jacobian import _spectra

    with stack_trace(model) as records, no_grad():
        forward(model)
    out = {}
    for name, layers, _ in stacks_of(model):
        recs = records[name]
        n = int(np.prod(recs[0]["input"].shape))

        def jacs(layers=layers, recs=recs, n=n):
            for layer, rec in zip(layers, recs):
                def fn(t, layer=layer, rec=rec):
                    return layer.block(t, *rec["args"], **rec["kwargs"])
                j = jacobian(fn, Tensor(rec["input"].data))
                yield (j.get() if hasattr(j, "get") else np.asarray(j)).reshape(n, n).astype(np.float64)

        out[name] = _spectra(jacs())
    return out
