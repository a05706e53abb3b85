"""Mixed precision: float16 compute with float32 master weights and dynamic loss scaling.

Half precision has a small range (largest finite 65504, smallest normal 6.1e-5), so small
gradients underflow to zero. Dynamic loss scaling multiplies the loss (in practice: the
gradient that seeds backward) by a large `scale`, divides the gradients by it before the
update, and adapts: a step whose gradients hold inf/NaN is skipped and the scale halved; after
`growth_interval` good steps in a row the scale doubles.

`MixedPrecision` keeps a float32 copy ("master") of every parameter, casts the model to
float16 for the forward and backward, and turns the float16 gradients into float32 master
gradients, which the optimizer updates; the new masters are then cast back into the model.
Checkpoints store the float32 masters, so they load into a float32 model on the CPU.

bfloat16 compute is not offered: NumPy has no bfloat16 dtype and CuPy has none of its own (CuPy
14 can hold bfloat16 arrays only through the optional third-party ml_dtypes package, which is
not a dependency here), so the ops cannot take one; bfloat16 storage is uint16 bit patterns
(nn.bfloat16, converted on the device by autograd/cuda/amp.py, whose unscale kernel also takes
bfloat16 gradients). The CPU path stays float32 (`gpt train --precision` accepts fp16/tf32 only
with a CUDA device).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from autograd import backend
from autograd.grad_mode import no_grad
from nn.module import Module, Parameter

PRECISIONS = ("fp32", "tf32", "fp16")
FLOAT16_MAX_SCALE = 2.0 ** 15   # a float16 seed gradient must stay below 65504


class DynamicLossScaler:
    """Loss scale that backs off on overflow and grows after a run of good steps.

    init_scale: starting scale; growth_factor / backoff_factor: multipliers on growth and on
    overflow; growth_interval: good steps in a row before growing; min_scale / max_scale: bounds.
    """

    def __init__(self, init_scale: float = 2.0 ** 15, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 1000, min_scale: float = 1.0, max_scale: float = 2.0 ** 24):
        if not (init_scale > 0 and growth_factor > 1.0 and 0.0 < backoff_factor < 1.0 and growth_interval >= 1
                and 0 < min_scale <= max_scale):
            raise ValueError(
                f"DynamicLossScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
                f"growth_interval >= 1, 0 < min_scale <= max_scale; got {init_scale}, {growth_factor}, "
                f"{backoff_factor}, {growth_interval}, {min_scale}, {max_scale}")
        self.scale = float(min(max(init_scale, min_scale), max_scale))
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.min_scale, self.max_scale = float(min_scale), float(max_scale)
        self.good_steps = 0      # good steps since the last change of scale
        self.skipped = 0         # steps skipped for inf/NaN gradients, in total

    def backward(self, loss) -> None:
        """loss.backward() seeded with `scale` instead of 1 (so every gradient is scaled)."""
        xp = loss.xp
        loss.backward(xp.full(loss.shape, self.scale, dtype=loss.dtype))

    def unscale_(self, grads: Iterable[Any]) -> bool:
        """Divide every gradient array by the scale, in place; True when any holds inf or NaN.

        One host synchronisation per device in all (the finiteness flags are reduced on the device).
        """
        inv = 1.0 / self.scale
        flags: dict = {}
        for g in grads:
            if g is None:
                continue
            g *= inv
            xp = backend.xp_of(g)
            ok = xp.isfinite(g).all()
            key = backend.device_of(g)
            flags[key] = ok if key not in flags else xp.logical_and(flags[key], ok)
        return not all(bool(f) for f in flags.values())

    def update(self, found_inf: bool) -> None:
        """After a step: back off (and count a skip) on overflow, else count toward growth."""
        if found_inf:
            self.scale = max(self.scale * self.backoff_factor, self.min_scale)
            self.good_steps = 0
            self.skipped += 1
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale = min(self.scale * self.growth_factor, self.max_scale)
            self.good_steps = 0

    def step(self, optimizer, params: Iterable[Any]) -> bool:
        """Unscale the gradients of `params`, then step `optimizer` unless they overflowed.
        Returns whether the step was taken; gradients are dropped when it was skipped."""
        params = list(params)
        found_inf = self.unscale_([p.grad for p in params])
        if found_inf:
            for p in params:
                p.grad = None
        else:
            optimizer.step()
        self.update(found_inf)
        return not found_inf

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        try:
            self.scale = float(state["scale"])
            self.good_steps = int(state.get("good_steps", 0))
            self.skipped = int(state.get("skipped", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"DynamicLossScaler.load_state_dict: malformed state {state!r}: {exc}") from None


class MixedPrecision:
    """float16 compute for `model` with float32 master weights and a DynamicLossScaler.

    After construction the model's parameters are float16; `masters` are float32 Parameters in
    the order of model.named_parameters(). Build the optimizer over `master_groups(groups)`.
    Per optimizer step: `backward(loss)` for each micro-batch, then `step(optimizer, grad_clip)`.
    """

    def __init__(self, model: Module, dtype: Any = "float16", scaler: DynamicLossScaler | None = None):
        self.dtype = np.dtype(dtype)
        if self.dtype != np.float16:
            raise ValueError(f"MixedPrecision: compute dtype must be float16, got {self.dtype}")
        self.model = model
        self.named = list(model.named_parameters())
        with no_grad():
            self.masters = [Parameter(p.data.astype(np.float32, copy=True)) for _, p in self.named]
        model.to(dtype=self.dtype)
        self._index = {id(p): i for i, (_, p) in enumerate(self.named)}
        self.scaler = scaler or DynamicLossScaler(init_scale=FLOAT16_MAX_SCALE, max_scale=FLOAT16_MAX_SCALE)

    def master_groups(self, groups: list) -> list:
        """Parameter groups over the model's parameters -> the same groups over the masters."""
        out = []
        for g in groups:
            if isinstance(g, dict):
                out.append({**g, "params": [self.masters[self._index[id(p)]] for p in g["params"]]})
            else:
                out.append(self.masters[self._index[id(g)]])
        return out

    def backward(self, loss) -> None:
        self.scaler.backward(loss)

    def step(self, optimizer, grad_clip: float = 0.0) -> tuple[bool, float]:
        """Move the float16 gradients into float32 master gradients, unscale, skip on overflow,
        else clip, step and copy the masters back into the model. Returns (stepped, grad norm);
        the norm is inf when the step was skipped."""
        from nn.optim import clip_grad_norm, grad_norm

        with no_grad():
            found_inf = self._grads_to_masters()
            if found_inf:
                for m in self.masters:
                    m.grad = None
                self.scaler.update(True)
                return False, math.inf
            norm = clip_grad_norm(self.masters, grad_clip) if grad_clip > 0 else grad_norm(self.masters)
            optimizer.step()
            optimizer.zero_grad()
            self.copy_to_model()
        self.scaler.update(False)
        return True, norm

    def _grads_to_masters(self) -> bool:
        """Unscaled float32 master gradients from the model's float16 ones (which are dropped);
        True when any is inf or NaN."""
        from autograd import cuda as _cuda

        grads = [p.grad for _, p in self.named]
        for _, p in self.named:
            p.grad = None
        first = next((g for g in grads if g is not None), None)
        if first is not None and _cuda.use(first):  # GPU: one fused kernel per gradient, one sync
            from autograd.cuda.amp import unscale_to_float32

            flag = backend.xp_of(first).zeros((1,), dtype=np.int32)
            inv = 1.0 / self.scaler.scale
            for m, g in zip(self.masters, grads):
                m.grad = None if g is None else unscale_to_float32(g, inv, flag)
            return bool(int(flag[0]))
        for m, g in zip(self.masters, grads):
            m.grad = None if g is None else g.astype(np.float32)
        return self.scaler.unscale_([m.grad for m in self.masters])

    def copy_to_model(self) -> None:
        """Cast the float32 masters into the model's float16 parameters, in place."""
        with no_grad():
            for (_, p), m in zip(self.named, self.masters):
                backend.xp_of(p.data).copyto(p.data, m.data, casting="same_kind")

    def state_dict(self) -> dict:
        """The float32 masters under the model's parameter names (plus the model's buffers)."""
        sd = dict(self.model.state_dict())
        for (name, _), m in zip(self.named, self.masters):
            sd[name] = m.data
        return sd

    def load_state_dict(self, state: dict) -> None:
        """Set the masters from a float32 (or any float) state dict and copy them into the model."""
        self.model.load_state_dict(state)
        missing = [name for name, _ in self.named if name not in state]
        if missing:
            raise ValueError(f"MixedPrecision.load_state_dict: missing {missing}")
        with no_grad():
            for (name, p), m in zip(self.named, self.masters):
                arr = backend.to_device(np.asarray(state[name]) if backend.xp_of(state[name]) is np else state[name],
                                        p.device)
                m.data = arr.astype(np.float32, copy=True)
        self.copy_to_model()


def configure(model: Module, precision: str, device: str) -> MixedPrecision | None:
    """Apply `precision` ("fp32", "tf32", "fp16") to `model` on `device`; returns the
    MixedPrecision wrapper for fp16, else None. fp32 turns TF32 off on the GPU."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    kind, _ = backend.parse_device(device)
    if kind == "cpu":
        if precision != "fp32":
            raise ValueError(f"precision {precision!r} needs a CUDA device (--device cuda); "
                             "the CPU path computes in float32")
        return None
    from autograd.cuda import set_tf32

    set_tf32(precision == "tf32")
    if precision == "fp16":
        return MixedPrecision(model, "float16")
    return None
