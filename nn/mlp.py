"""Feed-forward blocks: MLP (n_embd -> hidden -> n_embd) and the gated SwiGLU."""
from __future__ import annotations

import autograd
from autograd.tensor import Tensor
from autograd.ops import mlp as mlp_op
from autograd.ops import swiglu as swiglu_op
from autograd.ops.activation import silu_array
from nn.activation import GELU, activation as make_activation
from nn.dropout import Dropout
from nn.linear import Linear
from nn.module import Module


class MLP(Module):
    """x (..., n_embd) -> c_fc -> activation -> c_proj -> dropout -> (..., n_embd); hidden defaults to 4 * n_embd.

    `hook`: None, or a function (name, Tensor) -> Tensor through which forward passes the points
    of HOOKS (gpt/inspect/hooks.py lists them with their shapes).
    """

    HOOKS = ("hook_pre", "hook_post")
    hook = None

    def __init__(self, n_embd: int, hidden: int | None = None, activation: str | Module = "gelu",
                 bias: bool = True, dropout: float = 0.0):
        super().__init__()
        hidden = 4 * n_embd if hidden is None else int(hidden)
        self.c_fc = Linear(n_embd, hidden, bias=bias)
        self.act = make_activation(activation)
        self.c_proj = Linear(hidden, n_embd, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.hook is not None:
            h = self.hook("hook_post", self.act(self.hook("hook_pre", self.c_fc(x))))
            return self.dropout(self.c_proj(h))
        if self._fused(x):   # the three layers in one op, by blocks of rows (autograd/ops/mlp.py)
            return self.dropout(self.fused(x))
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))

    def fused(self, x: Tensor, norm=None, residual: bool = False) -> Tensor:
        """The three layers as one gelu_mlp op (callers check _fused first), with a block's
        pre-norm (norm: autograd.ops.mlp.gelu_mlp's spec) and skip; no dropout."""
        fc, proj = self.c_fc, self.c_proj
        return mlp_op.gelu_mlp(x, fc.weight, fc.bias, proj.weight, proj.bias, norm=norm, residual=residual)

    def _fused(self, x: Tensor) -> bool:
        """Whether forward runs as one gelu_mlp op: GELU's tanh form on NumPy arrays of one dtype,
        with no forward hook on the layers it would skip."""
        act, fc, proj = self.act, self.c_fc, self.c_proj
        if not (isinstance(act, GELU) and act.approximate == "tanh" and x.shape[-1:] == (fc.in_features,)):
            return False
        if any(m._forward_hooks for m in (fc, act, proj)):
            return False
        params = [p.data for p in (fc.weight, fc.bias, proj.weight, proj.bias) if p is not None]
        return mlp_op.applies(x.data, *params)

    def step(self, x):
        """forward on a raw array in eval mode (no graph, no dropout; see nn/arrays.py)."""
        return self.c_proj.step(self.act.step(self.c_fc.step(x)))


def swiglu_hidden(n_embd: int, multiple_of: int = 256) -> int:
    """The SwiGLU hidden width with the parameters of a 4 * n_embd MLP: 2/3 of 4 * n_embd, rounded
    up to a multiple of `multiple_of` (LLaMA's 256: 4096 -> 11008; GPTConfig rounds to 64)."""
    return multiple_of * -(-(8 * n_embd // 3) // multiple_of)


class SwiGLU(Module):
    """silu(x W_gate) * (x W_up), then c_proj: x (..., n_embd) -> (..., n_embd).

    c_fc fuses the gate and up projections (n_embd -> 2 * hidden; first half gate, second up)
    so one matmul does both; c_proj maps hidden -> n_embd. hidden defaults to LLaMA's width.
    `hook`: as MLP's.
    """

    HOOKS = ("hook_pre", "hook_pre_linear", "hook_post")
    hook = None

    def __init__(self, n_embd: int, hidden: int | None = None, bias: bool = False, dropout: float = 0.0):
        super().__init__()
        self.hidden = swiglu_hidden(n_embd) if hidden is None else int(hidden)
        self.c_fc = Linear(n_embd, 2 * self.hidden, bias=bias)
        self.c_proj = Linear(self.hidden, n_embd, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self._fused(x):   # one op, by blocks of rows (autograd/ops/swiglu.py)
            return self.dropout(self.fused(x))
        h = self.c_fc(x)                      # (..., 2 * hidden)
        gate, up = autograd.chunk(h, 2, axis=-1)  # 2 x (..., hidden)
        if self.hook is not None:
            gate, up = self.hook("hook_pre", gate), self.hook("hook_pre_linear", up)
            return self.dropout(self.c_proj(self.hook("hook_post", autograd.silu(gate) * up)))
        return self.dropout(self.c_proj(autograd.silu(gate) * up))

    def fused(self, x: Tensor, norm=None, residual: bool = False) -> Tensor:
        """The layers as one swiglu_mlp op (callers check _fused first), with a block's pre-norm
        (norm: autograd.ops.mlp.gelu_mlp's spec) and skip; no dropout."""
        fc, proj = self.c_fc, self.c_proj
        return swiglu_op.swiglu_mlp(x, fc.weight, fc.bias, proj.weight, proj.bias, norm=norm, residual=residual)

    def _fused(self, x: Tensor) -> bool:
        """Whether forward runs as one swiglu_mlp op: arrays the fused ops take
        (autograd.ops.mlp.applies), no inspection hook, no forward hook on c_fc or c_proj."""
        fc, proj = self.c_fc, self.c_proj
        if self.hook is not None or x.shape[-1:] != (fc.in_features,) or fc._forward_hooks or proj._forward_hooks:
            return False
        params = [p.data for p in (fc.weight, fc.bias, proj.weight, proj.bias) if p is not None]
        return mlp_op.applies(x.data, *params)

    def step(self, x):
        """forward on a raw array in eval mode (no graph, no dropout; see nn/arrays.py)."""
        h = self.c_fc.step(x)                 # (..., 2 * hidden)
        gate, up = h[..., :self.hidden], h[..., self.hidden:]
        return self.c_proj.step(silu_array(gate)[0] * up)

    def extra_repr(self) -> str:
        return f"hidden={self.hidden}"
