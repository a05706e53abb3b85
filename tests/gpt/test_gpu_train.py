"""GPT on the GPU: a short training run matches the CPU run step by step in float32, checkpoints
move between devices, float16 with loss scaling trains, cached sampling agrees with the CPU.

The GPU tests skip with a reason where CuPy or a GPU is missing (benchmarks/gpu_check.sh runs
them on a GPU machine); the device-error tests run on machines without a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from gpt import GPT, GPTConfig

HAS_GPU = autograd.cuda_available()
_skip = pytest.mark.skipif(not HAS_GPU, reason="needs CuPy and an NVIDIA GPU (autograd.cuda_available() is False)")


def gpu(test):
    """Marks a GPU test: `pytest -m gpu` selects it; it skips with the reason without a GPU."""
    return pytest.mark.gpu(_skip(test))
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the error message of a machine without a GPU")


def _text(n_words=3000, seed=0):
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]
    return "".join(words[rng.integers(len(words))] + (".\n" if i % 9 == 8 else " ") for i in range(n_words))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    from gpt.data import prepare

    root = tmp_path_factory.mktemp("gpudata")
    (root / "corpus.txt").write_text(_text())
    prepare([root / "corpus.txt"], root / "d", char=True, workers=1)
    return root / "d"


# ---- without a GPU: clear errors --------------------------------------------------------------
@no_gpu
def test_train_on_cuda_without_a_gpu_is_one_clear_line(data_dir, tmp_path, capsys):
    from gpt.cli import main

    rc = main(["train", "--data", str(data_dir), "--out", str(tmp_path / "run"), "--device", "cuda",
               "--max-steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--device cuda" in err and "CuPy" in err and "Traceback" not in err


@no_gpu
def test_sample_on_cuda_without_a_gpu_is_one_clear_line(tmp_path, capsys):
    from gpt.cli import main

    (tmp_path / "run").mkdir()
    rc = main(["sample", "--run", str(tmp_path / "run"), "--device", "cuda"])
    err = capsys.readouterr().err
    assert rc == 2 and "gpt sample" in err and "Traceback" not in err


def test_half_precision_on_the_cpu_is_refused(data_dir, tmp_path, capsys):
    from gpt.cli import main

    rc = main(["train", "--data", str(data_dir), "--out", str(tmp_path / "run"), "--precision", "fp16",
               "--max-steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "precision" in err and "Traceback" not in err


# ---- on a GPU ---------------------------------------------------------------------------------
def _tiny_cfg(**kw):
    base = dict(vocab_size=61, block_size=32, n_layer=2, n_head=2, n_embd=64, dropout=0.0)
    base.update(kw)
    return GPTConfig(**base)


def _train_losses(device, cfg, steps=6, B=4, seed=0):
    from nn.optim import AdamW

    autograd.manual_seed(seed)
    model = GPT(cfg)
    if device != "cpu":
        model.to(device)
    opt = AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        ids = rng.integers(0, cfg.vocab_size, (B, cfg.block_size + 1))
        x, y = ids[:, :-1], ids[:, 1:]
        if device != "cpu":
            x, y = autograd.Tensor(x, device=device), autograd.Tensor(y, device=device)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
    return losses, {k: (v.get() if hasattr(v, "get") else v) for k, v in model.state_dict().items()}


@gpu
@pytest.mark.parametrize("attention", ["matmul", "flash"])
def test_float32_training_matches_the_cpu_step_by_step(attention):
    from autograd import cuda as acuda

    acuda.set_tf32(False)
    old = acuda.attention_mode()
    acuda.set_attention(attention)
    try:
        cfg = _tiny_cfg()
        cpu_losses, cpu_w = _train_losses("cpu", cfg)
        gpu_losses, gpu_w = _train_losses("cuda", cfg)
    finally:
        acuda.set_attention(old)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4)
    for k in cpu_w:
        np.testing.assert_allclose(gpu_w[k], cpu_w[k], rtol=1e-3, atol=5e-4, err_msg=k)


@gpu
def test_checkpoint_written_on_the_gpu_loads_on_the_cpu_and_back(tmp_path):
    from nn.checkpoint import load_safetensors, save_safetensors

    autograd.manual_seed(0)
    model = GPT(_tiny_cfg()).to("cuda")
    sd = model.state_dict()
    save_safetensors(tmp_path / "m.safetensors", sd)
    host, _ = load_safetensors(tmp_path / "m.safetensors", device="cpu")
    cpu_model = GPT(_tiny_cfg())
    cpu_model.load_state_dict(host)
    for k, v in cpu_model.state_dict().items():
        assert isinstance(v, np.ndarray)
        np.testing.assert_array_equal(v, sd[k].get())
    back, _ = load_safetensors(tmp_path / "m.safetensors", device="cuda")
    gpu_model = GPT(_tiny_cfg()).to("cuda")
    gpu_model.load_state_dict(back)
    for k, v in gpu_model.state_dict().items():
        np.testing.assert_array_equal(v.get(), sd[k].get())


@gpu
def test_float16_with_loss_scaling_trains():
    from nn.amp import MixedPrecision
    from nn.optim import AdamW

    autograd.manual_seed(0)
    cfg = _tiny_cfg()
    model = GPT(cfg).to("cuda")
    amp = MixedPrecision(model)
    opt = AdamW(amp.master_groups(list(model.parameters())), lr=3e-3)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab_size, (4, cfg.block_size + 1))   # one batch, memorised
    x = autograd.Tensor(ids[:, :-1], device="cuda")
    y = autograd.Tensor(ids[:, 1:], device="cuda")
    losses = []
    for _ in range(30):
        _, loss = model(x, y)
        assert loss.dtype == np.float16
        amp.backward(loss)
        amp.step(opt, grad_clip=1.0)
        losses.append(float(loss.item()))
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0]
    assert all(m.dtype == np.float32 for m in amp.masters)
    assert amp.scaler.skipped < 5


@gpu
def test_cached_greedy_sampling_on_the_gpu_matches_the_cpu():
    autograd.manual_seed(0)
    cpu_model = GPT(_tiny_cfg())
    gpu_model = GPT(_tiny_cfg())
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.to("cuda")
    prompt = np.array([[1, 2, 3, 4]])
    a = cpu_model.generate(prompt, max_new_tokens=12, temperature=0.0, use_cache=True)
    b = gpu_model.generate(prompt, max_new_tokens=12, temperature=0.0, use_cache=True)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16"])
def test_gpt_train_on_cuda_runs_in_every_precision(data_dir, tmp_path, precision):
    from gpt.cli import main

    rc = main(["train", "--data", str(data_dir), "--out", str(tmp_path / precision), "--device", "cuda",
               "--precision", precision, "--max-steps", "6", "--n-layer", "2", "--n-embd", "64",
               "--n-head", "2", "--block-size", "32", "--batch-size", "4", "--eval-interval", "3",
               "--eval-batches", "1", "--samples", "1", "--sample-tokens", "8"])
    assert rc == 0
    from gpt.training.checkpoint import load_model

    model, _, _ = load_model(tmp_path / precision, device="cpu")     # float32 on the CPU
    assert all(p.dtype == np.float32 for p in model.parameters())
    rc = main(["sample", "--run", str(tmp_path / precision), "--device", "cuda", "--max-new-tokens", "8",
               "--temperature", "0", "--prompt", "the cat"])
    assert rc == 0


@gpu
def test_loader_copies_batches_to_the_gpu_unchanged():
    from gpt.data.loader import BatchLoader

    tokens = np.arange(5000, dtype=np.uint16)
    cpu = BatchLoader(tokens, 4, 16, seed=3, device="cpu")
    dev = BatchLoader(tokens, 4, 16, seed=3, device="cuda")
    batches = [dev.next_batch() for _ in range(6)]            # more than the staging ring holds
    for x, y in batches:
        cx, cy = cpu.next_batch()
        np.testing.assert_array_equal(x.get(), cx)
        np.testing.assert_array_equal(y.get(), cy)
