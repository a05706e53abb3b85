"""Optimizers (SGD, AdamW), gradient clipping and learning-rate schedules."""
from nn.optim.optimizer import Optimizer  # noqa: F401
from nn.optim.sgd import SGD  # noqa: F401
from nn.optim.adamw import AdamW  # noqa: F401
from nn.optim.clip import clip_grad_norm, grad_norm  # noqa: F401
from nn.optim.schedules import (  # noqa: F401
    warmup_cosine, cosine_schedule, linear_warmup_decay, constant_with_warmup,
)
from nn.optim.groups import weight_decay_groups  # noqa: F401
