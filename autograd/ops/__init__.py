"""All differentiable ops. Each submodule holds one family, forward and backward side by side."""
from inspect import ismodule as _ismodule

from autograd.ops.arith import add, sub, mul, div, neg, pow  # noqa: F401
from autograd.ops.reduce import sum, mean, max, min, var, argmax, argmin  # noqa: F401
from autograd.ops.unary import exp, log, sqrt, abs, clip  # noqa: F401
from autograd.ops.activation import tanh, sigmoid, relu, gelu, silu  # noqa: F401
from autograd.ops.shape import (  # noqa: F401
    reshape, view, transpose, permute, squeeze, unsqueeze, expand, broadcast_to, flatten,
)
from autograd.ops.matmul import matmul, linear  # noqa: F401
from autograd.ops.index import getitem, embedding, gather  # noqa: F401
from autograd.ops.join import concat, cat, stack, split, chunk  # noqa: F401
from autograd.ops.select import where, masked_fill, tril, triu, compare, eq, ne  # noqa: F401
from autograd.ops.dropout import dropout  # noqa: F401
from autograd.ops.cast import astype, to_device  # noqa: F401
from autograd.ops.rope import rope  # noqa: F401

# Composites with a fused forward and an analytic backward (and, on the GPU, the CUDA kernels
# declared with autograd.cuda.kernel_op); tests/autograd/test_fused.py checks each against the
# same op composed from the primitives above.
from autograd.ops.softmax import softmax, log_softmax  # noqa: F401
from autograd.ops.loss import cross_entropy  # noqa: F401
from autograd.ops.norm import layer_norm, rms_norm  # noqa: F401
from autograd.ops.attention import scaled_dot_product_attention  # noqa: F401

# Every public function above (not the submodules) is also an attribute of `autograd`.
__all__ = [_n for _n, _v in list(globals().items()) if not _n.startswith("_") and not _ismodule(_v)]
