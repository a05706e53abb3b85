"""The Vision Transformer (Dosovitskiy et al. 2020) on the project's own encoder layers.

B = batch, C = channels, H = W = image_size, P = patch_size, N = (H / P)^2 patches, D = d_model,
K = n_classes. An image is cut into N patches, each a token:

    images (B, C, H, W) -> patch_embed -> (B, N, D)
    [cls_token; patches] + pos_embed -> dropout -> (B, 1 + N, D)
    encoder: nn.TransformerEncoder (pre-norm, GELU (tanh form), bidirectional) + final LayerNorm
    head(h[:, 0]) -> logits (B, K)

The encoder is the same nn.TransformerEncoder the translator and the encoder-only model use
(gpt/seq2seq/model.py), so its attention is nn.MultiHeadAttention's, hooked and measured as theirs.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

import autograd
import nn
from autograd import Tensor, backend
from gpt.model.config import DictConfig
from gpt.vision.data import check_images, check_labels


@dataclass
class ViTConfig(DictConfig):
    """Sizes of a ViT; `patch_size` must divide `image_size`."""

    image_size: int = 8
    in_channels: int = 1
    patch_size: int = 4
    n_classes: int = 10
    d_model: int = 64
    nhead: int = 4
    num_layers: int = 3
    dim_feedforward: int = 128
    dropout: float = 0.0
    norm_first: bool = True            # pre-norm, as the paper; False: the 2017 post-norm (gradflow's "post")

    def __post_init__(self) -> None:
        sizes = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("dropout", "norm_first")}
        bad = [f"{k}={v}" for k, v in sizes.items() if not isinstance(v, int) or v < 1]
        if bad:
            raise ValueError(f"ViTConfig sizes must be positive integers, got {', '.join(bad)}")
        if self.image_size % self.patch_size:
            raise ValueError(f"patch_size={self.patch_size} must divide image_size={self.image_size}")
        if self.d_model % self.nhead:
            raise ValueError(f"d_model={self.d_model} must be divisible by nhead={self.nhead}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2



class ViT(nn.Module):
    """images (B, C, H, W) (an array or a Tensor) -> (logits (B, K), mean cross-entropy or None).

    Parameters: patch_embed.proj.{weight (C*P*P, D), bias}, cls_token (D,), pos_embed.weight
    (1 + N, D), encoder.layers.{i}.* (nn.TransformerEncoderLayer's names), encoder.norm, head."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.config = cfg
        D = cfg.d_model
        self.patch_embed = nn.PatchEmbedding(cfg.in_channels, cfg.patch_size, D)
        self.cls_token = nn.init.normal_(nn.Parameter(np.empty((D,), np.float32)), std=0.02)
        self.pos_embed = nn.LearnedPositions(1 + cfg.num_patches, D)
        self.drop = nn.Dropout(cfg.dropout)
        # GELU's tanh form, as the paper's code (flax's nn.gelu) computes it
        layer = nn.TransformerEncoderLayer(D, cfg.nhead, cfg.dim_feedforward, cfg.dropout, nn.GELU("tanh"),
                                           batch_first=True, norm_first=cfg.norm_first)
        self.encoder = nn.TransformerEncoder(layer, cfg.num_layers, nn.LayerNorm(D))
        self.head = nn.Linear(D, cfg.n_classes)
        nn.init.normal_(self.head.weight, std=0.02)  # near-equal classes at first, as timm's ViT
        nn.init.zeros_(self.head.bias)

    @property
    def device(self) -> str:
        return self.head.weight.device

    def images(self, x: Any) -> Tensor:
        """x checked as (B, C, image_size, image_size) images -> a Tensor of the model's dtype and device."""
        cfg = self.config
        want = (cfg.in_channels, cfg.image_size, cfg.image_size)
        if not isinstance(x, Tensor):
            x = Tensor(backend.to_device(check_images(x), self.device).astype(self.head.weight.dtype))
        if tuple(x.shape[1:]) != want:
            raise ValueError(f"ViT: expected images (B, {want[0]}, {want[1]}, {want[2]}), got {tuple(x.shape)}")
        return x

    def embed(self, x: Any) -> Tensor:
        """images -> the encoder's input (B, 1 + N, D): class token, then patches, plus positions."""
        patches = self.patch_embed(self.images(x))                                # (B, N, D)
        B, N, D = patches.shape
        cls = autograd.broadcast_to(self.cls_token.reshape(1, 1, D), (B, 1, D))  # (B, 1, D)
        tokens = autograd.concat([cls, patches], axis=1)                          # (B, 1 + N, D)
        return self.drop(tokens + self.pos_embed(1 + N))

    def forward(self, x: Any, labels: Any = None, label_smoothing: float = 0.0) -> tuple[Tensor, Tensor | None]:
        h = self.encoder(self.embed(x))                                           # (B, 1 + N, D)
        logits = self.head(h[:, 0, :])                                            # (B, K)
        if labels is None:
            return logits, None
        return logits, classification_loss(logits, labels, self.config.n_classes, label_smoothing)


def classification_loss(logits: Tensor, labels: Any, n_classes: int, smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits (B, K) against int labels (B,), the targets smoothed by
    `smoothing` (a share spread evenly over the K classes: Szegedy et al.'s label smoothing)."""
    y = check_labels(labels, logits.shape[0], n_classes)
    y = backend.to_device(y, logits.device)
    ce = autograd.cross_entropy(logits, y, check_range=False)
    if not smoothing:
        return ce
    uniform = -autograd.log_softmax(logits, axis=-1).mean()                       # CE against 1/K each
    return ce * (1.0 - smoothing) + uniform * smoothing


def _group(name: str) -> str:
    if name.startswith("patch_embed"):
        return "patch embedding"
    if name.startswith(("cls_token", "pos_embed")):
        return "class token + positions"
    if ".self_attn." in name:
        return "self-attention"
    if ".linear" in name:
        return "feed-forward"
    return "head" if name.startswith("head") else "norms"


def report(model: ViT) -> str:
    """The model's shape and its parameters by group."""
    cfg = model.config
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        counts[_group(name)] = counts.get(_group(name), 0) + p.size
    total = sum(counts.values())
    lines = [f"ViT: {cfg.image_size}x{cfg.image_size}x{cfg.in_channels} images, patch {cfg.patch_size} "
             f"({cfg.num_patches} patches + class token), d_model={cfg.d_model} nhead={cfg.nhead} "
             f"{cfg.num_layers} layers dim_feedforward={cfg.dim_feedforward}, {cfg.n_classes} classes",
             f"{'group':<24}{'parameters':>12}{'share':>9}"]
    lines += [f"{g:<24}{n:>12,}{100 * n / total:>8.1f}%" for g, n in counts.items()]
    lines.append(f"{'total':<24}{total:>12,}")
    return "\n".join(lines)
