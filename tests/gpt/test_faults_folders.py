"""Run and data folders under concurrent writers, kills and interrupts: every outcome is a
complete folder or the project's own one-line error; nothing half-written is ever accepted."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from gpt.data import prepare, read_meta
from bpe.files.lock import FolderBusy, FolderLock
from gpt.training.checkpoint import load_checkpoint
from gpt.training.config import TrainConfig
from gpt.training.trainer import Trainer, TrainingDiverged, lr_at, train
from tests.gpt.test_train import assert_bitwise_equal, quiet, small

PY = sys.executable


def _corpus(path, copies=1):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]
    text = " ".join(words[i] for i in rng.integers(len(words), size=4000)) + ".\n"
    path.write_text(text * copies)
    return path


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    prepare([_corpus(root / "corpus.txt")], root / "d", char=True, workers=1)
    return root / "d"


def _hold_lock(folder):
    """A separate process that holds `folder`'s lock until killed."""
    code = f"import time; from bpe.files.lock import FolderLock; FolderLock({str(folder)!r}).acquire(); " \
           "print('held', flush=True); time.sleep(60)"
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert p.stdout.readline().strip() == "held"
    return p


# ---- concurrency -------------------------------------------------------------------------------
def test_a_second_prepare_into_one_folder_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "X"
    holder = _hold_lock(out)
    try:
        with pytest.raises(FolderBusy, match=rf"data folder .* is in use by process {holder.pid}"):
            prepare([_corpus(tmp_path / "c.txt")], out, char=True, workers=1)
    finally:
        holder.kill()
        holder.wait()
    # The kernel dropped the killed holder's lock: it is stale and does not block.
    meta = prepare([tmp_path / "c.txt"], out, char=True, workers=1)
    assert read_meta(out)["vocab_size"] == meta["vocab_size"]


def test_a_run_folder_has_one_writer_and_resume_of_a_running_run_is_refused(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    holder = _hold_lock(tmp_path / "r")
    try:
        with pytest.raises(FolderBusy, match=rf"run folder .* in use by process {holder.pid}"):
            Trainer(TrainConfig(resume=str(tmp_path / "r")), {"resume"}, out=quiet())
    finally:
        holder.kill()
        holder.wait()
    assert load_checkpoint(tmp_path / "r").step == 2  # the refused writer changed nothing
    holder = _hold_lock(tmp_path / "fresh")  # `gpt train --out fresh` twice at once
    try:
        with pytest.raises(FolderBusy, match=str(holder.pid)):
            Trainer(small(data_dir, tmp_path / "fresh"), out=quiet())
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("config", ['{"architectures": ["GPT2LMHeadModel"], "n_embd": 16}', "[\"model\"]", "{"])
def test_a_run_into_a_model_folder_is_refused_before_it_writes(data_dir, tmp_path, config):
    """A Hugging Face folder (`gpt import --hf X --out X`, or `gpt train --out X`) keeps its files."""
    from gpt.training.run_folder import RunFolder

    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text(config)
    (model / "tokenizer.json").write_text("{}")
    for start in (lambda: Trainer(small(data_dir, model), out=quiet()), lambda: RunFolder(model).open()):
        with pytest.raises(FileExistsError, match="holds a config.json that no run wrote"):
            start()
    assert sorted(os.listdir(model)) == ["config.json", "tokenizer.json"]
    assert (model / "config.json").read_text() == config


def test_two_trains_started_together_share_the_default_corpus_cache(tmp_path):
    script = textwrap.dedent("""
        import sys
        from gpt.data.corpus import default_data_dir
        from gpt.data import read_meta
        d = default_data_dir(sys.argv[1], 300, max_chars=60_000, workers=1, verbose=False)
        print(read_meta(d)["train_tokens"])
    """)
    procs = [subprocess.Popen([PY, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    assert outs[0][0] == outs[1][0]


# ---- kills and interrupts ----------------------------------------------------------------------
def test_prepare_killed_at_any_moment_leaves_a_complete_or_refused_folder(data_dir, tmp_path):
    big = _corpus(tmp_path / "big.txt", copies=40)
    code = (f"from gpt.data import prepare; prepare([{str(big)!r}], {{out!r}}, vocab_size=300, workers=1, "
            "block_bytes=1 << 16)")
    rng = random.Random(0)
    outcomes = {"complete": 0, "refused": 0}
    for trial in range(4):
        out = tmp_path / f"kp{trial}"
        subprocess.run(["cp", "-r", str(data_dir), str(out)], check=True)  # a good folder, rewritten
        p = subprocess.Popen([PY, "-c", code.format(out=str(out))])
        time.sleep(rng.uniform(0.3, 2.5))
        p.kill()
        p.wait()
        try:
            meta = read_meta(out)
        except ValueError as exc:
            assert "is incomplete" in str(exc)
            outcomes["refused"] += 1
            continue
        for split in ("train", "val"):  # complete: the sizes meta.json claims are the files'
            size = (out / f"{split}.bin").stat().st_size
            assert size == meta[f"{split}_tokens"] * np.dtype(meta["dtype"]).itemsize
        outcomes["complete"] += 1
    assert sum(outcomes.values()) == 4


def test_orphaned_temp_files_of_a_killed_save_are_removed_by_the_next_writer(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    orphan = tmp_path / "r" / ".latest.safetensors.abc123.tmp"
    orphan.write_bytes(b"\0" * 1000)
    train(TrainConfig(resume=str(tmp_path / "r"), max_steps=3), {"resume", "max_steps"}, out=quiet())
    assert not orphan.exists()


def test_ctrl_c_twice_in_quick_succession_saves_one_consistent_step(data_dir, tmp_path):
    """The checkpoint left by two Ctrl-C 5-30 ms apart resumes exactly like a straight run."""
    argv = [PY, "-m", "gpt.cli", "train", "--data", str(data_dir), "--n-layer", "2", "--n-head", "2",
            "--n-embd", "64", "--block-size", "64", "--batch-size", "8", "--max-steps", "100000",
            "--lr-decay-steps", "1000", "--warmup-steps", "5", "--eval-interval", "7", "--eval-batches", "1",
            "--log-interval", "3", "--peak-flops", "1e9", "--samples", "0", "--seed", "3"]
    rng = random.Random(1)
    for trial in range(3):
        run = tmp_path / f"r{trial}"
        p = subprocess.Popen(argv + ["--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not (run / "latest.safetensors").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.4))
        p.send_signal(signal.SIGINT)
        time.sleep(rng.uniform(0.005, 0.03))
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        ckpt = load_checkpoint(run / "latest.safetensors")
        step = ckpt.step
        assert ckpt.meta["loader"]["batches_drawn"] == step  # grad_accum = 1
        resumed = train(TrainConfig(resume=str(run), max_steps=step + 1), {"resume", "max_steps"}, out=quiet())
        flags = dict(zip(argv[4::2], argv[5::2]))
        straight = train(TrainConfig(data=str(data_dir), out=str(tmp_path / f"s{trial}"), n_layer=2, n_head=2,
                                     n_embd=64, block_size=64, batch_size=8, max_steps=step + 1,
                                     lr_decay_steps=1000, warmup_steps=5, eval_interval=7, eval_batches=1,
                                     log_interval=3, peak_flops=1e9, samples=0, seed=3), out=quiet())
        assert flags["--seed"] == "3"
        assert_bitwise_equal(straight, resumed)


# ---- resume: damaged checkpoints, ignored flags, the schedule --------------------------------
def test_resume_from_a_truncated_latest_names_the_intact_best(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=8), out=quiet())
    latest = tmp_path / "r" / "latest.safetensors"
    latest.write_bytes(latest.read_bytes()[:5000])
    with pytest.raises(ValueError, match=r"best.safetensors \(step \d+\) is intact: resume from it with --resume"):
        Trainer(TrainConfig(resume=str(tmp_path / "r")), {"resume"}, out=quiet())


def test_sample_and_eval_fall_back_to_latest_when_best_is_damaged(data_dir, tmp_path, capsys):
    from gpt.training.checkpoint import load_model

    train(small(data_dir, tmp_path / "r", max_steps=8), out=quiet())
    best = tmp_path / "r" / "best.safetensors"
    best.write_bytes(best.read_bytes()[:3000])
    model, tok, meta = load_model(tmp_path / "r")
    assert meta["path"].endswith("latest.safetensors") and meta["step"] == 8
    assert "warning" in capsys.readouterr().err


def test_resume_refuses_data_and_out_instead_of_ignoring_them(data_dir, tmp_path):
    train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    for key, value in (("data", str(tmp_path)), ("out", str(tmp_path / "elsewhere"))):
        with pytest.raises(ValueError, match=f"cannot change on resume: --{key}"):
            Trainer(TrainConfig(resume=str(tmp_path / "r"), **{key: value}), {"resume", key}, out=quiet())


def test_resume_with_more_steps_keeps_the_cosine_and_says_so(data_dir, tmp_path):
    cfg = small(data_dir, tmp_path / "r", max_steps=8, lr_decay_steps=None, warmup_steps=2)
    train(cfg, out=quiet())
    out = quiet()
    t = Trainer(TrainConfig(resume=str(tmp_path / "r"), max_steps=16), {"resume", "max_steps"}, out=out)
    t.folder.close()
    assert "the cosine still ends at step 8" in out.stream.getvalue()
    assert lr_at(8, t.cfg) == pytest.approx(cfg.min_lr) and lr_at(12, t.cfg) == pytest.approx(cfg.min_lr)
    stretched = Trainer(TrainConfig(resume=str(tmp_path / "r"), max_steps=16, lr_decay_steps=16),
                        {"resume", "max_steps", "lr_decay_steps"}, out=quiet())
    assert lr_at(12, stretched.cfg) > cfg.min_lr


# ---- divergence and full disks -----------------------------------------------------------------
def test_nan_at_the_first_step_does_not_suggest_resuming_nothing(data_dir, tmp_path):
    trainer = Trainer(small(data_dir, tmp_path / "r"), out=quiet())
    trainer.model.transformer.wte.weight.data[:] = np.nan
    with pytest.raises(TrainingDiverged, match="no checkpoint was written yet") as exc:
        trainer.run()
    assert "--resume" not in str(exc.value)


def test_a_finite_but_exploded_loss_is_divergence_and_points_at_the_best(data_dir, tmp_path):
    trainer = Trainer(small(data_dir, tmp_path / "r", max_steps=12, checkpoint_interval=4), out=quiet())
    draw, calls = trainer.loader.next_batch, [0]

    def exploding():
        calls[0] += 1
        if calls[0] == 13:  # step 7: huge but finite weights
            trainer.model.transformer.wte.weight.data *= 1e4
        return draw()

    trainer.loader.next_batch = exploding
    with pytest.raises(TrainingDiverged, match=r"val loss is .* over 3 x the loss of a uniform guess.*"
                                               r"the best is .*best.safetensors \(step 4"):
        trainer.run()


def test_a_full_disk_while_saving_is_one_line_and_keeps_the_old_checkpoint(data_dir, tmp_path, monkeypatch, capsys):
    import errno

    import gpt.training.run_folder as rf
    from gpt.cli import main

    train(small(data_dir, tmp_path / "r", max_steps=4), out=quiet())
    before = (tmp_path / "r" / "latest.safetensors").read_bytes()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rf, "save_checkpoint", full)
    rc = main(["train", "--resume", str(tmp_path / "r"), "--max-steps", "8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "No space left on device" in err[0] and "is kept" in err[0]
    assert (tmp_path / "r" / "latest.safetensors").read_bytes() == before
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_files_get_the_umask_permissions_like_any_other_file(data_dir, tmp_path):
    old = os.umask(0o022)
    try:
        train(small(data_dir, tmp_path / "r", max_steps=2), out=quiet())
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "r").iterdir() if p.is_file()}
    assert modes["latest.safetensors"] == modes["config.json"] == modes["tokenizer.json"] == 0o644


def test_train_killed_at_any_moment_leaves_a_run_that_resumes_or_starts_afresh(data_dir, tmp_path):
    """SIGKILL at random moments: the folder holds a loadable checkpoint or none, never a torn
    one, and `--resume` (or a fresh start) goes on from it; the lock of the dead run is stale."""
    argv = [PY, "-m", "gpt.cli", "train", "--data", str(data_dir), "--n-layer", "1", "--n-head", "2",
            "--n-embd", "32", "--block-size", "32", "--batch-size", "4", "--max-steps", "100000",
            "--eval-interval", "3", "--eval-batches", "1", "--checkpoint-interval", "2", "--peak-flops", "1e9",
            "--samples", "0"]
    rng = random.Random(2)
    outcomes = {"resumed": 0, "fresh": 0}
    for trial in range(4):
        run = tmp_path / f"k{trial}"
        p = subprocess.Popen(argv + ["--out", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.8, 3.0))
        p.kill()
        p.wait()
        if (run / "latest.safetensors").exists():
            step = load_checkpoint(run / "latest.safetensors").step  # complete, or this raises
            res = train(TrainConfig(resume=str(run), max_steps=step + 1), {"resume", "max_steps"}, out=quiet())
            assert res.step == step + 1
            outcomes["resumed"] += 1
        else:
            res = train(small(data_dir, run, max_steps=1), out=quiet())
            assert res.step == 1
            outcomes["fresh"] += 1
        assert not list(run.glob(".*.tmp"))  # the killed run's temp files are gone
    assert sum(outcomes.values()) == 4
