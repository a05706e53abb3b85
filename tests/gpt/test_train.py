"""gpt.training.trainer: exact resume (straight, saved and interrupted), divergence, checkpoints, run folder."""
import io
import json
import math

import numpy as np
import pytest

from gpt.training.checkpoint import CheckpointError, load_checkpoint, load_model, save_checkpoint
from gpt.data import prepare
from gpt.training.progress import ProgressLine, read_metrics
from gpt.training.evaluate import sample_ids
from gpt.inference.sample import SamplingConfig
from gpt.training.trainer import Trainer, TrainingDiverged, lr_at, train
from nn.optim import weight_decay_groups
from gpt.training.config import TrainConfig


def _text(n_words=4000, seed=0):
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]
    out = []
    for i in range(n_words):
        out.append(words[rng.integers(len(words))])
        out.append(".\n" if i % 9 == 8 else " ")
    return "".join(out)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("chardata")
    (root / "corpus.txt").write_text(_text())
    prepare([root / "corpus.txt"], root / "d", char=True, workers=1)
    return root / "d"


def small(data_dir, out, **kw):
    base = dict(data=str(data_dir), out=str(out), n_layer=2, n_head=2, n_embd=16, block_size=16,
                batch_size=4, grad_accum=2, dropout=0.1, max_steps=8, lr_decay_steps=8, warmup_steps=2,
                lr=3e-3, min_lr=3e-4, eval_interval=4, eval_batches=2, log_interval=2, samples=0,
                peak_flops=1e9, seed=7)
    base.update(kw)
    return TrainConfig(**base)


def quiet():
    return ProgressLine(stream=io.StringIO())


def arrays(result):
    model = {k: np.asarray(v).copy() for k, v in result.model.state_dict().items()}
    opt = result.optimizer.state_dict()["state"]
    moments = {f"{i}.{k}": np.asarray(v).copy() for i, s in opt.items() for k, v in s.items()
               if hasattr(v, "shape")}
    return model, moments


def assert_bitwise_equal(a, b):
    for part_a, part_b in zip(arrays(a), arrays(b)):
        assert part_a.keys() == part_b.keys()
        for k in part_a:
            assert np.array_equal(part_a[k], part_b[k]), f"{k} differs"


@pytest.fixture(scope="module")
def straight(data_dir, tmp_path_factory):
    """8 steps in one go: the reference every resumed run must reproduce bit for bit."""
    return train(small(data_dir, tmp_path_factory.mktemp("runs") / "straight"), out=quiet())


def test_resume_after_n_steps_equals_2n_steps_straight(data_dir, tmp_path, straight):
    first = train(small(data_dir, tmp_path / "r", max_steps=4), out=quiet())
    assert first.step == 4 and load_checkpoint(tmp_path / "r").step == 4
    resumed = train(TrainConfig(resume=str(tmp_path / "r"), max_steps=8), {"resume", "max_steps"}, out=quiet())
    assert resumed.step == 8 and resumed.run_dir == tmp_path / "r"
    assert_bitwise_equal(straight, resumed)
    # The metrics of the two halves join into one log without duplicates.
    records = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "train"] == [2, 4, 6, 8]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [0, 4, 8]


def test_interrupt_mid_step_saves_the_step_boundary_and_resumes_exactly(data_dir, tmp_path, straight):
    trainer = Trainer(small(data_dir, tmp_path / "r"), out=quiet())
    draw, calls = trainer.loader.next_batch, [0]

    def interrupted_draw():
        calls[0] += 1
        if calls[0] == 8:  # the second micro-batch of step 4 (steps count from 1)
            raise KeyboardInterrupt
        return draw()

    trainer.loader.next_batch = interrupted_draw
    res = trainer.run()
    assert res.stop_reason == "interrupted" and res.step == 3
    assert load_checkpoint(tmp_path / "r" / "latest.safetensors").step == 3
    resumed = train(TrainConfig(resume=str(tmp_path / "r")), {"resume"}, out=quiet())
    assert_bitwise_equal(straight, resumed)


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
    trainer = Trainer(small(data_dir, tmp_path / "r", checkpoint_interval=2), out=quiet())
    draw, calls = trainer.loader.next_batch, [0]

    def poisoned_draw():
        calls[0] += 1
        if calls[0] == 9:  # step 5: the weights turn to NaN, so does the loss
            trainer.model.transformer.wte.weight.data[:] = np.nan
        return draw()

    trainer.loader.next_batch = poisoned_draw
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 4.*last good checkpoint.*step 4"):
        trainer.run()
    ckpt = load_checkpoint(tmp_path / "r" / "latest.safetensors")
    assert ckpt.step == 4 and all(np.isfinite(v).all() for v in ckpt.model_state.values())


def test_run_folder_metrics_and_falling_loss(data_dir, tmp_path):
    res = train(small(data_dir, tmp_path / "r", max_steps=30, lr_decay_steps=None, eval_interval=10,
                      dropout=0.0, samples=2, sample_tokens=12, lr=1e-2, min_lr=1e-3), out=quiet())
    run = tmp_path / "r"
    for name in ("config.json", "tokenizer.json", "metrics.jsonl", "latest.safetensors",
                 "best.safetensors", "summary.json"):
        assert (run / name).is_file(), name
    evals = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 10, 20, 30]
    vocab = json.loads((data_dir / "meta.json").read_text())["vocab_size"]
    assert evals[0]["val_loss"] == pytest.approx(math.log(vocab), abs=0.1)  # uniform at init
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 0.5
    train_recs = [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "train"]
    assert {"loss", "lr", "tokens_per_s", "ms_per_step", "mfu", "grad_norm"} <= set(train_recs[0])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 30 and summary["val_loss"] == pytest.approx(evals[-1]["val_loss"])
    assert len(res.samples) == 2 and all(isinstance(s, str) for s in res.samples)
    # The sampler's loader rebuilds the same model from the run folder.
    model, tok, meta = load_model(run)
    x = np.array([tok.encode("the cat sat on")], dtype=np.int64)
    res.model.eval()
    assert np.array_equal(model(x)[0].numpy(), res.model(x)[0].numpy())
    assert meta["step"] == 30 and tok.decode(tok.encode("a mat")) == "a mat"
    with pytest.raises(ValueError, match="block_size=16"):
        model(np.zeros((1, 17), dtype=np.int64))


def test_settings_that_would_change_the_model_cannot_change_on_resume(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    cfg = TrainConfig(resume=str(tmp_path / "r"), block_size=32)
    with pytest.raises(ValueError, match=r"cannot change on resume: --block-size 32 \(the run has 16\)"):
        train(cfg, {"resume", "block_size"}, out=quiet())
    with pytest.raises(FileExistsError, match="--resume"):
        train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())


def test_block_size_larger_than_the_val_split_is_a_clear_error(tmp_path):
    (tmp_path / "t.txt").write_text("abc " * 60)
    prepare([tmp_path / "t.txt"], tmp_path / "d", char=True, workers=1)
    with pytest.raises(ValueError, match=r"val split has \d+ tokens, fewer than block_size \+ 1 = 65"):
        Trainer(small(tmp_path / "d", tmp_path / "r", block_size=64), out=quiet())


def test_corrupt_or_foreign_checkpoints_are_clear_errors(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    good = (tmp_path / "r" / "latest.safetensors").read_bytes()
    bad = tmp_path / "cut.safetensors"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="cut.safetensors"):
        load_checkpoint(bad)
    bad.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="cut.safetensors"):
        load_checkpoint(bad)
    from nn.checkpoint import save_safetensors

    save_safetensors(tmp_path / "plain.safetensors", {"w": np.ones(3, np.float32)})
    with pytest.raises(CheckpointError, match="not a gpt run checkpoint"):
        load_checkpoint(tmp_path / "plain.safetensors")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.safetensors")
    (tmp_path / "emptyrun").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        load_model(tmp_path / "emptyrun")
    with pytest.raises(CheckpointError, match="cut.safetensors"):
        train(TrainConfig(resume=str(bad)), {"resume"}, out=quiet())


def test_checkpoint_round_trips_model_optimizer_and_metadata(tmp_path):
    state = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, np.float32)}
    optim = {"state": {0: {"step": 3, "exp_avg": np.full((2, 3), 0.5, np.float32)}},
             "param_groups": [{"lr": 0.1, "betas": [0.9, 0.99], "params": [0]}]}
    meta = {"step": 3, "loader": {"rng": {"state": {"state": 2 ** 100 + 1}}}, "note": "é"}
    save_checkpoint(tmp_path / "c.safetensors", state, optim, meta)
    ck = load_checkpoint(tmp_path / "c.safetensors")
    assert ck.step == 3 and ck.meta["loader"]["rng"]["state"]["state"] == 2 ** 100 + 1
    assert ck.meta["note"] == "é"
    assert all(np.array_equal(ck.model_state[k], v) for k, v in state.items())
    assert ck.optimizer_state["state"][0]["step"] == 3
    assert np.array_equal(ck.optimizer_state["state"][0]["exp_avg"], optim["state"][0]["exp_avg"])
    assert ck.optimizer_state["param_groups"] == optim["param_groups"]


def test_decay_groups_and_schedule(data_dir, tmp_path):
    trainer = Trainer(small(data_dir, tmp_path / "r"), out=quiet())
    decay, no_decay = weight_decay_groups(trainer.model, 0.1, decay_embeddings=True)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(trainer.model.parameters()))
    cfg = small(data_dir, tmp_path / "x", lr=1.0, min_lr=0.1, warmup_steps=4, max_steps=20, lr_decay_steps=None)
    assert lr_at(0, cfg) == pytest.approx(0.25) and lr_at(3, cfg) == pytest.approx(1.0)
    assert lr_at(12, cfg) == pytest.approx(0.55) and lr_at(20, cfg) == lr_at(99, cfg) == pytest.approx(0.1)


def test_sampling_loop_without_generate_is_seeded_and_greedy_at_temperature_zero(data_dir, tmp_path):
    model = Trainer(small(data_dir, tmp_path / "r"), out=quiet()).model

    class NoGenerate:  # the model seen through an interface without .generate
        def __init__(self, m):
            self.m, self.config, self.training = m, m.config, m.training

        def __call__(self, *a, **k):
            return self.m(*a, **k)

        def eval(self):
            self.m.eval()

        def train(self, mode=True):
            self.m.train(mode)

    plain = NoGenerate(model)
    a = sample_ids(plain, [1, 2], n=2, max_new_tokens=20, seed=3)
    b = sample_ids(plain, [1, 2], n=2, max_new_tokens=20, seed=3)
    assert a == b and all(len(r) == 20 for r in a) and max(max(r) for r in a) < model.config.vocab_size
    greedy = sample_ids(plain, [1, 2], n=1, max_new_tokens=20, sampling=SamplingConfig(temperature=0.0))[0]
    idx = [1, 2]
    model.eval()
    for _ in range(20):
        idx.append(int(model(np.array([idx[-16:]]))[0].numpy()[0, -1].argmax()))
    assert greedy == idx[2:]


def test_gradient_accumulation_matches_one_big_batch(data_dir, tmp_path):
    # Two micro-batches of 4 draw the same windows as one batch of 8 (the generator draws
    # start offsets one after another), and the mean of two means of 4 is the mean of 8.
    accum = train(small(data_dir, tmp_path / "a", batch_size=4, grad_accum=2, dropout=0.0, max_steps=3,
                        eval_interval=100, log_interval=1), out=quiet())
    big = train(small(data_dir, tmp_path / "b", batch_size=8, grad_accum=1, dropout=0.0, max_steps=3,
                      eval_interval=100, log_interval=1), out=quiet())
    for (k, a), (_, b) in zip(accum.model.state_dict().items(), big.model.state_dict().items()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=k)
    # AdamW forgives a gradient off by a constant factor; the logged norms (before clipping) do not.
    norms = [[r["grad_norm"] for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "train"]
             for d in (tmp_path / "a", tmp_path / "b")]
    assert len(norms[0]) == 3
    np.testing.assert_allclose(norms[0], norms[1], rtol=1e-4)


def test_time_budget_stops_and_saves(data_dir, tmp_path):
    res = train(small(data_dir, tmp_path / "r", time_budget=0.0), out=quiet())
    assert res.stop_reason == "time_budget" and res.step == 0
    assert load_checkpoint(tmp_path / "r").step == 0


def test_a_step_that_does_not_read_its_loss_trains_the_same_and_still_catches_nan(data_dir, tmp_path, straight,
                                                                                   monkeypatch):
    """On a GPU the loss and norm stay on the device except on logged or saved steps; the
    same path on the CPU gives the same weights, and a NaN is caught at the next read."""
    monkeypatch.setattr(Trainer, "_host_reads", property(lambda self: False))
    assert_bitwise_equal(straight, train(small(data_dir, tmp_path / "r"), out=quiet()))
    trainer = Trainer(small(data_dir, tmp_path / "n", log_interval=4, max_steps=8), out=quiet())
    draw, calls = trainer.loader.next_batch, [0]

    def poisoned():
        calls[0] += 1
        if calls[0] == 11:  # step 6 (2 micro-batches a step), not a logged one
            trainer.model.transformer.wte.weight.data[:] = np.nan
        return draw()

    trainer.loader.next_batch = poisoned
    with pytest.raises(TrainingDiverged, match="loss is nan at step 8"):
        trainer.run()
    assert load_checkpoint(tmp_path / "n" / "latest.safetensors").step == 4


def test_the_loss_scale_of_an_fp16_run_is_in_its_checkpoint(data_dir, tmp_path):
    from gpt.training.resume import restore
    from nn.amp import DynamicLossScaler

    class Float32Amp:  # the fp16 wrapper's checkpoint interface, without float16 compute
        def __init__(self, model):
            self.model, self.scaler = model, DynamicLossScaler(init_scale=1024.0)

        def state_dict(self):
            return self.model.state_dict()

        def load_state_dict(self, sd):
            self.model.load_state_dict(sd)

    trainer = Trainer(small(data_dir, tmp_path / "r"), out=quiet())
    trainer.amp = Float32Amp(trainer.model)
    trainer.amp.scaler.load_state_dict({"scale": 512.0, "good_steps": 7, "skipped": 2})
    trainer.save()
    trainer.folder.close()
    ckpt = load_checkpoint(tmp_path / "r" / "latest.safetensors")
    assert ckpt.meta["loss_scale"] == {"scale": 512.0, "good_steps": 7, "skipped": 2}
    fresh = Float32Amp(trainer.model)
    restore(ckpt, trainer.model, fresh, trainer.optimizer, trainer.loader)
    assert fresh.scaler.state_dict() == ckpt.meta["loss_scale"]


def test_one_thread_and_two_compute_the_same_bits(data_dir, tmp_path, monkeypatch):
    """gpt train picks its thread count from the load it finds, so the numbers must not depend
    on it: exact resume holds across a resume on a busier or quieter machine."""
    from autograd import parallel

    results = []
    try:
        for n in (1, 2):
            monkeypatch.setenv("GPT_THREADS", str(n))
            results.append(train(small(data_dir, tmp_path / f"t{n}", n_embd=128, n_head=4, block_size=64,
                                       batch_size=16, max_steps=3, dropout=0.0), out=quiet()))
            assert parallel.threads() == n
    finally:
        parallel.set_threads(1)
    assert_bitwise_equal(*results)


def test_a_prompt_the_tokenizer_cannot_encode_is_refused_before_training(data_dir, tmp_path):
    with pytest.raises(ValueError, match="--prompt: character '\u2603' is not in this character-level vocabulary"):
        Trainer(small(data_dir, tmp_path / "r", samples=1, prompt="\u2603"), out=quiet())
    assert not (tmp_path / "r").exists()  # nothing trained, no folder left
