"""The Tensor method table: operators and methods, each forwarding to one op in autograd.ops.

This table is the single list of what a Tensor can do; each op's code lives in the module
named for it. Methods are the ops' functions themselves (bound at install, no extra call).
"""
from __future__ import annotations

from autograd import ops


def install(cls) -> None:
    cls.__add__ = ops.add
    cls.__radd__ = lambda a, b: ops.add(b, a)
    cls.__sub__ = ops.sub
    cls.__rsub__ = lambda a, b: ops.sub(b, a)
    cls.__mul__ = ops.mul
    cls.__rmul__ = lambda a, b: ops.mul(b, a)
    cls.__truediv__ = ops.div
    cls.__rtruediv__ = lambda a, b: ops.div(b, a)
    cls.__neg__ = ops.neg
    cls.__pow__ = ops.pow
    cls.__rpow__ = lambda a, b: ops.pow(b, a)
    cls.__matmul__ = ops.matmul
    cls.__rmatmul__ = lambda a, b: ops.matmul(b, a)
    cls.__getitem__ = ops.getitem
    # Comparisons, == and != included, are elementwise and give boolean tensors outside the
    # graph (masks), as in NumPy. Hashing stays by identity (Tensor.__hash__).
    cls.__eq__ = _equality("eq")
    cls.__ne__ = _equality("ne")
    cls.__lt__ = lambda a, b: ops.compare(a, b, "lt")
    cls.__le__ = lambda a, b: ops.compare(a, b, "le")
    cls.__gt__ = lambda a, b: ops.compare(a, b, "gt")
    cls.__ge__ = lambda a, b: ops.compare(a, b, "ge")

    for name in (
        # reductions
        "sum", "mean", "max", "min", "var", "argmax", "argmin",
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


def _equality(op):
    def method(a, b):
        if b is None or isinstance(b, (str, bytes)):   # not an array value: Python's identity rule
            return NotImplemented
        return ops.compare(a, b, op)

    method.__name__ = f"__{op}__"
    return method


def _method(name):
    # Bound directly when the op exists at install time (no extra call per use); late-bound
    # through the ops module otherwise.
    fn = getattr(ops, name, None)
    if fn is not None:
        return fn

    def method(self, *args, **kwargs):
        return getattr(ops, name)(self, *args, **kwargs)

    method.__name__ = name
    return method
