"""`gpt translate` run folders under concurrent runs, divergence, interrupts and failed writes,
batches that cannot fit, and the sampler's flags: every outcome is a complete run folder or a
one-line error naming the problem, and no run leaves a partial folder behind."""
import json
import math

import pytest

import nn
from bpe.files.lock import FolderBusy
from gpt.cli import main
from gpt.seq2seq import train as T
from gpt.seq2seq.model import Seq2Seq
from gpt.seq2seq.train import TrainSettings, load_run, save_run, train_task
from gpt.training.trainer import TrainingDiverged
from tests.gpt.test_faults_folders import _hold_lock
from tests.gpt.test_seq2seq import small

QUIET = dict(log=lambda *_: None)
FLAGS = ["--steps", "3", "--batch-size", "4", "--d-model", "16", "--nhead", "2", "--layers", "1",
         "--dim-feedforward", "32", "--eval-examples", "4"]


def settings(**kw):
    return TrainSettings(**{**dict(steps=3, batch_size=4, warmup=1, log_every=1, eval_examples=4), **kw})


def test_a_run_folder_in_use_by_another_process_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "run"
    holder = _hold_lock(out)
    try:
        with pytest.raises(FolderBusy, match=rf"run folder .*run' is in use by process {holder.pid}"):
            train_task("translate", small(), settings(), out, **QUIET)
        assert main(["translate", "train", "--out", str(out), *FLAGS]) == 2
        assert f"is in use by process {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # the refused runs wrote nothing
    train_task("translate", small(), settings(), out, **QUIET)  # the lock of a killed holder is stale
    assert load_run(out, task="translate") is not None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow that makes the run diverge
@pytest.mark.parametrize("made", [False, True])
def test_a_diverged_run_stops_at_its_first_non_finite_step_naming_lr_and_leaves_no_run(tmp_path, made):
    out = tmp_path / "run"
    if made:
        out.mkdir()
    lines = []
    with pytest.raises(TrainingDiverged, match=r"training diverged: .*(nan|inf) at step \d; nothing was saved. "
                                               r"Try a lower --lr \(this run's was 1e\+06\)"):
        train_task("translate", small(), settings(steps=40, lr=1e6), out, log=lines.append)
    assert not any(line.startswith("step   40") for line in lines)  # it stopped, not trained on NaN
    assert not out.exists() if not made else [p.name for p in out.iterdir()] == [".lock"]
    train_task("translate", small(), settings(), out, **QUIET)  # the rerun is not refused
    assert load_run(out, task="translate") is not None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_gpt_translate_train_reports_divergence_in_one_line(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["translate", "train", "--out", str(out), *FLAGS, "--steps", "40", "--lr", "1e6"]) == 1
    err = capsys.readouterr().err
    assert "training diverged" in err and "--lr" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("fault", ["interrupt", "evaluation", "write"])
def test_an_interrupted_or_failed_run_removes_what_it_wrote(tmp_path, monkeypatch, fault):
    out = tmp_path / "run"
    out.mkdir()  # a folder the user made: it stays, empty but for its lock
    if fault == "interrupt":
        monkeypatch.setattr(T, "evaluate_translation", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        expected = KeyboardInterrupt
    elif fault == "evaluation":
        monkeypatch.setattr(T, "evaluate_translation", lambda *a, **k: 1 / 0)
        expected = ZeroDivisionError
    else:  # metrics.jsonl is written, then the weights fail (a full disk)
        def full_disk(*a, **k):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(nn.checkpoint, "save_safetensors", full_disk)
        expected = OSError
    with pytest.raises(expected):
        train_task("translate", small(), settings(), out, **QUIET)
    assert [p.name for p in out.iterdir()] == [".lock"]
    monkeypatch.undo()
    train_task("translate", small(), settings(), out, **QUIET)
    assert sorted(p.name for p in out.iterdir()) == [".lock", *sorted(T.WRITTEN)]


def test_non_finite_numbers_are_written_as_json_null(tmp_path):
    model = Seq2Seq(small())
    save_run(tmp_path, "translate", model, settings(), {"both": math.nan, "examples": [("a", "b", True)]},
             [{"step": 1, "loss": math.inf}, {"step": 2, "loss": 1.5}])
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "loss": None}, {"step": 2, "loss": 1.5}]
    assert json.loads((tmp_path / "summary.json").read_text()) == {"both": None, "examples": [["a", "b", True]]}


def test_a_batch_that_cannot_fit_is_refused_before_anything_is_allocated_or_made(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"a training step of --batch-size 1,000,000,000,000 on this model "
                                         r"needs at least .* GiB, more than .*; lower --batch-size"):
        train_task("encoder", small(), settings(batch_size=10 ** 12), out, **QUIET)
    assert main(["translate", "train", "--out", str(out), *FLAGS, "--batch-size", str(10 ** 12)]) == 2
    assert "lower --batch-size" in capsys.readouterr().err
    assert not out.exists()
    assert T.step_bytes(Seq2Seq(small()), settings(batch_size=64)) < 2 ** 24  # a usual step fits anywhere


@pytest.mark.parametrize("flags, message", [(["--beams", "0"], "--beams must be >= 1, got 0"),
                                            (["--beams", "-3"], "--beams must be >= 1, got -3"),
                                            (["--beams", "3", "--temperature", "50"],
                                             "--temperature 50 samples, --beams 3 searches deterministically")])
def test_sample_refuses_bad_beams_and_a_temperature_with_beams(tmp_path, capsys, flags, message):
    # checked before the run loads: a missing run would say "no config.json" instead
    assert main(["translate", "sample", "--run", str(tmp_path / "none"), "5", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("config, named", [({"kind": "vit", "model": {}, "train": {}}, "a ViT run, of `gpt vit train`"),
                                           ({"train": {}, "model": {}, "data_dir": "d"}, "a GPT run, of `gpt train`"),
                                           ({"foo": 1}, 'its config.json has no "task"')])
def test_a_folder_of_another_kind_of_run_is_named_as_such(tmp_path, capsys, config, named):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["translate", "report", "--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"is not a run of `gpt translate` ({named}" in err and "None" not in err
