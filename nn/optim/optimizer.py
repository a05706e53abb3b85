"""Optimizer: parameter groups, per-parameter state, and a state_dict that resumes exactly.

A subclass implements `_update(param_array, grad, group, state)`, which changes the
parameter array in place (no new parameter arrays, no graph). State holds plain arrays and
numbers only, so `state_dict()` can be written to a checkpoint and read back bit for bit.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from autograd import backend
from autograd.grad_mode import no_grad
from autograd.tensor import Tensor


class Optimizer:
    """params: an iterable of Parameters, or of dicts {"params": [...], <hyperparameter>: value}
    (parameter groups: e.g. weight_decay=0.0 for biases, norms and embeddings). Each group's
    dict is mutable: a schedule sets group["lr"] before each step."""

    # What every non-empty per-parameter state holds: load_state_dict refuses a state without it.
    STATE_KEYS: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict[Tensor, dict] = {}
        if isinstance(params, Tensor):
            raise TypeError(f"{type(self).__name__}: params must be an iterable of Parameters or of group dicts, "
                            "got a single Tensor (wrap it in a list)")
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: a parameter group must be a dict with a 'params' entry, got {type(group).__name__}")
        unknown = sorted(set(group) - set(self.defaults) - {"params"})
        if unknown:
            raise ValueError(f"{name}: unknown option(s) {unknown} in parameter group; known: {sorted(self.defaults)}")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: group {len(self.param_groups)} item {i} is a {type(p).__name__}, not a Parameter")
            if not p.is_leaf:
                raise ValueError(f"{name}: group {len(self.param_groups)} item {i} is not a leaf tensor (it came from an op)")
            if id(p) in seen:
                raise ValueError(f"{name}: a parameter appears in more than one group (or twice), item {i} of group "
                                 f"{len(self.param_groups)}")
            seen.add(id(p))
        full = {**self.defaults, **group, "params": params}
        self._validate(full)
        self.param_groups.append(full)

    def _validate(self, group: dict) -> None:
        self._check_non_negative(group, "lr")

    def _check_non_negative(self, group: dict, *names: str) -> None:
        """Each option a finite number >= 0 (NaN passes a plain ``< 0`` test, then poisons every weight)."""
        for name in names:
            if not 0 <= group[name] < float("inf"):
                raise ValueError(f"{type(self).__name__}: {name} must be a finite number >= 0, got {group[name]}")

    # ---- updating -----------------------------------------------------------------------
    def zero_grad(self) -> None:
        """Drop every parameter's gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def step(self) -> None:
        """Update every parameter that has a gradient, in place, using each group's settings."""
        with no_grad():
            for group in self.param_groups:
                items = []
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.shape != p.data.shape:
                        raise RuntimeError(f"{type(self).__name__}: gradient shape {p.grad.shape} does not "
                                           f"match parameter shape {p.data.shape}")
                    items.append((p.data, p.grad, self.state.setdefault(p, {})))
                self._update_group(items, group)

    def _update_group(self, items: list, group: dict) -> None:
        """Update a group's [(parameter array, gradient, state)] in place: one `_update` each,
        unless a subclass updates them together (AdamW: one GPU launch, or flat host buffers, for the group)."""
        for p, g, state in items:
            self._update(p, g, group, state)

    def _update(self, p, g, group: dict, state: dict) -> None:
        raise NotImplementedError

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every group."""
        for group in self.param_groups:
            group["lr"] = float(lr)

    # ---- saving and resuming ------------------------------------------------------------
    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        """{"state": {index: {name: array or number}}, "param_groups": [{options..., "params": [index]}]}.

        Indices number the parameters in group order. Arrays are the live state (not copies).
        """
        index = {id(p): i for i, p in enumerate(self._params())}
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index and s}
        groups = []
        for g in self.param_groups:
            entry = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
            entry["params"] = [index[id(p)] for p in g["params"]]
            groups.append(entry)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore options and state saved by `state_dict()` (arrays are copied onto each
        parameter's device). The groups must hold the same numbers of parameters."""
        name = type(self).__name__
        try:
            groups, state = state_dict["param_groups"], state_dict["state"]
        except (KeyError, TypeError):
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups'") from None
        if len(groups) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: saved state has {len(groups)} parameter groups, "
                             f"this optimizer has {len(self.param_groups)}")
        for i, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"{name}.load_state_dict: group {i} holds {len(saved['params'])} parameters "
                                 f"in the saved state and {len(mine['params'])} here")
        params = self._params()
        problems = []
        new_state: dict[Tensor, dict] = {}
        for key, entry in state.items():
            i = int(key)
            if not 0 <= i < len(params):
                problems.append(f"state for parameter index {i}, but there are {len(params)} parameters")
                continue
            p = params[i]
            restored = {}
            for k, v in entry.items():
                if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
                    if tuple(v.shape) != tuple(p.shape):
                        problems.append(f"state '{k}' of parameter {i}: shape {tuple(v.shape)} vs parameter {tuple(p.shape)}")
                        continue
                    v = backend.to_device(np.asarray(v) if backend.xp_of(v) is np else v, p.device)
                    v = v.astype(p.dtype, copy=True) if v.dtype != p.dtype else v.copy()
                elif hasattr(v, "shape"):
                    v = v.item()
                restored[k] = v
            missing = [k for k in self.STATE_KEYS if k not in restored]
            if missing:  # caught here, not as a KeyError deep inside the first step
                problems.append(f"state of parameter {i} has no {', '.join(map(repr, missing))} "
                                f"(each needs {', '.join(self.STATE_KEYS)})")
            new_state[p] = restored
        if problems:
            raise ValueError(f"{name}.load_state_dict: " + "; ".join(problems))
        for saved, mine in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(mine.get(k), tuple) else v
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for i, g in enumerate(self.param_groups):
            opts = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} params, {opts}")
        return "\n".join(lines) + "\n)"
