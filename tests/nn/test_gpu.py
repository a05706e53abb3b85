"""The same layers, optimizers and checkpoints on CuPy: results match the CPU (skipped without a GPU)."""
import numpy as np
import pytest

import autograd
import nn
from autograd import Tensor, no_grad
from nn.checkpoint import load_safetensors, save_safetensors
from nn.optim import AdamW, clip_grad_norm

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not autograd.cuda_available(), reason="needs CuPy and an NVIDIA GPU")]


def host(a):
    return a.get() if hasattr(a, "get") else a


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiHeadAttention(16, 4, rope=nn.RotaryEmbedding(4, 32))
        self.norm = nn.RMSNorm(16)
        self.moe = nn.MoE(16, 32, n_experts=4, top_k=2)

    def forward(self, x, **kw):
        return self.moe(self.norm(x + self.attn(x, **kw)))


def test_gpu_forward_backward_and_adamw_match_the_cpu():
    autograd.manual_seed(0)
    cpu = Net()
    gpu = Net().to("cuda")
    gpu.load_state_dict(cpu.state_dict())  # numpy arrays copied onto the GPU
    assert all(p.device.startswith("cuda") for p in gpu.parameters())
    x = np.random.default_rng(0).standard_normal((2, 6, 16)).astype(np.float32)
    opts = [AdamW(m.parameters(), lr=1e-2) for m in (cpu, gpu)]
    arrays = [p.data for p in gpu.parameters()]
    for _ in range(2):
        outs = []
        for m, opt, dev in ((cpu, opts[0], "cpu"), (gpu, opts[1], "cuda")):
            y = m(Tensor(x, device=dev))
            loss = (y * y).mean() + 0.01 * m.moe.aux_loss
            opt.zero_grad()
            loss.backward()
            outs.append((loss.item(), clip_grad_norm(m.parameters(), 0.5)))
            opt.step()
        assert outs[0][0] == pytest.approx(outs[1][0], rel=1e-4)
        assert outs[0][1] == pytest.approx(outs[1][1], rel=1e-3)
    assert all(p.data is a for p, a in zip(gpu.parameters(), arrays))
    for (n, a), (_, b) in zip(cpu.named_parameters(), gpu.named_parameters()):
        np.testing.assert_allclose(a.data, host(b.data), rtol=1e-3, atol=1e-5, err_msg=n)


def test_gpu_kv_cache_equals_full_attention():
    mha = nn.MultiHeadAttention(16, 4, rope=nn.RotaryEmbedding(4, 32)).to("cuda").eval()
    x = Tensor(np.random.default_rng(1).standard_normal((2, 7, 16)).astype(np.float32), device="cuda")
    with no_grad():
        full = host(mha(x).data)
        cache = nn.KVCache(2, 4, 16, 4, dtype=np.float32, device="cuda")
        steps = [host(mha(x[:, :3], kv_cache=cache).data)]
        steps += [host(mha(x[:, t:t + 1], kv_cache=cache).data) for t in range(3, 7)]
    assert cache.device.startswith("cuda")
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-4, atol=1e-5)


def test_gpu_checkpoint_loads_on_the_cpu_and_back(tmp_path):
    import cupy as cp

    tensors = {"w": cp.arange(12, dtype=cp.float32).reshape(3, 4), "h": cp.ones(5, dtype=cp.float16)}
    save_safetensors(tmp_path / "g.safetensors", tensors, {"from": "gpu"})
    on_cpu, meta = load_safetensors(tmp_path / "g.safetensors")
    assert meta == {"from": "gpu"} and isinstance(on_cpu["w"], np.ndarray)
    np.testing.assert_array_equal(on_cpu["w"], np.arange(12, dtype=np.float32).reshape(3, 4))
    on_gpu, _ = load_safetensors(tmp_path / "g.safetensors", device="cuda")
    assert isinstance(on_gpu["h"], cp.ndarray) and on_gpu["h"].dtype == cp.float16
