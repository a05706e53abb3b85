"""Function: one differentiable operation, its forward and backward side by side.

A subclass implements
    forward(self, *arrays, **options) -> array          # backend arrays in, one array out
    backward(self, grad) -> tuple[array | None, ...]    # one gradient per tensor input
and saves what backward needs as attributes of `self`. Calling `Op.apply(*tensors, **options)`
runs forward and, when a graph is being recorded, makes the Function instance the graph node
of the output tensor.

A node refers to its inputs' nodes (or, for leaves, to the leaf tensors), never to
intermediate tensors, so an intermediate array is kept alive only if some backward saved it.
After backward the node drops its saved arrays and its parents (`release`), unless the caller
asked for `retain_graph=True`.
"""
from __future__ import annotations

from typing import Any

from numpy import asarray as _np_asarray, generic as _np_generic

from autograd.grad_mode import _state as _grad_state


_make_tensor = None  # Tensor._make, bound on first use (tensor.py imports this module)


def _bind_tensor():
    global _make_tensor
    from autograd.tensor import Tensor

    _make_tensor = Tensor._make
    return _make_tensor


class Function:
    # Graph bookkeeping lives in these attributes; subclasses add their own saved values.
    parents: tuple = ()            # per input: a Function node, a leaf Tensor, or None
    needs_input_grad: tuple = ()   # per input: whether that input requires a gradient
    hooks: list | None = None      # gradient hooks registered on the output tensor
    retained: Any = None           # weakref to the output tensor when retain_grad() was called
    freed: bool = False
    # Set by the engine when no later backward reads this node's saved arrays (no retain_graph):
    # its backward may then write its gradient over them instead of into a new array.
    last_backward: bool = False

    def forward(self, *arrays, **options):
        raise NotImplementedError

    def backward(self, grad):
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **options):
        """Run the op on Tensors (all inputs must already be Tensors); return a Tensor."""
        make = _make_tensor or _bind_tensor()
        node = cls()
        out = node.forward(*[t.data for t in inputs], **options)
        if isinstance(out, _np_generic):  # NumPy reductions and indexing return scalars
            out = _np_asarray(out)
        if _grad_state.enabled:
            for t in inputs:
                if t.requires_grad:
                    node.needs_input_grad = tuple([t.requires_grad for t in inputs])
                    # a node links to its inputs' nodes (a leaf: the tensor itself)
                    node.parents = tuple([(t if t._node is None else t._node) if t.requires_grad else None
                                          for t in inputs])
                    return make(out, node)
        return make(out, None)

    def release(self) -> None:
        """Drop saved arrays and the links to the rest of the graph."""
        keep_hooks, keep_retained = self.hooks, self.retained
        self.__dict__.clear()
        self.hooks, self.retained, self.freed = keep_hooks, keep_retained, True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} node>"


def unbroadcast(grad, shape: tuple):
    """Sum `grad` down to `shape`, undoing NumPy broadcasting (leading and size-1 axes)."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad if grad.shape == tuple(shape) else grad.reshape(shape)
