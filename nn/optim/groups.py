"""Parameter groups for weight decay: decay the matrices, not the biases, norms or embeddings."""
from __future__ import annotations

from typing import Any


def weight_decay_groups(model: Any, weight_decay: float = 0.1, decay_embeddings: bool = False) -> list[dict]:
    """[{"params": decayed, "weight_decay": weight_decay}, {"params": the rest, "weight_decay": 0.0}].

    Decayed: parameters with 2 or more dimensions (Linear and attention weights). Not decayed:
    biases and norm gains (1-D), and, unless `decay_embeddings`, the weights of Embedding and
    LearnedPositions (token and position tables). Each shared parameter appears once.
    """
    from nn.embedding import Embedding
    from nn.positions import LearnedPositions

    tables = set()
    if not decay_embeddings:
        for m in model.modules():
            if isinstance(m, (Embedding, LearnedPositions)):
                tables.add(id(m.weight))
    decay, rest = [], []
    for _, p in model.named_parameters():
        (decay if p.ndim >= 2 and id(p) not in tables else rest).append(p)
    groups = [{"params": decay, "weight_decay": float(weight_decay)}, {"params": rest, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]
