"""autograd: a reverse-mode tensor engine on NumPy (CPU) or CuPy (NVIDIA GPU)."""
from autograd.grad_mode import no_grad, enable_grad, is_grad_enabled, set_grad_enabled  # noqa: F401
from autograd.tensor import Tensor  # noqa: F401
from autograd.function import Function  # noqa: F401
from autograd.backend import cuda_available  # noqa: F401
from autograd.allocator import keep_freed_memory  # noqa: F401
from autograd.random import manual_seed  # noqa: F401
from autograd.factories import (  # noqa: F401
    zeros, ones, full, randn, rand, arange, zeros_like, ones_like, full_like, randn_like, rand_like,
)
from autograd.gradcheck import gradcheck  # noqa: F401
from autograd.ops import *  # noqa: F401,F403  (the functional ops: matmul, concat, gelu, ...)
from autograd import functional  # noqa: F401,E402  (vjp, jacobian: `autograd.functional.jacobian`)
