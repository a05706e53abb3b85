"""Layers, optimizer and checkpoint together: a tiny model learns, and a resumed run is bit-for-bit."""
import json

import numpy as np

import autograd
import nn
from nn.checkpoint import flatten_optimizer_state, load_safetensors, save_safetensors, unflatten_optimizer_state
from nn.optim import AdamW, clip_grad_norm, warmup_cosine


class Tiny(nn.Module):
    def __init__(self, vocab=11, C=16, T=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.LearnedPositions(T, C)
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.MultiHeadAttention(C, 2)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.MLP(C)
        self.head = nn.Linear(C, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(idx.shape[1])
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return self.head(x)


def groups(model):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]


def train(model, opt, batches, start):
    losses = []
    for step, (x, y) in enumerate(batches, start=start):
        opt.set_lr(warmup_cosine(step, 2, 8, 3e-2, 3e-3))
        loss = autograd.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def make_batches(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = rng.integers(0, 11, size=(4, 1))
        seq = (start + np.arange(9)) % 11  # next token = current + 1 (mod 11): learnable
        out.append((seq[:, :8], seq[:, 1:]))
    return out


def test_resume_from_a_safetensors_checkpoint_is_bit_for_bit(tmp_path):
    batches = make_batches(8)
    autograd.manual_seed(0)
    model = Tiny()
    opt = AdamW(groups(model), lr=3e-2)
    first = train(model, opt, batches[:4], 0)

    tensors, opt_text = flatten_optimizer_state(opt.state_dict())
    tensors.update({f"model.{k}": v for k, v in model.state_dict().items()})
    save_safetensors(tmp_path / "ckpt.safetensors", tensors, {"optimizer": opt_text, "step": json.dumps(4)})
    rest = train(model, opt, batches[4:], 4)
    assert rest[-1] < first[0] * 0.7  # it learns

    autograd.manual_seed(123)  # a different init, overwritten by the checkpoint
    resumed = Tiny()
    opt2 = AdamW(groups(resumed), lr=1.0)
    loaded, meta = load_safetensors(tmp_path / "ckpt.safetensors")
    resumed.load_state_dict({k[6:]: v for k, v in loaded.items() if k.startswith("model.")})
    opt2.load_state_dict(unflatten_optimizer_state(loaded, meta["optimizer"]))
    rest2 = train(resumed, opt2, batches[4:], json.loads(meta["step"]))
    assert rest2 == rest
    for (name, a), (_, b) in zip(model.named_parameters(), resumed.named_parameters()):
        assert np.array_equal(a.data, b.data), name
