"""The run folder a training run writes: never another folder's files (a data folder's, a model
folder's, someone's own), never removed by a run that lost the race for it, and found again with
its data after it was moved."""
import os
import shutil
import subprocess
import sys

import pytest

from bpe.files.lock import FolderBusy, FolderLock
from gpt.training.build import saved_data_dir
from gpt.training.checkpoint import load_checkpoint, load_model
from gpt.training.config import TrainConfig
from gpt.training.run_folder import RunFolder
from gpt.training.trainer import Trainer, train
from tests.gpt.test_faults_folders import _corpus, data_dir  # noqa: F401 - data_dir: a fixture
from tests.gpt.test_train import quiet, small


def tiny(data_dir, out, **kw):
    return small(data_dir, out, n_layer=1, max_steps=2, lr_decay_steps=2, eval_interval=2, **kw)


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ---- a folder that is not a run's is refused, untouched ------------------------------------------
def test_a_run_into_a_data_folder_is_refused_and_the_data_is_left_as_it_was(data_dir, tmp_path):
    copy = tmp_path / "d5"
    shutil.copytree(data_dir, copy)
    before = _files(copy)
    for start in (lambda: Trainer(tiny(data_dir, copy), out=quiet()), lambda: RunFolder(copy).open()):
        with pytest.raises(FileExistsError, match=r"'.*d5' is a data folder \(it holds meta.json, train.bin, "
                                                  r"val.bin\), not a run folder"):
            start()
    assert _files(copy) == before  # tokenizer.json above all: meta.json describes it


def test_a_folder_holding_a_runs_file_names_but_no_config_json_is_refused(data_dir, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("tokenizer.json", "summary.json", "metrics.jsonl"):
        (mine / name).write_text(f"my own {name}")
    before = _files(mine)
    with pytest.raises(FileExistsError, match="holds tokenizer.json, metrics.jsonl, summary.json but no run's "
                                              "config.json"):
        Trainer(tiny(data_dir, mine), out=quiet())
    assert _files(mine) == before


def test_a_new_an_empty_and_a_runs_own_folder_are_accepted(data_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("kept")  # no name a run writes: nothing is overwritten
    for name in ("new", "empty", "notes"):
        assert train(tiny(data_dir, tmp_path / name), out=quiet()).step == 2
    assert (tmp_path / "notes" / "notes.txt").read_text() == "kept"
    resumed = train(TrainConfig(resume=str(tmp_path / "new"), max_steps=3), {"resume", "max_steps"}, out=quiet())
    assert resumed.step == 3


# ---- two runs opening one new folder at once ----------------------------------------------------
def _lock_holder(folder):
    """Another process that takes `folder`'s lock (making the folder, as a run does) and holds it."""
    code = f"import time; from bpe.files.lock import FolderLock; FolderLock({str(folder)!r}).acquire(); " \
           "print('held', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert p.stdout.readline().strip() == "held"
    return p


def test_the_run_refused_a_new_folder_leaves_the_folder_to_the_run_that_won_it(data_dir, tmp_path, monkeypatch):
    """Both runs find the folder missing; the other takes the lock first. The refused one must not
    think the folder its own and remove it from under the winner."""
    out, winner = tmp_path / "race", []
    real_acquire = FolderLock.acquire

    def the_other_run_first(lock):
        if lock.what == "run folder" and not winner:
            winner.append(_lock_holder(lock.folder))
        return real_acquire(lock)

    monkeypatch.setattr(FolderLock, "acquire", the_other_run_first)
    try:
        with pytest.raises(FolderBusy) as refused:
            Trainer(tiny(data_dir, out), out=quiet())
        assert f"in use by process {winner[0].pid}" in str(refused.value)
        assert out.is_dir() and (out / ".lock").is_file()  # the winner's folder, still there
    finally:
        for p in winner:
            p.kill()
            p.wait()


# ---- a moved run keeps its data -----------------------------------------------------------------
def test_a_run_trained_with_input_resumes_and_names_its_data_after_the_folder_moved(tmp_path):
    corpus = _corpus(tmp_path / "corpus.txt")
    cfg = tiny(None, tmp_path / "run", data=None, input=[str(corpus)], char=True, workers=1)
    train(cfg, out=quiet())
    assert load_checkpoint(tmp_path / "run").meta["data_dir"] == "data"  # inside the run: relative
    moved = tmp_path / "moved"
    (tmp_path / "run").rename(moved)
    resumed = train(TrainConfig(resume=str(moved), max_steps=3), {"resume", "max_steps"}, out=quiet())
    assert resumed.step == 3
    assert saved_data_dir(load_model(moved)[2]) == str(moved / "data")  # what `gpt eval --run` reads
    from gpt.cli import main

    assert main(["eval", "--run", str(moved)]) == 0


def test_a_checkpoint_that_names_its_data_absolutely_finds_it_in_the_moved_run(data_dir, tmp_path):
    run = tmp_path / "moved"
    (run / "data").mkdir(parents=True)
    ckpt = str(run / "latest.safetensors")
    assert saved_data_dir({"path": ckpt, "data_dir": str(tmp_path / "gone" / "data")}) == \
        str(tmp_path / "gone" / "data")  # no prepared data in the run: the record is named as it is
    (run / "data" / "meta.json").write_text("{}")
    assert saved_data_dir({"path": ckpt, "data_dir": str(tmp_path / "gone" / "data")}) == str(run / "data")
    assert saved_data_dir({"path": ckpt, "data_dir": str(data_dir)}) == str(data_dir)  # outside, still there
    assert saved_data_dir({"path": ckpt, "data_dir": None}) is None
