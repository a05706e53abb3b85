"""Named hook points on the GPT's own forward: read (cache) or replace activations by name.

Every layer that has points holds `HOOKS` (their local names) and a `hook` attribute, None
unless an inspection runs: then the layer takes its composed path (no fused op) and passes each
point's Tensor through `hook(local_name, tensor)`. `attached` sets those attributes for one
forward and clears them afterwards, even on an error, so a model without hooks runs exactly as
before. The names, in the order the forward reaches them (B batch, T tokens, C n_embd, H heads,
Hkv key/value heads, hs head size, F the MLP's hidden width):

    hook_embed                       (B, T, C)    token embeddings (before positions)
    hook_pos_embed                   (T, C)       position rows added (learned / sinusoidal only)
    blocks.{i}.hook_resid_pre        (B, T, C)    the stream entering block i
    blocks.{i}.ln1.hook_scale        (B, T, 1)    1 / sqrt(var + eps) of ln_1 (mean square for RMSNorm)
    blocks.{i}.ln1.hook_normalized   (B, T, C)    ln_1's input centred (LayerNorm) and scaled, before the gain
    blocks.{i}.attn.hook_q           (B, H, T, hs)    queries after qk_norm and RoPE
    blocks.{i}.attn.hook_k           (B, Hkv, T, hs)  keys, likewise (every key the queries see)
    blocks.{i}.attn.hook_v           (B, Hkv, T, hs)  values
    blocks.{i}.attn.hook_attn_scores (B, H, T, T) q k^T / sqrt(hs), -inf where the mask forbids
    blocks.{i}.attn.hook_pattern     (B, H, T, T) softmax of the scores: rows sum to 1
    blocks.{i}.attn.hook_z           (B, H, T, hs)    each head's output, before c_proj
    blocks.{i}.hook_attn_out         (B, T, C)    the attention sublayer's output (added to the stream)
    blocks.{i}.hook_resid_mid        (B, T, C)    the stream between the sublayers
    blocks.{i}.ln2.hook_scale, .ln2.hook_normalized   as ln1's, for ln_2
    blocks.{i}.mlp.hook_pre          (B, T, F)    c_fc's output (SwiGLU: the gate, and hook_pre_linear the up)
    blocks.{i}.mlp.hook_post         (B, T, F)    the activation's output (SwiGLU: silu(gate) * up)
    blocks.{i}.hook_mlp_out          (B, T, C)    the feed-forward sublayer's output
    blocks.{i}.hook_resid_post       (B, T, C)    the stream leaving block i
    ln_final.hook_scale              (B, T, 1)    the final norm's scale (pre-norm models)
    ln_final.hook_normalized         (B, T, C)

Post-norm blocks apply ln1/ln2 after the skip (x = ln(x + f(x))); mlp="none" has no resid_mid,
ln2, mlp or mlp_out points; MoE exposes hook_mlp_out but nothing inside.

An encoder-only model (the ViT, gpt/vision/model.py: a `model.encoder` that is an
nn.TransformerEncoder, no decoder) has the same names over its encoder layers, T = 1 + N (the
class token, then the patches): blocks.{i}.hook_resid_pre / attn_out / resid_mid / mlp_out /
resid_post, blocks.{i}.ln1.* and ln2.* (the layer's norm1, norm2), blocks.{i}.attn.* (its
self_attn: bidirectional, so the pattern has no causal mask) and ln_final.* (the encoder's final
norm); no embedding points and no mlp.* points (its feed-forward is linear1, activation, linear2).
The forward's "logits" are then the model's class scores (B, K).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable

import numpy as np

from autograd import Tensor, backend, no_grad


def _layers(model) -> list[tuple[str, Any]]:
    """(prefix, layer) for every layer of `model` with hook points, in forward order."""
    if not hasattr(model, "transformer"):
        return _encoder_layers(model)
    out = [("", model)]
    for i, block in enumerate(model.transformer.h):
        p = f"blocks.{i}."
        out += [(p, block), (p + "ln1.", block.ln_1), (p + "attn.", block.attn)]
        if block.mlp is not None:
            out += [(p + "ln2.", block.ln_2), (p + "mlp.", block.mlp)]
    if "ln_f" in model.transformer._modules:
        out.append(("ln_final.", model.transformer.ln_f))
    return [(p, m) for p, m in out if hasattr(m, "HOOKS")]


def _encoder_layers(model) -> list[tuple[str, Any]]:
    """_layers of an encoder-only model: `model.encoder` an nn.TransformerEncoder, no decoder."""
    from nn.transformer import TransformerEncoder

    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, TransformerEncoder) or hasattr(model, "decoder"):
        raise TypeError(f"gpt.inspect hooks a GPT or an encoder-only model (the ViT), not {type(model).__name__}")
    out = []
    for i, layer in enumerate(encoder.layers):
        p = f"blocks.{i}."
        out += [(p, layer), (p + "ln1.", layer.norm1), (p + "attn.", layer.self_attn), (p + "ln2.", layer.norm2)]
    if encoder.norm is not None:
        out.append(("ln_final.", encoder.norm))
    return [(p, m) for p, m in out if hasattr(m, "HOOKS")]


def hook_names(model) -> list[str]:
    """Every hook point's name for this model, layer by layer (the module docstring's table)."""
    from gpt.model.block import Block

    names = []
    for prefix, layer in _layers(model):
        local = layer.HOOKS
        if layer is model and model.config.pos == "rope":  # no position rows to add
            local = ("hook_embed",)
        elif isinstance(layer, Block) and layer.mlp is None:
            local = tuple(n for n in local if n not in ("hook_resid_mid", "hook_mlp_out"))
        names += [prefix + n for n in local]
    return names


class HookSet:
    """The functions and the cache of one inspected forward.

    hooks: (name, fn) pairs, fn(array, name) -> array (replaces the activation) or None (keeps the
    array it was given, perhaps changed in place: it is a copy); cache: names to record (None:
    every point). A replaced activation is a constant: no gradient flows through it.
    """

    def __init__(self, model, hooks: Iterable[tuple[str, Callable]] = (), cache: Iterable[str] | None = ()):
        known = hook_names(model)
        self.fns: dict[str, list[Callable]] = {}
        for name, fn in hooks:
            self.fns.setdefault(_check_name(name, known), []).append(fn)
        self.wanted = None if cache is None else {_check_name(n, known) for n in cache}
        self.cache: dict[str, Any] = {}

    def point(self, prefix: str) -> Callable:
        """The `hook` function of the layer whose names start with `prefix`."""
        return lambda name, t: self.run(prefix + name, t)

    def run(self, name: str, t: Tensor) -> Tensor:
        for fn in self.fns.get(name, ()):
            arr = t.data.copy()  # a hook may write into it: never into a weight or a shared buffer
            out = fn(arr, name)
            t = Tensor(arr if out is None else _like(out, arr, name))
        if self.wanted is None or name in self.wanted:
            self.cache[name] = backend.to_device(t.data, "cpu")
        return t


def _check_name(name: str, known: list[str]) -> str:
    if name not in known:
        from gpt.model.config import did_you_mean

        raise ValueError(f"unknown hook point {name!r}{did_you_mean(name, known)}; "
                         f"gpt.inspect.hook_names(model) lists the {len(known)} of this model")
    return name


def _like(out: Any, act: Any, name: str):
    """A hook's returned array on act's device and dtype, refused when its shape differs."""
    out = backend.to_device_of(np.asarray(out) if not hasattr(out, "shape") else out, act)
    if tuple(out.shape) != tuple(act.shape):
        raise ValueError(f"the hook on {name} returned shape {tuple(out.shape)}; the activation is {tuple(act.shape)}")
    return out.astype(act.dtype, copy=False)


@contextlib.contextmanager
def attached(model, hook_set: HookSet):
    """Set every layer's `hook` from hook_set for the `with` body; cleared afterwards, even on an error."""
    layers = _layers(model)
    if any(layer.hook is not None for _, layer in layers):
        raise RuntimeError("hooks are already attached to this model (run_with_hooks inside a hook?)")
    try:
        for prefix, layer in layers:
            layer.hook = hook_set.point(prefix)
        yield hook_set
    finally:
        for _, layer in layers:
            layer.__dict__.pop("hook", None)  # back to the class's None


def _forward(model, ids, hook_set: HookSet) -> np.ndarray:
    with attached(model, hook_set), no_grad():
        logits, _ = model(ids)
    return backend.to_device(logits.data, "cpu")


def run_with_cache(model, ids: Any, names: Iterable[str] | str | None = None) -> tuple[np.ndarray, dict]:
    """(logits (B, T, V) NumPy, {name: NumPy array}) of one forward of ids (B, T) without a graph,
    every hook point (names=None) or those named, in the model's mode (eval() for no dropout).
    A ViT takes images (B, C, H, W) for ids and gives its class scores (B, K) for logits."""
    names = [names] if isinstance(names, str) else names
    hook_set = HookSet(model, cache=None if names is None else list(names))
    logits = _forward(model, ids, hook_set)
    return logits, hook_set.cache


def run_with_hooks(model, ids: Any, hooks: Iterable[tuple[str, Callable]] = ()) -> np.ndarray:
    """logits (B, T, V) NumPy of one forward of ids with each fn(act, name) -> array or None run
    at its point (a zero- or mean-ablation, a patch from another prompt's cache)."""
    return _forward(model, ids, HookSet(model, hooks=hooks))
