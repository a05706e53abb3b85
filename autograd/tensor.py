"""Tensor: a backend array (numpy or cupy) plus the graph node that produced it.

Arithmetic and methods delegate to the ops in `autograd.ops`, where each op's forward and
backward live side by side; this module only holds the tensor's own state and the thin
method table.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from autograd import backend
from autograd.engine import backward as _run_backward

# Python floats and lists become float32 (the default dtype); arrays keep their dtype.
DEFAULT_FLOAT = np.float32


def _to_array(data: Any, dtype=None):
    if isinstance(data, Tensor):
        data = data.data
    xp = backend.xp_of(data)
    if isinstance(data, (np.ndarray,)) or xp is not np:
        return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    arr = np.asarray(data)
    if dtype is not None:
        return arr.astype(dtype, copy=False)
    if arr.dtype == np.float64:
        return arr.astype(DEFAULT_FLOAT)
    return arr


class _HookHandle:
    def __init__(self, hooks: list, fn: Callable):
        self._hooks, self._fn = hooks, fn

    def remove(self) -> None:
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    `data` is a numpy.ndarray or cupy.ndarray; `grad` (after backward) is an array of the same
    backend, shape and dtype. A tensor created by the user is a leaf; a tensor produced by an op
    while recording carries the op's graph node.
    """

    __slots__ = ("data", "grad", "requires_grad", "_node", "_hooks", "__weakref__")
    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our reflected ops
    # == and != are elementwise (boolean tensors, see autograd/ops/methods.py), so a tensor's
    # hash is its identity: tensors work as dict keys and set members (which test `is` before
    # ==). `t in some_list`, `some_list.index(t)` and weakref.WeakKeyDictionary compare values
    # with ==: look tensors up by id() there.
    __hash__ = object.__hash__

    def __init__(self, data: Any, requires_grad: bool = False, dtype=None, device: str | None = None):
        arr = _to_array(data, dtype)
        if arr.dtype.kind not in "biufc":  # None, strings, objects: no op computes with them
            raise TypeError(f"a Tensor holds numbers; got {type(data).__name__} of dtype {arr.dtype}")
        if device is not None:
            arr = backend.to_device(arr, device)
        if requires_grad and arr.dtype.kind not in "fc":
            raise TypeError(f"only floating-point tensors can require gradients, got dtype {arr.dtype}")
        self.data = arr
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._node = None
        self._hooks = None

    @classmethod
    def _make(cls, data, node) -> "Tensor":
        """Wrap an op's output array without the checks of __init__ (the hot path)."""
        t = cls.__new__(cls)
        t.data, t.grad, t._node, t._hooks = data, None, node, None
        t.requires_grad = node is not None
        return t

    # ---- what the tensor is -------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def device(self) -> str:
        return backend.device_of(self.data)

    @property
    def xp(self):
        """The array module (numpy or cupy) of this tensor."""
        return backend.xp_of(self.data)

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    def __len__(self) -> int:
        return len(self.data)

    # A one-element tensor converts like a Python number (float(loss), `if mask.any():`);
    # anything larger is ambiguous, as for numpy arrays.
    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        if self.data.size != 1:
            raise TypeError(f"float() needs a tensor with one element, got shape {self.shape}")
        return float(self.item())

    def __int__(self) -> int:
        if self.data.size != 1:
            raise TypeError(f"int() needs a tensor with one element, got shape {self.shape}")
        return int(self.item())

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        dev = "" if self.device == "cpu" else f", device='{self.device}'"
        body = np.array2string(self.numpy(), precision=4, separator=", ", threshold=50)
        return f"Tensor({body}, dtype={self.dtype}{dev}{grad})"

    # ---- leaving the graph and the device ----------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host numpy array (a copy when the tensor lives on the GPU)."""
        return self.data if isinstance(self.data, np.ndarray) else self.data.get()

    def item(self) -> float | int:
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def detach(self) -> "Tensor":
        """The same array, cut from the graph."""
        return Tensor._make(self.data, None)

    def to(self, device: str) -> "Tensor":
        """This tensor on `device` ('cpu', 'cuda', 'cuda:N'); differentiable."""
        from autograd import ops

        return ops.to_device(self, device)

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "Tensor":
        return self.to(f"cuda:{index}")

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only change leaf tensors")
        if flag and self.data.dtype.kind not in "fc":
            raise TypeError(f"only floating-point tensors can require gradients, got dtype {self.dtype}")
        self.requires_grad = bool(flag)
        return self

    # ---- gradients -----------------------------------------------------------------------
    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate the gradient of this tensor into the `.grad` of every leaf it depends on.

        `grad` defaults to 1 for a one-element tensor; any other shape needs an explicit one.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no graph was recorded)")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward() on a non-scalar tensor of shape {self.shape} needs a gradient "
                    "argument of the same shape"
                )
            grad = self.xp.ones_like(self.data)
        else:
            grad = _to_array(grad, self.dtype)
            if backend.xp_of(grad) is not self.xp:
                grad = backend.to_device(grad, self.device)
            if grad.shape != self.shape:
                raise ValueError(f"backward() gradient of shape {grad.shape} for a tensor of shape {self.shape}")
        if self._node is None:  # a leaf: its gradient is the seed itself
            from autograd.engine import _accumulate_leaf

            _accumulate_leaf(self, grad, True, set())
            return
        _run_backward(self, grad, retain_graph=retain_graph)

    def retain_grad(self) -> None:
        """Keep `.grad` on this non-leaf tensor after backward (leaves always keep it)."""
        if self._node is not None:
            self._node.retained = weakref.ref(self)

    def register_hook(self, fn: Callable) -> _HookHandle:
        """Call `fn(grad)` when this tensor's gradient is computed; a non-None return replaces it."""
        if not self.requires_grad:
            raise RuntimeError("register_hook on a tensor that does not require grad")
        if self._node is None:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
        else:
            if self._node.hooks is None:
                self._node.hooks = []
            hooks = self._node.hooks
        hooks.append(fn)
        return _HookHandle(hooks, fn)

    def zero_grad(self) -> None:
        self.grad = None


# The method table lives in autograd/ops (imported here, after Tensor exists, to avoid a cycle).
from autograd.ops import methods as _methods  # noqa: E402

_methods.install(Tensor)
