"""autograd: a reverse-mode tensor engine on NumPy (CPU) or CuPy (NVIDIA GPU)."""
from autograd.grad_mode import no_grad, enable_grad, is_grad_enabled, set_grad_enabled  # noqa: F401
from autograd.tensor import Tensor  # noqa: F401
from autograd.function import Function  # noqa: F401
from autograd.backend import cuda_available  # noqa: F401
