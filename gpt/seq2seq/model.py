"""The 2017 translator (embeddings + nn.Transformer + tied output) and an encoder-only model.

Shapes: B = batch, S = source length, T = target length, C = d_model, V = vocab_size.

Seq2Seq, as in "Attention Is All You Need" section 3.4: one embedding matrix shared by the source,
the target and the pre-softmax output layer (share_embeddings, tie_output; either can be off),
embeddings multiplied by sqrt(C) and added to the fixed sinusoids, dropout, then nn.Transformer
(post-norm by default) in batch-first layout. Source padding (pad_id) becomes the key padding
mask of the encoder and of the cross-attention; target padding that of the decoder.

    src (B, S) -> embed -> encoder -> memory (B, S, C)
    tgt_in (B, T) -> embed -> decoder(memory) -> (B, T, C) @ E^T -> logits (B, T, V)

EncoderOnly (BERT's shape on the same blocks): embeddings as above, a TransformerEncoder with
bidirectional attention, a masked-token head (the tied output layer) and a pooled
classification head: tanh(pooler(h at position 0, the <cls> token)) -> classifier -> (B, n_classes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import autograd
import nn
from autograd import Tensor, backend
from gpt.model.config import DictConfig


@dataclass
class Seq2SeqConfig(DictConfig):
    """Sizes of the translator (PyTorch's nn.Transformer names) and of the encoder-only model
    (which reads vocab_size .. pad_id and num_encoder_layers, plus n_classes)."""

    vocab_size: int
    d_model: int = 64
    nhead: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dim_feedforward: int = 256
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    max_len: int = 64
    share_embeddings: bool = True
    tie_output: bool = True
    pad_id: int = 0
    n_classes: int = 2

    def __post_init__(self) -> None:
        if self.vocab_size < 1 or self.max_len < 1:
            raise ValueError(f"vocab_size and max_len must be >= 1, got {self.vocab_size}, {self.max_len}")
        if self.nhead < 1 or self.d_model % self.nhead:
            raise ValueError(f"d_model={self.d_model} must be divisible by nhead={self.nhead}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} is outside the vocabulary [0, {self.vocab_size})")



def _ids(ids: Any, cfg: Seq2SeqConfig, what: str, device: str):
    """(B, L) int ids checked against the vocabulary and max_len, on the model's device."""
    arr = ids.data if isinstance(ids, Tensor) else ids
    arr = arr if hasattr(arr, "dtype") else np.asarray(arr)
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"expected {what} ids of shape (B, L) with L > 0, integer, got {tuple(arr.shape)} {arr.dtype}")
    if arr.shape[1] > cfg.max_len:
        raise ValueError(f"{what} of length {arr.shape[1]} exceeds max_len={cfg.max_len}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= cfg.vocab_size:
        raise ValueError(f"token id {lo if lo < 0 else hi} in {what} is outside the vocabulary [0, {cfg.vocab_size})")
    return backend.to_device(arr, device)


class _Embedder(nn.Module):
    """Token embedding x sqrt(C) + sinusoidal positions, then dropout (the 2017 paper's input)."""

    def _init_embedding(self, cfg: Seq2SeqConfig) -> nn.Embedding:
        emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(emb.weight, std=cfg.d_model ** -0.5)  # x sqrt(C): unit variance into the stack
        return emb

    def _embed(self, table: nn.Embedding, ids, offset: int = 0) -> Tensor:
        T = ids.shape[1]
        x = autograd.embedding(table.weight, ids, check_range=False)               # (B, T, C)
        return self.drop(x * math.sqrt(self.config.d_model) + self.positions(T, offset=offset))

    @property
    def device(self) -> str:
        return next(iter(self.parameters())).device


class Seq2Seq(_Embedder):
    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.config = cfg
        self.src_embed = self._init_embedding(cfg)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else self._init_embedding(cfg)
        self.positions = nn.SinusoidalPositions(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.transformer = nn.Transformer(
            cfg.d_model, cfg.nhead, cfg.num_encoder_layers, cfg.num_decoder_layers, cfg.dim_feedforward,
            cfg.dropout, cfg.activation, batch_first=True, norm_first=cfg.norm_first)
        self.lm_head = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def output_weight(self) -> Tensor:
        """(C, V): the target embedding read transposed when tied, else lm_head.weight."""
        return self.tgt_embed.weight.T if self.lm_head is None else self.lm_head.weight

    def encode(self, src: Any) -> tuple[Tensor, Any]:
        """src (B, S) ids -> (memory (B, S, C), source padding mask (B, S) bool, True = pad)."""
        src = _ids(src, self.config, "src", self.device)
        pad = src == self.config.pad_id
        return self.transformer.encoder(self._embed(self.src_embed, src), src_key_padding_mask=pad), pad

    def decode(self, tgt_in: Any, memory: Tensor | None, src_pad: Any, kv_caches: list | None = None,
               memory_kv: list | None = None, pos_offset: int = 0) -> Tensor:
        """tgt_in (B, T) ids at positions pos_offset.. -> logits (B, T, V). With kv_caches the earlier
        positions are cached (tgt_in holds only new ids); memory_kv replaces memory when given."""
        cfg = self.config
        tgt = _ids(tgt_in, cfg, "tgt_in", self.device)
        if pos_offset + tgt.shape[1] > cfg.max_len:
            raise ValueError(f"target positions up to {pos_offset + tgt.shape[1] - 1} exceed max_len={cfg.max_len}")
        B, T = tgt.shape
        tgt_pad = None if kv_caches is not None else tgt == cfg.pad_id
        if tgt_pad is not None and not bool(tgt_pad.any()):
            tgt_pad = None
        h = self.transformer.decoder(
            self._embed(self.tgt_embed, tgt, pos_offset), memory, tgt_is_causal=True,
            tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
            kv_caches=kv_caches, memory_kv=memory_kv)                              # (B, T, C)
        return (h.reshape(B * T, cfg.d_model) @ self.output_weight()).reshape(B, T, cfg.vocab_size)

    def forward(self, src: Any, tgt_in: Any, targets: Any = None) -> tuple[Tensor, Tensor | None]:
        """src (B, S), tgt_in (B, T) ids -> (logits (B, T, V), mean cross-entropy over targets
        (B, T) that are not -100, or None)."""
        memory, pad = self.encode(src)
        logits = self.decode(tgt_in, memory, pad)
        if targets is None:
            return logits, None
        targets = np.asarray(targets)
        if targets.shape != tuple(logits.shape[:2]):
            raise ValueError(f"expected targets of shape {tuple(logits.shape[:2])} (like tgt_in), got {targets.shape}")
        return logits, autograd.cross_entropy(logits, backend.to_device(targets, self.device))

    def new_kv_caches(self, batch: int, max_len: int) -> list:
        """One nn.KVCache per decoder layer, for decode(..., kv_caches=...)."""
        cfg, dtype = self.config, self.src_embed.weight.dtype
        return [nn.KVCache(batch, cfg.nhead, max_len, cfg.d_model // cfg.nhead, dtype, self.device)
                for _ in range(cfg.num_decoder_layers)]

    def cache_numbers(self, src_len: int, tgt_len: int) -> dict:
        """Numbers cached per decoded row: cross-attention k, v (2 x layers x S x C), computed once
        per source, and the self-attention KV cache (2 x layers x T x C)."""
        cfg = self.config
        per = 2 * cfg.num_decoder_layers * cfg.d_model
        return {"cross_attention": per * src_len, "self_attention": per * tgt_len}


class EncoderOnly(_Embedder):
    """ids (B, L) -> (masked-token logits (B, L, V), class logits (B, n_classes)); position 0 is pooled."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.config = cfg
        self.embed = self._init_embedding(cfg)
        self.positions = nn.SinusoidalPositions(cfg.max_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.nhead, cfg.dim_feedforward, cfg.dropout,
                                           cfg.activation, batch_first=True, norm_first=cfg.norm_first)
        # a final norm only where the stream is not normalised already (pre-norm), as BERT vs GPT-2
        final = nn.LayerNorm(cfg.d_model) if cfg.norm_first else None
        self.encoder = nn.TransformerEncoder(layer, cfg.num_encoder_layers, final)
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, ids: Any) -> tuple[Tensor, Tensor]:
        cfg = self.config
        ids = _ids(ids, cfg, "ids", self.device)
        B, L = ids.shape
        h = self.encoder(self._embed(self.embed, ids), src_key_padding_mask=ids == cfg.pad_id)  # (B, L, C)
        token_logits = (h.reshape(B * L, cfg.d_model) @ self.embed.weight.T).reshape(B, L, cfg.vocab_size)
        pooled = autograd.tanh(self.pooler(h[:, 0, :]))                                        # (B, C)
        return token_logits, self.classifier(pooled)

    def losses(self, mlm_ids: Any, mlm_targets: Any, cls_ids: Any, labels: Any) -> tuple[Tensor, Tensor]:
        """(masked-token cross-entropy over targets != -100, classification cross-entropy)."""
        token_logits, _ = self(mlm_ids)
        _, class_logits = self(cls_ids)
        dev = self.device
        return (autograd.cross_entropy(token_logits, backend.to_device(np.asarray(mlm_targets), dev)),
                autograd.cross_entropy(class_logits, backend.to_device(np.asarray(labels), dev)))


def _group(name: str) -> str:
    """The report group of a parameter name of Seq2Seq or EncoderOnly."""
    if name.startswith(("src_embed", "tgt_embed", "embed.")):
        return "embeddings"
    if name.startswith("lm_head"):
        return "output"
    if ".multihead_attn." in name:
        return "cross-attention"
    if ".self_attn." in name:
        return "self-attention"
    if ".linear" in name:
        return "feed-forward"
    if name.startswith(("pooler", "classifier")):
        return "heads"
    return "norms"


def report(model: Seq2Seq | EncoderOnly) -> str:
    """Parameters by group and, for the translator, the numbers its decoding caches."""
    cfg = model.config
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        counts[_group(name)] = counts.get(_group(name), 0) + p.size
    total = sum(counts.values())
    layers = (f"{cfg.num_encoder_layers} encoder + {cfg.num_decoder_layers} decoder layers"
              if isinstance(model, Seq2Seq) else f"{cfg.num_encoder_layers} encoder layers")
    lines = [f"{type(model).__name__}: d_model={cfg.d_model} nhead={cfg.nhead} {layers} "
             f"dim_feedforward={cfg.dim_feedforward} vocab={cfg.vocab_size} norm_first={cfg.norm_first} "
             f"activation={cfg.activation}", f"{'group':<16}{'parameters':>12}{'share':>9}"]
    notes = {"embeddings": " (source, target and output share one matrix)"
             if isinstance(model, Seq2Seq) and cfg.share_embeddings and cfg.tie_output else ""}
    lines += [f"{g:<16}{n:>12,}{100 * n / total:>8.1f}%{notes.get(g, '')}" for g, n in counts.items()]
    lines.append(f"{'total':<16}{total:>12,}")
    if isinstance(model, Seq2Seq):
        from gpt.model.report import format_bytes

        per = model.cache_numbers(1, 1)["cross_attention"]
        full = model.cache_numbers(cfg.max_len, cfg.max_len)
        item = model.src_embed.weight.data.dtype.itemsize
        lines.append(f"decoding caches 2 x {cfg.num_decoder_layers} layers x {cfg.d_model} = {per:,} numbers per "
                     f"source token (cross-attention k, v, computed once per source) and as many per "
                     f"target token (self-attention KV cache)")
        lines.append(f"  at max_len={cfg.max_len}: cross-attention {full['cross_attention']:,} + self-attention "
                     f"{full['self_attention']:,} numbers = "
                     f"{format_bytes(item * sum(full.values()))} per decoded row in {model.src_embed.weight.dtype}")
    return "\n".join(lines)
