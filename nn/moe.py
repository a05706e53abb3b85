"""Mixture-of-experts feed-forward: a router sends each token to its top-k expert MLPs.

N = number of tokens (B * T), C = n_embd, E = n_experts, k = top_k.
Each expert runs only on the tokens routed to it: the (token, slot) assignments are sorted by
expert, each expert gathers its tokens' rows, the outputs are concatenated and gathered back
into (token, slot) order, weighted by the gates and summed over the k slots. Gathers are
differentiable index ops, so gradients reach the experts, the gates and the input.
"""
from __future__ import annotations

from typing import Any, Callable

import autograd
from autograd.tensor import Tensor
from nn.linear import Linear
from nn.mlp import MLP
from nn.containers import ModuleList
from nn.module import Module


class MoE(Module):
    """x (..., n_embd) -> (..., n_embd). After forward, `.aux_loss` is the load-balancing term.

    Gates: softmax over the k largest router logits of each token (Mixtral's top-k gating).
    aux_loss (Switch Transformer): E * sum_e f_e * P_e, with f_e the fraction of the N*k
    assignments that went to expert e (no gradient) and P_e the mean router probability of e
    over the tokens; it is 1.0 for a perfectly balanced router and grows as load concentrates.
    Add `coef * moe.aux_loss` (coef ~ 0.01) to the training loss. `.tokens_per_expert` holds
    the assignment counts of the last forward.

    Data-parallel training sets `.sum_counts` to a function that sums the (E,) counts over the
    ranks: while training with gradients, f_e is then the fraction of the whole global batch, and
    the ranks' mean aux_loss and its gradient are those of one process holding that batch.
    """

    def __init__(self, n_embd: int, hidden: int | None = None, n_experts: int = 4, top_k: int = 2,
                 activation: str | Module = "gelu", bias: bool = True, dropout: float = 0.0):
        super().__init__()
        if n_experts < 1 or not 1 <= top_k <= n_experts:
            raise ValueError(f"MoE needs n_experts >= 1 and 1 <= top_k <= n_experts, got n_experts={n_experts}, top_k={top_k}")
        self.n_embd, self.n_experts, self.top_k = int(n_embd), int(n_experts), int(top_k)
        self.router = Linear(n_embd, n_experts, bias=False)
        self.experts = ModuleList(
            MLP(n_embd, hidden, activation=activation, bias=bias, dropout=dropout) for _ in range(n_experts)
        )
        self.aux_loss: Tensor | None = None
        self.tokens_per_expert = None
        self.sum_counts: Callable[[Any], Any] | None = None

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.n_embd,):
            raise ValueError(f"MoE: expected x (..., {self.n_embd}), got {tuple(x.shape)}")
        E, k, C = self.n_experts, self.top_k, self.n_embd
        xp = x.xp
        flat = x.reshape(-1, C)                                   # (N, C)
        N = flat.shape[0]
        logits = self.router(flat)                                # (N, E)
        probs = autograd.softmax(logits, axis=-1)                 # (N, E)

        # The choice of experts carries no gradient; the gates over the chosen ones do.
        top = xp.argpartition(-logits.data, k - 1, axis=-1)[:, :k] if k < E else \
            xp.broadcast_to(xp.arange(E), (N, E))                 # (N, k) expert ids
        picked = (xp.arange(N)[:, None] * E + top).reshape(-1)    # (N*k,) flat indices into logits
        gates = autograd.softmax(logits.reshape(-1)[picked].reshape(N, k), axis=-1)  # (N, k)

        expert_of = top.reshape(-1)                               # (N*k,) expert of assignment a
        order = xp.argsort(expert_of)                             # assignments grouped by expert
        token_of = order // k                                     # token of each sorted assignment
        counts = xp.bincount(expert_of, minlength=E)              # (E,)
        outputs, start = [], 0
        for e, n in enumerate(counts.tolist()):
            if n:
                rows = token_of[start:start + n]
                outputs.append(self.experts[e](flat[rows]))       # (n_e, C), only its tokens
                start += n
        y_sorted = autograd.concat(outputs, axis=0)               # (N*k, C), expert order
        inverse = xp.empty_like(order)
        inverse[order] = xp.arange(order.size)
        y = y_sorted[inverse].reshape(N, k, C)                    # (N, k, C), (token, slot) order
        y = (y * gates.reshape(N, k, 1)).sum(axis=1)              # (N, C)

        load = counts
        if self.sum_counts is not None and self.training and autograd.is_grad_enabled():
            load = self.sum_counts(counts)  # only training steps run on every rank together
        fraction = (load / max(int(load.sum()), 1)).astype(logits.dtype)  # f_e, a constant
        self.aux_loss = (probs.mean(axis=0) * Tensor._make(fraction, None)).sum() * float(E)
        self.tokens_per_expert = counts
        return y.reshape(*x.shape)

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, n_experts={self.n_experts}, top_k={self.top_k}"
