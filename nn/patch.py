"""PatchEmbedding: an image cut into P x P patches, each flattened and projected (the ViT's tokens).

B = batch, C = channels, H, W = height and width, P = patch size, N = (H / P) * (W / P) patches,
D = d_model. Patches are taken in row-major order (left to right, then top to bottom) and each is
flattened channel-major, (C, P, P), which is the layout of a stride-P convolution's kernel: a
PyTorch Conv2d(C, D, P, stride=P) weight (D, C, P, P) is proj.weight.T reshaped.
"""
from __future__ import annotations

from autograd.tensor import Tensor
from nn.linear import Linear
from nn.module import Module


class PatchEmbedding(Module):
    """images (B, C, H, W) float -> (B, N, d_model); H and W must be multiples of patch_size."""

    def __init__(self, in_channels: int, patch_size: int, d_model: int, bias: bool = True):
        super().__init__()
        if min(in_channels, patch_size, d_model) < 1:
            raise ValueError(f"PatchEmbedding needs positive sizes, got in_channels={in_channels}, "
                             f"patch_size={patch_size}, d_model={d_model}")
        self.in_channels, self.patch_size, self.d_model = int(in_channels), int(patch_size), int(d_model)
        self.proj = Linear(in_channels * patch_size * patch_size, d_model, bias=bias)  # weight (C*P*P, D)

    def _check(self, x) -> tuple[int, int, int, int]:
        shape = tuple(getattr(x, "shape", ()))
        if not isinstance(x, Tensor) or x.ndim != 4 or x.data.dtype.kind != "f":
            raise ValueError(f"PatchEmbedding: expected a float Tensor of images (B, C, H, W), got "
                             f"{type(x).__name__} of shape {shape}")
        B, C, H, W = shape
        P = self.patch_size
        if C != self.in_channels or H % P or W % P or H == 0 or W == 0:
            raise ValueError(f"PatchEmbedding: expected images (B, {self.in_channels}, H, W) with H and W "
                             f"positive multiples of patch_size={P}, got {shape}")
        return B, C, H, W

    def patches(self, x: Tensor) -> Tensor:
        """images (B, C, H, W) -> (B, N, C*P*P): the flattened patches, before the projection."""
        B, C, H, W = self._check(x)
        P = self.patch_size
        x = x.reshape(B, C, H // P, P, W // P, P)                    # (B, C, H/P, P, W/P, P)
        x = x.permute(0, 2, 4, 1, 3, 5)                              # (B, H/P, W/P, C, P, P)
        return x.reshape(B, (H // P) * (W // P), C * P * P)          # (B, N, C*P*P)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.patches(x))                            # (B, N, D)

    def num_patches(self, height: int, width: int) -> int:
        return (height // self.patch_size) * (width // self.patch_size)

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, patch_size={self.patch_size}, d_model={self.d_model}"
