"""What a newcomer meets first: the default corpus, bits per byte, threads of every command, a
fine-tune refused on another tokenizer's data, tokenizers of every kind where one is expected."""
import json
import math
import re

import numpy as np
import pytest

from autograd import parallel
from bpe import Tokenizer
from gpt.cli import main
from gpt.data.corpus import MAX_DIGIT_SHARE, MAX_FILE_BYTES, SKIPPED_FOLDERS, default_files
from gpt.data.folder import bits_per_byte, open_tokens, read_meta, split_bytes
from tests.gpt.test_cli import TINY

TEXT = "def f(x):\n    return x + 1  # naïve café\n"


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("first")
    for i in range(12):
        (root / f"doc{i}.py").write_text(TEXT * (20 + i), encoding="utf-8")
    assert main(["prepare", "--input", str(root / "doc*.py"), "--vocab-size", "300", "--out",
                 str(root / "d"), "--workers", "1"]) == 0
    assert main(["prepare", "--input", str(root / "doc*.py"), "--char", "--out", str(root / "c"),
                 "--workers", "1"]) == 0
    assert main(["train", "--data", str(root / "d"), "--out", str(root / "run"), "--max-steps", "2", *TINY]) == 0
    return root


def test_the_default_corpus_leaves_out_tests_tables_and_huge_files():
    files = default_files(max_chars=10 ** 9)
    assert len(files) > 100 and files == default_files(max_chars=10 ** 9)
    for f in files:
        data = f.read_bytes()
        assert not SKIPPED_FOLDERS.intersection(f.parts[:-1]) and not f.name.startswith("test")
        assert 0 < len(data) <= MAX_FILE_BYTES
        assert sum(data.count(d) for d in b"0123456789") <= MAX_DIGIT_SHARE * len(data)
    names = {f.name for f in files}
    assert "stringprep.py" not in names and "argparse.py" in names  # a table of numbers out, code in


def test_meta_counts_the_bytes_of_each_split_and_bits_per_byte_follow(bpe_data):
    total = sum(len((bpe_data / f"doc{i}.py").read_bytes()) for i in range(12))
    for name in ("d", "c"):
        meta = read_meta(bpe_data / name)
        assert meta["train_bytes"] + meta["val_bytes"] == total and meta["val_bytes"] > 0
        val = open_tokens(bpe_data / name, "val", meta)
        # the count meta.json holds is the one decoding the ids gives (end-of-text tokens left out)
        from gpt.data import load_tokenizer

        tok = load_tokenizer(meta["tokenizer_path"])
        assert split_bytes({"eot_id": meta["eot_id"]}, "val", val, tok) == meta["val_bytes"]
    assert bits_per_byte(2.0, 300, 600) == pytest.approx(1.0 / math.log(2))
    assert bits_per_byte(2.0, 300, None) is None


def test_train_prints_and_records_val_bits_per_byte(bpe_data, capsys):
    metrics = [json.loads(line) for line in (bpe_data / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in metrics if m.get("kind") == "eval"]
    meta = read_meta(bpe_data / "d")
    for m in evals:
        assert m["val_bpb"] == pytest.approx(m["val_loss"] * meta["val_tokens"] / meta["val_bytes"] / math.log(2))
    summary = json.loads((bpe_data / "run" / "summary.json").read_text())
    assert summary["val_bpb"] == pytest.approx(evals[-1]["val_bpb"])


def test_one_document_is_not_documents(tmp_path, capsys):
    (tmp_path / "one.txt").write_text("hello there, general kenobi\n" * 20)
    assert main(["prepare", "--input", str(tmp_path / "one.txt"), "--char", "--out", str(tmp_path / "d"),
                 "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "prepare: 1 document ->" in err and "1 documents" not in err


def test_init_from_refuses_data_of_another_tokenizer_naming_both(bpe_data, tmp_path, capsys):
    rc = main(["train", "--init-from", str(bpe_data / "run"), "--data", str(bpe_data / "c"),
               "--out", str(tmp_path / "ft"), "--max-steps", "1", "--samples", "0", "--peak-flops", "1e9"])
    err = capsys.readouterr().err
    assert rc == 2 and "a character table of 22 ids" in err and re.search(r"a BPE tokenizer of \d+ ids", err)
    assert str(bpe_data / "run") in err and not (tmp_path / "ft").exists()
    # the model's own tokenizer is accepted
    assert main(["train", "--init-from", str(bpe_data / "run"), "--data", str(bpe_data / "d"),
                 "--out", str(tmp_path / "ok"), "--max-steps", "1", "--samples", "0", "--peak-flops", "1e9",
                 "--block-size", "16", "--eval-batches", "1"]) == 0


@pytest.fixture
def two_threads(monkeypatch):
    """GPT_THREADS=2, and the process back on one thread (autograd.parallel's default) afterwards."""
    monkeypatch.setenv("GPT_THREADS", "2")
    parallel.set_threads(1)
    yield
    parallel.set_threads(1)


@pytest.mark.parametrize("argv", [
    ["sample", "--run", "{run}", "--max-new-tokens", "3", "--seed", "0"],
    ["eval", "--run", "{run}"],
    ["gradflow", "--depths", "1", "--variants", "pre", "--seeds", "1", "--n-embd", "8", "--n-head", "2",
     "--block-size", "8", "--batch-size", "2", "--no-jacobian", "--quiet", "--corpus", "{corpus}"],
])
def test_every_command_that_computes_chooses_its_threads_like_train(bpe_data, two_threads, capsys, argv):
    fill = {"run": str(bpe_data / "run"), "corpus": str(bpe_data / "doc0.py")}
    assert main([a.format(**fill) for a in argv]) == 0
    assert parallel.threads() == 2
    if parallel.blas_threads() is not None:
        assert parallel.blas_threads() == 1  # the pool splits the products; OpenBLAS on one thread
    if argv[0] == "gradflow":
        assert "docs/gradflow.md" in capsys.readouterr().out


def test_translate_chooses_its_threads_like_train(tmp_path, two_threads):
    assert main(["translate", "train", "--out", str(tmp_path / "t"), "--steps", "2", "--batch-size", "4",
                 "--d-model", "8", "--nhead", "2", "--layers", "1", "--dim-feedforward", "16",
                 "--eval-examples", "2"]) == 0
    assert parallel.threads() == 2


def test_prepare_and_bpe_read_a_hugging_face_tokenizer_json(bpe_data, tmp_path, capsys):
    tok = Tokenizer.load(bpe_data / "run" / "tokenizer.json")
    tok.save_huggingface(tmp_path / "tokenizer.json")
    assert main(["prepare", "--input", str(bpe_data / "doc0.py"), "--tokenizer", str(tmp_path / "tokenizer.json"),
                 "--out", str(tmp_path / "d"), "--workers", "1"]) == 0
    ids = np.concatenate([open_tokens(tmp_path / "d", s) for s in ("train", "val")])
    assert ids.tolist() == tok.encode(TEXT * 20) + [read_meta(tmp_path / "d")["eot_id"]]  # the same ids as ours
    # a folder holding one (a run of ours) is read too
    assert main(["prepare", "--input", str(bpe_data / "doc0.py"), "--tokenizer", str(bpe_data / "run"),
                 "--out", str(tmp_path / "d2"), "--workers", "1"]) == 0


def test_import_of_a_folder_without_a_tokenizer_says_how_to_add_one(tmp_path, capsys):
    from gpt import GPT, GPTConfig

    GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path / "hf")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "holds no tokenizer" in out and f"copy the model's tokenizer.json into {tmp_path / 'hf'}" in out


def test_the_peak_for_mfu_is_measured_on_the_threads_a_step_uses(monkeypatch):
    # NumPy's own product runs on OpenBLAS's one thread while the pool holds several: a peak
    # measured with it put the default run's MFU at 126%.
    from gpt.training import flops

    calls = []
    real = parallel.matmul
    monkeypatch.setattr(parallel, "matmul", lambda a, b, out=None: calls.append(a.shape) or real(a, b, out=out))
    assert flops.measure_peak_flops("cpu", n=256, repeats=2) > 0
    assert calls == [(256, 256)] * 3
