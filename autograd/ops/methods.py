"""The Tensor method table: operators and methods, each forwarding to one op in autograd.ops.

Lookups go through the `ops` module at call time, so this table is the single list of what
a Tensor can do, and each op's code lives in the module named for it.
"""
from __future__ import annotations

from autograd import ops


def _reflected(name):
    fn = getattr(ops, name)
    return lambda self, other: fn(other, self)


def install(cls) -> None:
    cls.__add__ = lambda a, b: ops.add(a, b)
    cls.__radd__ = lambda a, b: ops.add(b, a)
    cls.__sub__ = lambda a, b: ops.sub(a, b)
    cls.__rsub__ = lambda a, b: ops.sub(b, a)
    cls.__mul__ = lambda a, b: ops.mul(a, b)
    cls.__rmul__ = lambda a, b: ops.mul(b, a)
    cls.__truediv__ = lambda a, b: ops.div(a, b)
    cls.__rtruediv__ = lambda a, b: ops.div(b, a)
    cls.__neg__ = lambda a: ops.neg(a)
    cls.__pow__ = lambda a, b: ops.pow(a, b)
    cls.__rpow__ = lambda a, b: ops.pow(b, a)
    cls.__matmul__ = lambda a, b: ops.matmul(a, b)
    cls.__rmatmul__ = lambda a, b: ops.matmul(b, a)
    cls.__getitem__ = lambda a, idx: ops.getitem(a, idx)
    # Comparisons give boolean tensors outside the graph (masks); __eq__ stays identity so
    # tensors remain hashable dictionary keys.
    cls.__lt__ = lambda a, b: ops.compare(a, b, "lt")
    cls.__le__ = lambda a, b: ops.compare(a, b, "le")
    cls.__gt__ = lambda a, b: ops.compare(a, b, "gt")
    cls.__ge__ = lambda a, b: ops.compare(a, b, "ge")

    for name in (
        # reductions
        "sum", "mean", "max", "min", "var",
        # elementwise math
        "exp", "log", "sqrt", "abs", "clip", "tanh", "sigmoid", "relu", "gelu", "silu",
        # shape and movement
        "reshape", "view", "transpose", "permute", "squeeze", "unsqueeze", "expand",
        "broadcast_to", "flatten", "split", "chunk", "tril", "triu",
        # masking and composites
        "masked_fill", "softmax", "log_softmax", "astype", "dropout",
    ):
        setattr(cls, name, _method(name))
    cls.T = property(lambda a: ops.transpose(a, -1, -2) if a.ndim >= 2 else a)
    cls.float = lambda a: ops.astype(a, "float32")
    cls.double = lambda a: ops.astype(a, "float64")
    cls.half = lambda a: ops.astype(a, "float16")


def _method(name):
    def method(self, *args, **kwargs):
        return getattr(ops, name)(self, *args, **kwargs)

    method.__name__ = name
    return method
