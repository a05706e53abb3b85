"""Embedding: a table of vectors looked up by integer id (token embeddings, `wte`)."""
from __future__ import annotations

import numpy as np

import autograd
from autograd.tensor import Tensor
from nn import init
from nn.module import Module, Parameter


class Embedding(Module):
    """idx int (...) -> (..., embedding_dim); weight (num_embeddings, embedding_dim) starts N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(
                f"Embedding needs positive sizes, got num_embeddings={num_embeddings}, embedding_dim={embedding_dim}"
            )
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.weight = init.normal_(Parameter(np.empty((num_embeddings, embedding_dim), np.float32)), std=1.0)

    def forward(self, idx) -> Tensor:
        arr = idx.data if isinstance(idx, Tensor) else idx
        dtype = getattr(arr, "dtype", None)
        if dtype is None or dtype.kind not in "iu":
            raise TypeError(f"Embedding expects integer ids, got {type(idx).__name__} of dtype {dtype}")
        return autograd.embedding(self.weight, idx)  # which checks the ids' range

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
