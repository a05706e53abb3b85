"""All differentiable ops. Each submodule holds one family, forward and backward side by side."""
from autograd.ops.arith import add, sub, mul, div, neg, pow  # noqa: F401
