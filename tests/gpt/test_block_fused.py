"""Where the GPT block runs as the two fused pre-norm sublayers (autograd/ops/prenorm.py): only
where that is exact, and then with the same bits as its layers one by one."""
from __future__ import annotations

import numpy as np
import pytest

import nn
from autograd import Tensor
from autograd.ops import mlp as mlp_op
from autograd.ops import self_attention as sa
from autograd.ops import swiglu as swiglu_op
from gpt.model.block import Block
from gpt.model.config import GPTConfig
from tests.autograd.test_prenorm import small_blocks  # noqa: F401 (autouse: blocks of a few rows)

RNG = np.random.default_rng(17)


def _block(**overrides):
    cfg = dict(vocab_size=16, block_size=40, n_layer=1, n_head=2, n_embd=8, dropout=0.0)
    cfg.update(overrides)
    rope = nn.RotaryEmbedding(4, 40) if cfg.get("pos") == "rope" else None   # as GPT gives it
    return Block(GPTConfig(**cfg), rope=rope)


def _run_block(block, x, seed):
    """(output, gradient of x, {name: gradient}, fused?) of block(x) seeded with `seed`."""
    xt = Tensor(x.copy(), requires_grad=True)
    out = block(xt)
    fused = _is_fused(out) and isinstance(out._node.parents[0], sa.CausalSelfAttention)
    out.backward(seed)
    grads = {n: p.grad for n, p in block.named_parameters()}
    for p in block.parameters():
        p.grad = None
    return out, xt.grad, grads, fused


def _is_fused(out) -> bool:
    return isinstance(out._node, (mlp_op.GeluMLP, swiglu_op.SwiGLUMLP)) and out._node.norm is not None


@pytest.mark.parametrize("norm, pos, mlp", [("layernorm", "learned", "gelu"), ("rmsnorm", "learned", "gelu"),
                                            ("rmsnorm", "rope", "swiglu"), ("layernorm", "rope", "gelu"),
                                            ("rmsnorm", "learned", "swiglu")])
def test_block_runs_as_two_fused_ops_with_the_unfused_blocks_bits(norm, pos, mlp):
    """A pre-norm block is two ops, x + attn(ln_1(x)) and x + mlp(ln_2(x)); with a record to fill
    it runs layer by layer, and both give the same bits (LLaMA's block: rope, rmsnorm, swiglu)."""
    block = _block(norm=norm, pos=pos, mlp=mlp, bias=mlp == "gelu")
    x = RNG.standard_normal((3, 40, 8)).astype(np.float32)
    seed = RNG.standard_normal((3, 40, 8)).astype(np.float32)
    fused = _run_block(block, x, seed)
    assert fused[3]
    block.record = {}
    layers = _run_block(block, x, seed)
    assert not layers[3] and set(block.record) == {"input", "attn_out", "mid", "mlp_out", "output"}
    np.testing.assert_array_equal(fused[0].data, layers[0].data)
    np.testing.assert_array_equal(fused[1], layers[1])
    for name in fused[2]:
        np.testing.assert_array_equal(fused[2][name], layers[2][name], err_msg=name)


def test_block_is_fused_only_where_the_fusion_is_exact():
    x = Tensor(RNG.standard_normal((2, 12, 8)).astype(np.float32))
    assert _is_fused(_block()(x))
    dropped = _block(dropout=0.1)
    assert not _is_fused(dropped(x))                        # dropout at work while training
    dropped.eval()
    assert _is_fused(dropped(x))
    assert _is_fused(_block(mlp="swiglu", pos="rope")(x))
    for other in (_block(prenorm=False), _block(residual=False), _block(mlp="relu2"),
                  _block(qk_norm=True), _block(n_kv_head=1), _block(pos="rope", n_kv_head=1)):
        assert not _is_fused(other(x))
    hooked = _block()
    handle = hooked.ln_2.register_forward_hook(lambda m, a, out: out * 2)
    assert not _is_fused(hooked(x))
    handle.remove()
    assert _is_fused(hooked(x))                             # fused again once the hook is gone
    handle = hooked.mlp_drop.register_forward_hook(lambda m, a, out: out)  # a layer the ops skip
    assert not _is_fused(hooked(x))
    handle.remove()
    assert not _is_fused(_block()(Tensor(x.data.astype(np.float64))))   # weights float32, x float64
