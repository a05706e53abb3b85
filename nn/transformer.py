"""The encoder-decoder Transformer of "Attention Is All You Need" with PyTorch's nn.Transformer interface.

B = batch, S = source length, T = target length, C = d_model, H = nhead, F = dim_feedforward.

    TransformerEncoderLayer   x = norm1(x + self_attn(x)); x = norm2(x + ff(x))          (post-norm)
                              x = x + self_attn(norm1(x)); x = x + ff(norm2(x))          (norm_first)
    TransformerDecoderLayer   the same with a cross-attention sublayer between the two:
                              x = norm2(x + multihead_attn(x, memory))  (or its pre-norm form)
    ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))   (dropout3 in the decoder)
    TransformerEncoder / TransformerDecoder: num_layers copies of a layer, then an optional norm
    Transformer: encoder (6 layers + final LayerNorm), decoder (6 layers + final LayerNorm)

Semantics follow PyTorch's (torch.nn.Transformer, TransformerEncoderLayer, TransformerDecoderLayer):
the same arguments and defaults (d_model=512, nhead=8, 6 + 6 layers, dim_feedforward=2048,
dropout=0.1, activation="relu", layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True;
"gelu" is the exact erf GELU, as torch.nn.functional.gelu), the same masks (True or -inf = not
allowed; see nn/cross_attention.py), the final encoder and decoder norms whatever norm_first is, and
xavier-uniform initialisation of every matrix. Self-attention is nn.MultiHeadAttention; weights map
to and from PyTorch's layout by nn/transformer_layout.py, and the same weights give the same outputs.
`is_causal` / `tgt_is_causal` / `memory_is_causal`: with no mask given, a causal mask is applied
(in PyTorch a mere hint that the given mask is causal; here it also builds that mask).

Decoding: `TransformerDecoder.memory_kv(memory)` computes each layer's cross-attention keys and
values once per source; `forward(..., kv_caches=..., memory_kv=...)` then runs only the new target
positions, their self-attention keys and values appended to one nn.KVCache per layer.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from autograd.ops.norm import LAYER_NORM_EPS
from autograd.tensor import Tensor
from nn import init
from nn.activation import GELU
from nn.activation import activation as make_activation
from nn.attention import MultiHeadAttention
from nn.containers import ModuleList
from nn.cross_attention import CrossAttention, attention_mask, causal_blocked
from nn.dropout import Dropout
from nn.linear import Linear
from nn.module import Module
from nn.norm import LayerNorm
from nn.sublayer import sublayer


def _ff_activation(activation: str | Module) -> Module:
    """PyTorch's names: "relu", or "gelu" = the exact (erf) form; other names as nn.activation's."""
    return GELU("none") if activation == "gelu" else make_activation(activation)


def _xavier_(p, fan_sum: int | None = None) -> None:
    """Glorot uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (PyTorch's xavier_uniform_)."""
    fan_sum = sum(p.shape) if fan_sum is None else fan_sum
    bound = math.sqrt(6.0 / fan_sum)
    init.uniform_(p, -bound, bound)


def _init_attention(attn: Module, C: int) -> None:
    """As torch.nn.MultiheadAttention starts: in_proj (3C, C) xavier, in_proj and out_proj biases 0."""
    for name, p in attn.named_parameters():
        if name.endswith("bias"):
            init.zeros_(p)
        elif not name.startswith("c_proj"):
            _xavier_(p, 4 * C)  # c_attn, c_q, c_kv: the parts of one (3C, C) in_proj matrix


def _batch_first(x: Tensor, batch_first: bool, where: str, what: str) -> Tensor:
    """x as (B, L, C): transposed from (L, B, C) unless batch_first."""
    if not isinstance(x, Tensor) or x.ndim != 3:
        layout = "(B, L, C)" if batch_first else "(L, B, C)"
        raise ValueError(f"{where}: expected {what} of shape {layout} (batch_first={batch_first}), "
                         f"got {tuple(getattr(x, 'shape', ()))}")
    return x if batch_first else x.transpose(0, 1)


def _self_mask(mask, key_padding_mask, is_causal, B: int, H: int, T: int, S: int, names: tuple):
    """The allowed-mask of a self- (or cross-) attention sublayer; a causal one when asked and none given."""
    if mask is None and is_causal:
        mask = causal_blocked(T, S)
    return attention_mask(mask, key_padding_mask, B, H, T, S, names)


class _FeedForward(Module):
    """The position-wise feed-forward sublayer's pieces, named as PyTorch's layers name them."""

    def _init_ff(self, d_model: int, dim_feedforward: int, dropout: float, activation, bias: bool,
                 eps: float, n_sublayers: int) -> None:
        """The feed-forward layers, then norm1..norm<n> (one per sublayer) and the feed-forward
        sublayer's output dropout, dropout<n>, in PyTorch's order and names."""
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)   # weight (C, F): PyTorch's (F, C).T
        self.activation = _ff_activation(activation)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)   # weight (F, C)
        for i in range(1, n_sublayers + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=eps, bias=bias))
        setattr(self, f"dropout{n_sublayers}", Dropout(dropout))

    def _init_layer(self, d_model: int, nhead: int, batch_first: bool, norm_first: bool) -> None:
        self.d_model, self.nhead = int(d_model), int(nhead)
        self.batch_first, self.norm_first = bool(batch_first), bool(norm_first)

    def extra_repr(self) -> str:
        return f"batch_first={self.batch_first}, norm_first={self.norm_first}"

    def _ff(self, x: Tensor, out_dropout: Dropout) -> Tensor:
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _sublayers(self, x: Tensor, *fs) -> Tensor:
        """x (B, T, C) through the sublayers `fs` in order, the i-th with its norm<i> and skip
        (pre-norm when norm_first) -> (B, T, C)."""
        for i, f in enumerate(fs, 1):
            x = sublayer(x, getattr(self, f"norm{i}"), f, prenorm=self.norm_first)[1]
        return x


class TransformerEncoderLayer(_FeedForward):
    """src (S, B, C) or, batch_first, (B, S, C) -> same shape: bidirectional self-attention, feed-forward.

    `hook`: None, or a function (name, Tensor) -> Tensor through which `block` passes the points of
    HOOKS (the GPT block's names, gpt/inspect/hooks.py: the stream in, each sublayer's output, the
    stream between and after them), (B, S, C) each."""

    HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    hook = None

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Module = "relu", layer_norm_eps: float = LAYER_NORM_EPS, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self._init_layer(d_model, nhead, batch_first, norm_first)
        # its dropout on the output is PyTorch's dropout1
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout, causal=False)
        _init_attention(self.self_attn, d_model)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, layer_norm_eps, n_sublayers=2)

    def forward(self, src: Tensor, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        x = _batch_first(src, self.batch_first, type(self).__name__, "src")
        B, S, _ = x.shape
        mask = _self_mask(src_mask, src_key_padding_mask, is_causal, B, self.nhead, S, S,
                          ("src_mask", "src_key_padding_mask"))
        y = self.block(x, mask)
        return y if self.batch_first else y.transpose(0, 1)

    def block(self, x: Tensor, mask: Any = None) -> Tensor:
        """x (B, S, C) with an allowed-mask (bool, True = may attend) already converted -> (B, S, C)."""
        def sa(h):
            return self.self_attn(h, attn_mask=mask)

        if self.hook is None:
            return self._sublayers(x, sa, lambda h: self._ff(h, self.dropout2))
        hook = self.hook
        x = sublayer(hook("hook_resid_pre", x), self.norm1, lambda h: hook("hook_attn_out", sa(h)),
                     prenorm=self.norm_first)[1]
        x = sublayer(hook("hook_resid_mid", x), self.norm2,
                     lambda h: hook("hook_mlp_out", self._ff(h, self.dropout2)), prenorm=self.norm_first)[1]
        return hook("hook_resid_post", x)

class TransformerDecoderLayer(_FeedForward):
    """tgt (T, B, C), memory (S, B, C) (or batch-first) -> (T, B, C): masked self-attention,
    cross-attention over the memory, feed-forward."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Module = "relu", layer_norm_eps: float = LAYER_NORM_EPS, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        self._init_layer(d_model, nhead, batch_first, norm_first)
        self.self_attn = MultiHeadAttention(d_model, nhead, bias=bias, dropout=dropout, causal=False)
        self.multihead_attn = CrossAttention(d_model, nhead, bias=bias, dropout=dropout)
        for attn in (self.self_attn, self.multihead_attn):
            _init_attention(attn, d_model)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, layer_norm_eps, n_sublayers=3)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        where = type(self).__name__
        x = _batch_first(tgt, self.batch_first, where, "tgt")
        mem = _batch_first(memory, self.batch_first, where, "memory")
        (B, T, _), S = x.shape, mem.shape[1]
        self_mask = _self_mask(tgt_mask, tgt_key_padding_mask, tgt_is_causal, B, self.nhead, T, T,
                               ("tgt_mask", "tgt_key_padding_mask"))
        cross_mask = _self_mask(memory_mask, memory_key_padding_mask, memory_is_causal, B, self.nhead, T, S,
                                ("memory_mask", "memory_key_padding_mask"))
        y = self.block(x, mem, self_mask, cross_mask)
        return y if self.batch_first else y.transpose(0, 1)

    def block(self, x: Tensor, memory: Tensor | None, self_mask: Any = None, cross_mask: Any = None,
              kv_cache=None, memory_kv: tuple | None = None) -> Tensor:
        """x (B, T, C), memory (B, S, C) (or its memory_kv), allowed-masks already converted -> (B, T, C).
        kv_cache: this layer's nn.KVCache, x then holds only the new positions."""
        def sa(h):
            return self.self_attn(h, kv_cache=kv_cache, attn_mask=self_mask)

        def ca(h):
            return self.multihead_attn(h, memory if memory_kv is None else None, cross_mask, memory_kv)

        return self._sublayers(x, sa, ca, lambda h: self._ff(h, self.dropout3))


def _clones(layer: Module, num_layers: int) -> ModuleList:
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    return ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class _Stack(Module):
    """num_layers deep copies of `layer`, then `norm` (None: no final norm)."""

    def __init__(self, layer: Module, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = _clones(layer, num_layers)
        self.num_layers = int(num_layers)
        self.norm = norm
        self.batch_first, self.nhead = layer.batch_first, layer.nhead


class TransformerEncoder(_Stack):
    """num_layers deep copies of `encoder_layer`, then `norm` (None: no final norm)."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src: Tensor, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        """src (S, B, C) (batch_first: (B, S, C)); mask (S, S) or (B * nhead, S, S);
        src_key_padding_mask (B, S), True = padding -> memory of src's shape."""
        x = _batch_first(src, self.batch_first, "TransformerEncoder", "src")
        B, S, _ = x.shape
        allowed = _self_mask(mask, src_key_padding_mask, bool(is_causal), B, self.nhead, S, S,
                             ("mask", "src_key_padding_mask"))
        for layer in self.layers:
            x = layer.block(x, allowed)
        if self.norm is not None:
            x = self.norm(x)
        return x if self.batch_first else x.transpose(0, 1)


class TransformerDecoder(_Stack):
    """num_layers deep copies of `decoder_layer`, then `norm` (None: no final norm)."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__(decoder_layer, num_layers, norm)

    def memory_kv(self, memory: Tensor) -> list:
        """Every layer's cross-attention (k, v), each (B, nhead, S, head_dim), from memory (S, B, C)
        (batch_first: (B, S, C)): computed once per source, passed to forward(memory_kv=...)."""
        mem = _batch_first(memory, self.batch_first, "TransformerDecoder.memory_kv", "memory")
        return [layer.multihead_attn.memory_kv(mem) for layer in self.layers]

    def forward(self, tgt: Tensor, memory: Tensor | None, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
                kv_caches: list | None = None, memory_kv: list | None = None) -> Tensor:
        """tgt (T, B, C), memory (S, B, C) (batch_first: (B, T, C), (B, S, C)) -> tgt's shape.

        Masks as PyTorch's. Cached decoding: kv_caches (one nn.KVCache per layer) hold the earlier
        target positions, tgt only the new ones; tgt_mask and tgt_key_padding_mask then cover all
        cached + new keys: (T, cached + T), (B, cached + T). memory_kv (from `memory_kv`) replaces
        memory (pass memory=None)."""
        where = "TransformerDecoder"
        x = _batch_first(tgt, self.batch_first, where, "tgt")
        B, T, _ = x.shape
        if memory_kv is None:
            memory = _batch_first(memory, self.batch_first, where, "memory")
            S = memory.shape[1]
        else:
            if len(memory_kv) != self.num_layers:
                raise ValueError(f"{where}: expected memory_kv for {self.num_layers} layers, got {len(memory_kv)}")
            S = memory_kv[0][0].shape[2]
        if kv_caches is not None and len(kv_caches) != self.num_layers:
            raise ValueError(f"{where}: expected one KV cache per layer ({self.num_layers}), got {len(kv_caches)}")
        cached = 0 if kv_caches is None else kv_caches[0].length
        self_mask = _self_mask(tgt_mask, tgt_key_padding_mask, bool(tgt_is_causal), B, self.nhead, T, cached + T,
                               ("tgt_mask", "tgt_key_padding_mask"))
        cross_mask = _self_mask(memory_mask, memory_key_padding_mask, memory_is_causal, B, self.nhead, T, S,
                                ("memory_mask", "memory_key_padding_mask"))
        for i, layer in enumerate(self.layers):
            x = layer.block(x, memory, self_mask, cross_mask,
                            kv_cache=None if kv_caches is None else kv_caches[i],
                            memory_kv=None if memory_kv is None else memory_kv[i])
        if self.norm is not None:
            x = self.norm(x)
        return x if self.batch_first else x.transpose(0, 1)


class Transformer(Module):
    """The whole encoder-decoder: forward(src, tgt, ...) -> the decoder's output, tgt's shape.

    src (S, B, C), tgt (T, B, C) (batch_first: (B, S, C), (B, T, C)); no embeddings and no output
    layer, as in PyTorch (gpt/seq2seq/model.py adds the 2017 paper's). Parameter names:
    encoder.layers.{i}.{self_attn.c_attn, self_attn.c_proj, linear1, linear2, norm1, norm2},
    encoder.norm, decoder.layers.{i}.{self_attn.*, multihead_attn.c_q, .c_kv, .c_proj, linear1,
    linear2, norm1, norm2, norm3}, decoder.norm (PyTorch's mapping: nn/transformer_layout.py).
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Module = "relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = LAYER_NORM_EPS, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True):
        super().__init__()
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """xavier_uniform_ on every matrix, as PyTorch's Transformer (the q, k, v parts as one in_proj)."""
        for name, p in self.named_parameters():
            if p.ndim > 1:
                fused = ".self_attn.c_attn." in name or ".multihead_attn.c_q" in name or ".multihead_attn.c_kv" in name
                _xavier_(p, 4 * self.d_model if fused else None)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Any = None, tgt_mask: Any = None,
                memory_mask: Any = None, src_key_padding_mask: Any = None, tgt_key_padding_mask: Any = None,
                memory_key_padding_mask: Any = None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        b_axis = 0 if self.batch_first else 1
        for name, t in (("src", src), ("tgt", tgt)):
            if not isinstance(t, Tensor) or t.ndim != 3:
                raise ValueError(f"Transformer: {name} must be a 3-D Tensor, got {tuple(getattr(t, 'shape', ()))}")
        if src.shape[b_axis] != tgt.shape[b_axis]:
            raise ValueError(f"Transformer: the batch number of src and tgt must be equal, got "
                             f"{src.shape[b_axis]} and {tgt.shape[b_axis]} (batch_first={self.batch_first})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"Transformer: the feature number of src and tgt must be d_model={self.d_model}, "
                             f"got {src.shape[-1]} and {tgt.shape[-1]}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, dtype: Any = np.float32) -> np.ndarray:
        """(sz, sz) float: 0 on and below the diagonal, -inf above (PyTorch's causal mask)."""
        return np.where(causal_blocked(sz), -np.inf, 0.0).astype(dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, nhead={self.nhead}, batch_first={self.batch_first}"
