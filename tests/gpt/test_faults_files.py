"""Hostile and malformed files: checkpoints, meta.json and tokenizers that are truncated, bit-
flipped, of the wrong types, nested too deep or absurdly sized. Every outcome is a success or the
project's own error naming the file; never a traceback from deep inside, never unbounded memory."""
import json
import random
import struct
import tracemalloc

import numpy as np
import pytest

from gpt.data import prepare, read_meta
from gpt.training.checkpoint import CheckpointError, load_checkpoint, load_model
from tests.gpt.test_faults_folders import _corpus
from tests.gpt.test_train import quiet, small
from gpt.training.trainer import train

ACCEPTED = (CheckpointError, ValueError, FileNotFoundError)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    prepare([_corpus(root / "c.txt")], root / "d", vocab_size=300, workers=1)
    train(small(root / "d", root / "r", max_steps=2), out=quiet())
    return root


def _safetensors(path, header: dict, data: bytes = b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _ckpt_meta(**entries):
    meta = {"format": "fromscratch-gpt/checkpoint/v1"}
    meta.update({k: json.dumps(v) for k, v in entries.items()})
    return meta


def test_a_tiny_checkpoint_claiming_a_huge_model_is_refused_without_allocating(tmp_path):
    cfg = {"vocab_size": 500_000, "block_size": 8, "n_layer": 1, "n_head": 1, "n_embd": 1024}
    path = _safetensors(tmp_path / "x.safetensors", {
        "__metadata__": _ckpt_meta(config=cfg, step=0),
        "model/transformer.wte.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    tracemalloc.start()
    with pytest.raises(CheckpointError, match="holds 1 weights but its config describes"):
        load_model(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20e6


@pytest.mark.parametrize("entries, message", [
    ({"config": [1, 2], "step": 0}, "'config' should be an object"),
    ({"config": {}, "step": 0, "rng": [1]}, "'rng' should be an object or null"),
    ({"config": {}, "step": -4}, "'step' is out of range"),
    ({"config": {}, "step": "3"}, "'step' should be int"),
    ({"config": {"vocab_size": 1e9, "block_size": 8, "n_layer": 1, "n_head": 1, "n_embd": 8}, "step": 0},
     "vocab_size must be a positive int"),
])
def test_checkpoint_metadata_of_the_wrong_types_is_named(tmp_path, entries, message):
    path = _safetensors(tmp_path / "x.safetensors", {
        "__metadata__": _ckpt_meta(**entries),
        "model/w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


def test_a_deeply_nested_safetensors_header_is_an_error_not_a_recursion_crash(tmp_path):
    raw = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load_checkpoint(path)


def test_a_bad_tokenizer_inside_a_checkpoint_is_named_for_the_checkpoint(run, tmp_path):
    from nn.checkpoint import load_safetensors, save_safetensors

    tensors, meta = load_safetensors(run / "r" / "latest.safetensors")
    meta["tokenizer"] = json.dumps('{"format": "bpe-tokenizer", "version": 1, "merges": 7}')
    save_safetensors(tmp_path / "bad.safetensors", tensors, meta)
    with pytest.raises(CheckpointError, match=r"bad.safetensors.* holds an invalid tokenizer") as exc:
        load_model(tmp_path / "bad.safetensors")
    assert "/tmp" not in str(exc.value).split("holds an invalid tokenizer")[1]


def test_fuzzed_checkpoints_load_or_fail_with_our_error(run, tmp_path):
    good = (run / "r" / "latest.safetensors").read_bytes()
    rng = random.Random(0)
    cases = [good[:n] for n in sorted(rng.sample(range(len(good)), 25))]
    for _ in range(40):
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(b), 4096))  # mostly in the header, where bit flips bite
            b[i] ^= 1 << rng.randrange(8)
        cases.append(bytes(b))
    outcomes = {"loaded": 0, "refused": 0}
    for i, data in enumerate(cases):
        path = tmp_path / f"f{i}.safetensors"
        path.write_bytes(data)
        try:
            load_model(path)
            outcomes["loaded"] += 1
        except ACCEPTED:
            outcomes["refused"] += 1
    assert outcomes["refused"] >= 25  # every truncation at least


@pytest.mark.parametrize("meta, message", [
    ({"vocab_size": "1024"}, "'vocab_size' must be a positive integer"),
    ({"vocab_size": 1024.7}, "'vocab_size' must be a positive integer"),
    ({"vocab_size": 300, "tokenizer": [1, 2]}, "'tokenizer' must be null or a file name"),
    ({"vocab_size": 300, "tokenizer": "../../../../etc/passwd"}, "points outside the data folder"),
    ({"vocab_size": 300, "tokenizer": "/etc/passwd"}, "points outside the data folder"),
    ({"vocab_size": 10}, r"holds id \d+, outside the vocabulary of 10 ids"),
    ({"vocab_size": 300, "dtype": "float32"}, "'dtype' must be"),
    ({"vocab_size": 300, "eot_id": 999}, "'eot_id' must be null or an id below"),
])
def test_bad_meta_json_is_refused_before_training(run, tmp_path, meta, message):
    d = tmp_path / "d"
    d.mkdir()
    for f in ("train.bin", "val.bin", "tokenizer.json"):
        (d / f).write_bytes((run / "d" / f).read_bytes())
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=message):
        read_meta(d)


def test_duplicate_keys_in_meta_json_are_refused(run, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for f in ("train.bin", "val.bin"):
        (d / f).write_bytes((run / "d" / f).read_bytes())
    (d / "meta.json").write_text('{"vocab_size": 300, "vocab_size": 5}')
    with pytest.raises(ValueError, match="duplicate key 'vocab_size'"):
        read_meta(d)


def test_without_meta_json_the_vocabulary_covers_val_too(tmp_path):
    np.array([1, 2, 3], dtype=np.uint16).tofile(tmp_path / "train.bin")
    np.array([9], dtype=np.uint16).tofile(tmp_path / "val.bin")
    assert read_meta(tmp_path)["vocab_size"] == 10


def test_an_interrupted_prepare_is_refused_but_a_nanogpt_folder_works(run, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for f in ("train.bin", "val.bin", "tokenizer.json"):
        (d / f).write_bytes((run / "d" / f).read_bytes())
    (d / ".incomplete").write_text("being written")
    with pytest.raises(ValueError, match="is incomplete"):
        read_meta(d)
    (d / ".incomplete").unlink()
    (d / "tokenizer.json").unlink()
    assert read_meta(d)["tokenizer_path"] is None  # nanoGPT's own layout: no meta.json


def test_fuzzed_meta_json_is_read_or_refused_with_our_error(run, tmp_path):
    good = (run / "d" / "meta.json").read_text()
    rng = random.Random(2)
    d = tmp_path / "d"
    d.mkdir()
    for f in ("train.bin", "val.bin", "tokenizer.json"):
        (d / f).write_bytes((run / "d" / f).read_bytes())
    variants = [good[:n] for n in range(0, len(good), max(1, len(good) // 20))]
    variants += ["[" * 50_000, '{"vocab_size": 1' + "0" * 5000 + "}", "null", "[]", '"x"']
    for _ in range(30):
        chars = list(good)
        chars[rng.randrange(len(chars))] = rng.choice('{}[]",:0a\\')
        variants.append("".join(chars))
    for text in variants:
        (d / "meta.json").write_text(text)
        try:
            read_meta(d)
        except (ValueError, FileNotFoundError):
            pass


# ---- flags that would allocate more than the machine has -----------------------------------------
def _peak_mib(fn):
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / 2**20


@pytest.mark.parametrize("argv, message", [
    (["sample", "--max-new-tokens", str(10**12)], r"1 row\(s\) of 1,000,000,000,\d+ tokens .* needs at least "
                                                  r"[\d,.]+ GiB, more than the [\d,.]+ GiB this machine has free; "
                                                  r"ask for fewer new tokens \(--max-new-tokens\)"),
    (["train", "--batch-size", str(10**9), "--max-steps", "1"],
     r"a training step of --batch-size 1000000000 x --block-size \d+ .* needs at least .*; lower --batch-size"),
])
def test_a_flag_asking_for_more_memory_than_there_is_is_one_line(run, tmp_path, capsys, argv, message):
    from gpt.cli import main

    where = ["--run", str(run / "r")] if argv[0] == "sample" else \
        ["--data", str(run / "d"), "--out", str(tmp_path / "big"), "--n-layer", "1", "--n-embd", "16", "--n-head", "2"]
    code = []
    assert _peak_mib(lambda: code.append(main(argv + where))) < 64  # refused before allocating
    err = capsys.readouterr().err.strip().splitlines()
    assert code == [2] and len(err) == 1 and "Traceback" not in err[0]
    assert __import__("re").search(message, err[0]), err[0]
    assert not (tmp_path / "big").exists()  # a refused run leaves no folder


def test_a_memory_error_nobody_foresaw_is_one_line(monkeypatch, capsys):
    from gpt import cli
    from gpt.commands import plot

    def boom(args):
        raise MemoryError()

    monkeypatch.setattr(plot, "run", boom)
    assert cli.main(["plot", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpt plot: error: out of memory; try a smaller batch, model or sample"]


@pytest.mark.parametrize("argv, message", [
    (["sample", "--run", "RUN", "--prompt-file", "BAD"], r"--prompt-file '.*bad.txt' is not UTF-8 text \(byte 0xe9 at offset 3\)"),
    (["sample", "--run", "RUN", "--prompt-file", "ROOT"], r"--prompt-file '.*' is a folder, not a file"),
    (["sample", "--checkpoint", "/dev/zero"], r"'/dev/zero' is not a regular file"),
    (["train", "--config", "BAD"], r"config file '.*bad.txt' is not UTF-8 text"),
])
def test_files_that_are_no_text_files_are_named_with_what_is_wrong(run, tmp_path, capsys, argv, message):
    from gpt.cli import main

    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    subs = {"RUN": str(run / "r"), "BAD": str(tmp_path / "bad.txt"), "ROOT": str(tmp_path)}
    assert main([subs.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and __import__("re").search(message, err[0]), err
