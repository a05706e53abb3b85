"""Module and Parameter: layers that own parameters, found by attribute assignment.

Assigning a `Parameter` or a `Module` to an attribute registers it under that name, in
assignment order; `named_parameters()` walks the tree and yields dotted names
(`h.0.attn.c_attn.weight`). A parameter shared under two names (tied embeddings) is yielded
once, under the name it is first reached by, so optimizers update it once and
`num_params()` counts it once. Buffers are arrays a module keeps beside its parameters
(position tables); they follow `to()`, and only persistent ones enter `state_dict()`.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from autograd import backend
from autograd.grad_mode import no_grad
from autograd.tensor import Tensor


def _dtype_of(value) -> np.dtype:
    """The dtype of a state_dict value: an array's or Tensor's own, else what NumPy makes of it."""
    value = value.data if isinstance(value, Tensor) else value
    return value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype


class Parameter(Tensor):
    """A leaf Tensor that a Module owns and an optimizer updates (requires_grad=True)."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        super().__init__(data, requires_grad=requires_grad, dtype=dtype)

    def __repr__(self) -> str:
        dev = "" if self.device == "cpu" else f", device='{self.device}'"
        return f"Parameter(shape={self.shape}, dtype={self.dtype}{dev})"


class IncompatibleKeys(NamedTuple):
    """What `load_state_dict(strict=False)` did not match."""

    missing_keys: list
    unexpected_keys: list


_hook_ids = itertools.count()
_live_hooks = 0   # forward hooks registered and not removed, over every module


def any_forward_hooks() -> bool:
    """Whether some module has a forward hook: while none has, a fused path that skips layers
    need not look for hooks on each of them (gpt's Block walks a dozen modules per forward)."""
    return _live_hooks > 0


class _HookHandle:
    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        global _live_hooks
        if self._hooks.pop(self._key, None) is not None:
            _live_hooks -= 1


class Module:
    """Base class of every layer. Subclasses set attributes in `__init__` and define `forward`.

    Parameters, submodules and buffers live both in the instance `__dict__` (fast attribute
    access) and in the ordered registries `_parameters`, `_modules`, `_buffers`.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration -------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            )
        if name in self._buffers and not isinstance(value, (Parameter, Module)):
            # reassigning a buffer keeps it a buffer (and its persistence)
            value = value.data if isinstance(value, Tensor) else value
            self._buffers[name] = value
            object.__setattr__(self, name, value)
            return
        self._forget(name)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._forget(name)
        object.__delattr__(self, name)

    def _forget(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent.discard(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register `param` under `name` (None keeps the attribute but registers nothing)."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}): expected a Parameter, got {type(param).__name__}")
        setattr(self, name, param)

    def register_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"register_module({name!r}): expected a Module, got {type(module).__name__}")
        setattr(self, name, module)

    def register_buffer(self, name: str, array: Any, persistent: bool = True) -> None:
        """Keep `array` (numpy or cupy) as `self.<name>`; it moves with `to()`.

        Persistent buffers are part of `state_dict()`; tables derivable from the config
        (sinusoid and rotary tables) are registered with `persistent=False`.
        """
        if isinstance(array, Tensor):
            array = array.data
        self._forget(name)
        object.__setattr__(self, name, array)
        self._buffers[name] = array
        if not persistent:
            self._non_persistent.add(name)

    # ---- calling ------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            replaced = hook(self, args, out)
            if replaced is not None:
                out = replaced
        return out

    def register_forward_hook(self, fn: Callable) -> _HookHandle:
        """Call `fn(module, args, output)` after every forward; a non-None return replaces the output."""
        global _live_hooks
        key = next(_hook_ids)
        self._forward_hooks[key] = fn
        _live_hooks += 1
        return _HookHandle(self._forward_hooks, key)

    # ---- walking the tree ---------------------------------------------------------------
    def named_modules(self, prefix: str = "", _seen: set | None = None) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) for this module and every descendant, each module once."""
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, seen)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def named_parameters(self, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) in registration order; a shared parameter once by default."""
        seen: set[int] = set()
        for mod_name, mod in self.named_modules(prefix):
            for name, p in mod._parameters.items():
                if p is None:
                    continue
                if remove_duplicate:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, persistent_only: bool = False) -> Iterator[tuple[str, Any]]:
        for mod_name, mod in self.named_modules():
            for name, buf in mod._buffers.items():
                if buf is None or (persistent_only and name in mod._non_persistent):
                    continue
                yield (f"{mod_name}.{name}" if mod_name else name), buf

    def _aliases(self) -> dict[str, str]:
        """Every parameter name, shared ones included, mapped to the name state_dict uses."""
        first: dict[int, str] = {}
        out: dict[str, str] = {}
        for name, p in self.named_parameters(remove_duplicate=False):
            out[name] = first.setdefault(id(p), name)
        return out

    def num_params(self, trainable_only: bool = False) -> int:
        """Number of scalars in the parameters, each shared parameter counted once."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    # ---- modes, devices, gradients ------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        """Drop every parameter's gradient (the next backward allocates it afresh)."""
        for p in self.parameters():
            p.grad = None

    def requires_grad_(self, flag: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = bool(flag)
        return self

    def to(self, device: str | None = None, dtype: Any = None) -> Module:
        """Move parameters (and their gradients) and buffers to `device` and/or cast floats to `dtype`.

        Parameters stay the same objects, so references held elsewhere (tied weights) stay
        valid; create the optimizer after moving, since its state is not moved.
        """
        if device is not None:
            backend.parse_device(device)  # a clear error for a bad device string, before any move
        dtype = None if dtype is None else np.dtype(dtype)

        def convert(arr):
            if arr is None:
                return None
            if device is not None:
                arr = backend.to_device(arr, device)
            if dtype is not None and arr.dtype.kind == "f" and arr.dtype != dtype:
                arr = arr.astype(dtype)
            return arr

        with no_grad():
            for p in self.parameters():
                p.data = convert(p.data)
                p.grad = convert(p.grad)
            for m in self.modules():
                for name in list(m._buffers):
                    arr = convert(m._buffers[name])
                    m._buffers[name] = arr
                    object.__setattr__(m, name, arr)
        return self

    def cpu(self) -> Module:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Module:
        return self.to(f"cuda:{index}")

    def double(self) -> Module:
        return self.to(dtype=np.float64)

    def float(self) -> Module:
        return self.to(dtype=np.float32)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call `fn(module)` on every descendant, children first, then on self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict:
        """name -> backend array (numpy or cupy, the live array, not a copy).

        Holds every parameter once (a shared one under its first name) and persistent buffers.
        """
        sd: OrderedDict = OrderedDict()
        for name, p in self.named_parameters():
            sd[name] = p.data
        for name, buf in self.named_buffers(persistent_only=True):
            sd[name] = buf
        return sd

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> IncompatibleKeys:
        """Copy `state_dict`'s arrays (numpy, cupy or Tensors) into this module, in place.

        Values are copied onto each parameter's device and cast to its dtype. Names and shapes
        are all checked before anything is written: a mismatch raises one ValueError listing
        every missing, unexpected and mis-shaped entry (missing and unexpected ones only when
        `strict`). A shared parameter may appear under any of its names.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict expects a mapping of name -> array, got {type(state_dict).__name__}")
        aliases, targets = self._load_targets()
        unexpected, mis_shaped, mis_typed, found = [], [], [], set()
        for key, value in state_dict.items():
            canon = aliases.get(key)
            if canon is None:
                unexpected.append(key)
                continue
            found.add(canon)
            mod, attr, _ = targets[canon]
            current = getattr(mod, attr)
            current = current.data if isinstance(current, Tensor) else current
            shape = tuple(getattr(value, "shape", np.shape(value)))
            if shape != tuple(current.shape):
                mis_shaped.append(f"{key}: checkpoint {shape} vs model {tuple(current.shape)}")
            kind = _dtype_of(value).kind
            if kind not in "biuf" and not (kind == "c" and current.dtype.kind == "c"):
                mis_typed.append(f"{key}: {_dtype_of(value)} into {current.dtype}")
        missing = [name for name in targets if name not in found]

        problems = []
        if mis_shaped:
            problems.append("shape mismatch for " + "; ".join(mis_shaped))
        if mis_typed:
            problems.append("not numbers the model holds: " + "; ".join(mis_typed))
        if strict and missing:
            problems.append("missing keys: " + ", ".join(map(repr, missing)))
        if strict and unexpected:  # repr: a foreign mapping's keys need not be strings
            problems.append("unexpected keys: " + ", ".join(map(repr, unexpected)))
        if problems:
            typed = f"{len(mis_typed)} mis-typed, " if mis_typed else ""
            raise ValueError(
                f"load_state_dict into {type(self).__name__} failed ({len(mis_shaped)} mis-shaped, {typed}"
                f"{len(missing)} missing, {len(unexpected)} unexpected):\n  " + "\n  ".join(problems)
            )

        with no_grad():
            for key, value in state_dict.items():
                canon = aliases.get(key)
                if canon is None:
                    continue
                mod, attr, _ = targets[canon]
                current = getattr(mod, attr)
                dest = current.data if isinstance(current, Tensor) else current
                src = value.data if isinstance(value, Tensor) else value
                src = backend.to_device(np.asarray(src) if backend.xp_of(src) is np else src,
                                        backend.device_of(dest))
                dest[...] = src  # in place: optimizers and tied references keep seeing it
        return IncompatibleKeys(missing, unexpected)

    def _load_targets(self) -> tuple[dict[str, str], dict[str, tuple]]:
        """(every accepted name -> canonical name, canonical name -> (owner module, attribute, kind))."""
        aliases = self._aliases()
        targets: dict[str, Any] = {}
        for mod_name, mod in self.named_modules():
            for name, p in mod._parameters.items():
                if p is not None:
                    full = f"{mod_name}.{name}" if mod_name else name
                    targets.setdefault(aliases[full], (mod, name, "param"))
            for name, buf in mod._buffers.items():
                if buf is not None and name not in mod._non_persistent:
                    full = f"{mod_name}.{name}" if mod_name else name
                    targets[full] = (mod, name, "buffer")
                    aliases[full] = full
        return aliases, targets

    # ---- printing -----------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside this module's parentheses in `repr` (subclasses override)."""
        return ""

    def __repr__(self) -> str:
        return "\n".join(self._repr_lines(set()))

    def _repr_lines(self, seen: set) -> list[str]:
        seen.add(id(self))
        extra = self.extra_repr()
        own = ", ".join(f"{n} {tuple(p.shape)}" for n, p in self._parameters.items() if p is not None)
        count = self.num_params()
        note = f"{count:,} params" + (f": {own}" if own else "") if count else ""
        children = list(self.named_children())
        if not children:
            return [f"{type(self).__name__}({extra})" + (f"  # {note}" if note else "")]
        lines = [f"{type(self).__name__}(" + (f"{extra}" if extra else "") + (f"  # {note}" if note else "")]
        for name, child in children:
            if id(child) in seen:
                lines.append(f"  ({name}): {type(child).__name__}(...)  # shared, shown above")
                continue
            sub = child._repr_lines(seen)
            lines.append(f"  ({name}): {sub[0]}")
            lines.extend("  " + s for s in sub[1:])
        lines.append(")")
        return lines
