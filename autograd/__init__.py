"""autograd: a reverse-mode tensor engine on NumPy (CPU) or CuPy (NVIDIA GPU).

`from autograd import *` brings the names in `__all__`; the ops named like Python builtins
(`sum`, `max`, `min`, `abs`, `pow`) are left out of it so that they do not shadow the builtins:
call them as `autograd.sum(x)` or as methods (`x.sum()`).
"""
import builtins as _builtins

from autograd.grad_mode import no_grad, enable_grad, is_grad_enabled, set_grad_enabled  # noqa: F401
from autograd.tensor import Tensor  # noqa: F401
from autograd.function import Function  # noqa: F401
from autograd.backend import cuda_available  # noqa: F401
from autograd.allocator import keep_freed_memory  # noqa: F401
from autograd.parallel import set_threads  # noqa: F401  (the default: autograd.threads)
from autograd.random import manual_seed  # noqa: F401
from autograd.factories import (  # noqa: F401
    zeros, ones, full, randn, rand, arange, zeros_like, ones_like, full_like, randn_like, rand_like,
)
from autograd.gradcheck import gradcheck  # noqa: F401
from autograd.ops import *  # noqa: F401,F403  (the functional ops: matmul, concat, gelu, ...)
from autograd import ops as _ops  # noqa: E402
from autograd import functional  # noqa: F401,E402  (vjp, jacobian: `autograd.functional.jacobian`)

# The package's own names, then every op of autograd.ops except those that would shadow a
# Python builtin (sum, max, min, abs, pow) under `from autograd import *`.
__all__ = [
    "Tensor", "Function", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "cuda_available", "keep_freed_memory", "set_threads", "manual_seed", "gradcheck", "functional",
    "zeros", "ones", "full", "randn", "rand", "arange", "zeros_like", "ones_like", "full_like",
    "randn_like", "rand_like",
] + [_name for _name in _ops.__all__ if not hasattr(_builtins, _name)]
