"""nanoGPT's own character datasets: meta.pkl read with an unpickler that accepts plain data only."""
import os
import pickle

import numpy as np
import pytest

from gpt.data import load_tokenizer, read_meta
from gpt.training.config import TrainConfig
from gpt.training.trainer import train
from tests.gpt.test_train import quiet


def _nanogpt_folder(d, text="hello world, hello nanoGPT\n" * 50):
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    d.mkdir()
    ids[: len(ids) * 9 // 10].tofile(d / "train.bin")
    ids[len(ids) * 9 // 10:].tofile(d / "val.bin")
    with open(d / "meta.pkl", "wb") as f:  # what nanoGPT's data/shakespeare_char/prepare.py writes
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    return d, len(chars)


def test_a_nanogpt_character_folder_trains_and_samples_as_text(tmp_path):
    d, V = _nanogpt_folder(tmp_path / "shakespeare_char")
    meta = read_meta(d)
    assert meta["vocab_size"] == V and meta["tokenizer_path"].endswith("meta.pkl")
    tok = load_tokenizer(meta["tokenizer_path"])
    assert tok.decode(tok.encode("hello")) == "hello"
    res = train(TrainConfig(data=str(d), out=str(tmp_path / "run"), n_layer=1, n_head=2, n_embd=16, block_size=16,
                            batch_size=4, max_steps=2, eval_interval=1, eval_batches=1, samples=1, sample_tokens=10,
                            peak_flops=1e9, prompt="hello"), out=quiet())
    assert res.samples and all(set(s) <= set("hello world,nanoGPT\n") for s in res.samples)
    assert (tmp_path / "run" / "tokenizer.json").is_file()


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path):
    d, _ = _nanogpt_folder(tmp_path / "d")
    evil = _Evil()
    evil.target = tmp_path / "pwned"
    (d / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 3, "itos": evil}))
    with pytest.raises(ValueError, match=r"meta.pkl is not a plain nanoGPT meta.pkl: it refers to (posix|os)\.system"):
        read_meta(d)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("payload", [{"vocab_size": 3}, {"vocab_size": 2, "itos": {0: "ab", 1: "c"}}, [1, 2], b"junk"])
def test_other_meta_pkl_contents_are_refused_clearly(tmp_path, payload):
    d, _ = _nanogpt_folder(tmp_path / "d")
    (d / "meta.pkl").write_bytes(payload if isinstance(payload, bytes) else pickle.dumps(payload))
    with pytest.raises(ValueError, match="meta.pkl"):
        read_meta(d)


@pytest.mark.parametrize("itos, V", [
    ({0: "a", "x": "b"}, 2),      # a key that does not compare with ints
    ({0: "a", True: "b"}, 2),     # a bool is no id
    ({0: "a", 2: "b"}, 2),        # a gap
    ({0: "a"}, 10**10),           # a vocab_size that would build 10**10 ids to compare with
    ({0: "a", 1.0: "b"}, 2),
])
def test_a_hostile_itos_or_vocab_size_is_refused_naming_meta_pkl(tmp_path, itos, V):
    d, _ = _nanogpt_folder(tmp_path / "d")
    (d / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": V, "itos": itos}))
    with pytest.raises(ValueError, match=r"meta.pkl is not the meta.pkl of a nanoGPT character dataset"):
        read_meta(d)
