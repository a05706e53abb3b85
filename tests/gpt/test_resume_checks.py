"""What `gpt train --resume` (and eval, sample) does with a checkpoint whose tensors or metadata
were damaged or tampered with: refused at load, naming the tensor or the entry, never a raw
traceback at the first step, never training or scoring on garbage."""
import json

import numpy as np
import pytest

from gpt.data import prepare
from gpt.training.checkpoint import CheckpointError, load_checkpoint, load_model
from gpt.training.config import TrainConfig
from gpt.training.resume import resumed_settings
from gpt.training.trainer import Trainer, lr_at, train
from nn.checkpoint import load_safetensors, save_safetensors
from tests.gpt.test_train import _text, quiet, small


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 2-step run of a char-level model (vocabulary 19) over a folder of its own."""
    root = tmp_path_factory.mktemp("resume_checks")
    (root / "corpus.txt").write_text(_text())
    prepare([root / "corpus.txt"], root / "d", char=True, workers=1)
    train(small(root / "d", root / "r", max_steps=2), out=quiet())
    return root / "r"


def _tampered(run, tmp_path, edit):
    """A run folder whose latest checkpoint is `run`'s after edit(tensors, metadata)."""
    tensors, metadata = load_safetensors(run / "latest.safetensors")
    edit(tensors, metadata)
    (tmp_path / "t").mkdir()
    save_safetensors(tmp_path / "t" / "latest.safetensors", tensors, metadata)
    return tmp_path / "t"


def _resume(folder, **settings):
    t = Trainer(TrainConfig(resume=str(folder), **settings), {"resume", *settings}, out=quiet())
    t.folder.close()
    return t


def _set_meta(key, value):
    def edit(tensors, metadata):
        metadata[key] = json.dumps(value)
    return edit


def test_a_run_of_zero_steps_resumes_with_the_schedule_of_a_fresh_run(run, tmp_path):
    data = load_checkpoint(run / "latest.safetensors").meta["data_dir"]
    train(small(data, tmp_path / "z", max_steps=0, lr_decay_steps=None), out=quiet())
    out = quiet()
    t = Trainer(TrainConfig(resume=str(tmp_path / "z"), max_steps=3), {"resume", "max_steps"}, out=out)
    t.folder.close()
    assert t.cfg.lr_decay_steps is None and "the cosine still ends" not in out.stream.getvalue()
    assert lr_at(3, t.cfg) == pytest.approx(t.cfg.final_lr()) and lr_at(2, t.cfg) > t.cfg.final_lr()


def test_a_missing_optimizer_moment_is_refused_at_resume_naming_it(run, tmp_path):
    folder = _tampered(run, tmp_path, lambda tensors, _: tensors.pop("optim.state.3.exp_avg"))
    with pytest.raises(CheckpointError, match=r"latest.safetensors': cannot resume from its optimizer state: "
                                              r"AdamW.load_state_dict: state of parameter 3 has no 'exp_avg'"):
        _resume(folder)


@pytest.mark.parametrize("name", ["model/transformer.h.0.attn.c_proj.weight", "optim.state.2.exp_avg"])
def test_float_bits_declared_as_integers_are_refused_naming_the_tensor(run, tmp_path, name):
    def as_int32(tensors, _):  # the bytes stay; the header now says I32
        tensors[name] = tensors[name].view(np.int32)
    folder = _tampered(run, tmp_path, as_int32)
    with pytest.raises(CheckpointError, match=f"tensor '{name}' has dtype int32, expected a float"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="expected a float"):
        _resume(folder)


def test_nan_weights_are_refused_for_resume_and_for_eval_and_sample(run, tmp_path):
    name = "model/transformer.h.1.mlp.c_proj.weight"

    def poison(tensors, _):
        tensors[name][0, :3] = [np.nan, np.inf, -np.inf]
    folder = _tampered(run, tmp_path, poison)
    size = load_checkpoint(run).model_state[name[6:]].size
    with pytest.raises(CheckpointError, match=f"tensor '{name}' holds 3 NaN or infinite value\\(s\\) of {size:,}"):
        _resume(folder)
    with pytest.raises(CheckpointError, match=f"tensor '{name}' holds 3 NaN"):
        load_model(folder)  # what gpt eval and gpt sample load with


@pytest.mark.parametrize("key, value, message", [
    ("loader", {"seed": 1, "batches_drawn": 10, "rng": {"bit_generator": "PCG64", "state": {"state": -5, "inc": 3}}},
     "cannot resume from its 'loader' entry: .*out of bounds"),
    ("rng", {"cpu": 5}, "cannot resume from its 'rng' entry: generator state 'cpu' should be an object"),
    ("rng", {"cpu": {"bit_generator": "PCG64", "state": {"state": 2 ** 200, "inc": 3}, "has_uint32": 0,
                     "uinteger": 0}}, "cannot resume from its 'rng' entry: generator state 'cpu' is malformed"),
    ("train_args", {"batch_size": "x"}, "entry 'train_args': batch_size = 'x' should be int"),
])
def test_malformed_nested_metadata_is_refused_naming_the_entry(run, tmp_path, key, value, message):
    with pytest.raises(CheckpointError, match=message):
        _resume(_tampered(run, tmp_path, _set_meta(key, value)))


def test_a_missing_loader_entry_is_named_in_words(run, tmp_path):
    folder = _tampered(run, tmp_path, lambda _, metadata: metadata.pop("loader"))
    with pytest.raises(CheckpointError, match="its metadata has no 'loader' entry"):
        _resume(folder)


def test_resume_names_the_checkpoint_and_a_missing_train_args_entry(run):
    meta = dict(load_checkpoint(run).meta)
    saved, meta["train_args"] = dict(meta["train_args"]), {**meta["train_args"], "lr": "fast"}
    message = r"checkpoint '.*\.safetensors': entry 'train_args': lr = 'fast' should be float"
    with pytest.raises(CheckpointError, match=message):
        resumed_settings(meta["train_args"], TrainConfig(resume=str(run)), {"resume"}, print, meta)
    del meta["train_args"]
    with pytest.raises(CheckpointError, match="its metadata has no 'train_args' entry"):
        resumed_settings(saved, TrainConfig(resume=str(run)), {"resume"}, print, meta)


def test_another_vocab_size_on_resume_is_refused_with_the_models_own(run):
    """A --data run's model takes its folder's vocabulary; the unused setting (6144) is no answer."""
    meta = load_checkpoint(run).meta
    saved, vocab = meta["train_args"], meta["config"]["vocab_size"]
    assert saved["vocab_size"] != vocab
    with pytest.raises(ValueError, match=rf"--vocab-size 100 \(the run has {vocab}\)"):
        resumed_settings(saved, TrainConfig(resume=str(run), vocab_size=100), {"resume", "vocab_size"}, print, meta)
    for given in (vocab, saved["vocab_size"]):  # the model's, or the setting the run was started with
        resumed_settings(saved, TrainConfig(resume=str(run), vocab_size=given), {"resume", "vocab_size"}, print, meta)
