"""SGD with momentum, Nesterov momentum and (L2, coupled) weight decay, PyTorch's formulation."""
from __future__ import annotations

from typing import Any, Iterable

from nn.optim.optimizer import Optimizer


class SGD(Optimizer):
    """For each step, with g the gradient and p the parameter:

        d = g + weight_decay * p
        buf = d on the first step, else momentum * buf + (1 - dampening) * d
        d = d + momentum * buf   (nesterov)   or   d = buf   (momentum > 0)
        p -= lr * d
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, dampening: float = 0.0):
        super().__init__(params, dict(lr=float(lr), momentum=float(momentum), nesterov=bool(nesterov),
                                      weight_decay=float(weight_decay), dampening=float(dampening)))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        self._check_non_negative(group, "momentum", "weight_decay", "dampening")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening == 0")

    def _update(self, p, g, group: dict, state: dict) -> None:
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        d = g
        if wd:
            d = p * wd
            d += g
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.copy()
            else:
                buf *= mu
                if group["dampening"]:
                    buf += (1.0 - group["dampening"]) * d
                else:
                    buf += d
            if group["nesterov"]:
                ahead = buf * mu  # a new array: neither the gradient nor the buffer is changed
                ahead += d
                d = ahead
            else:
                d = buf
        p -= lr * d
