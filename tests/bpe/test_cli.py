"""The bpe command: train, encode, decode, show, and --help on each."""
import io
import json
import sys

import pytest

from bpe import Tokenizer
from bpe.cli import main


def run(args, stdin="", monkeypatch=None, capsys=None):
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("cmd", [[], ["train"], ["encode"], ["decode"], ["show"]])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main(cmd + ["--help"])
    assert e.value.code == 0
    assert "usage: bpe" in capsys.readouterr().out


def test_train_encode_decode_show(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 30)
    out = tmp_path / "tok.json"
    hf = tmp_path / "hf.json"
    rc, _, err = run(["train", "--input", str(corpus), "--vocab-size", "300", "--pattern", "gpt2",
                      "--special", "<|endoftext|>", "--out", str(out), "--hf-out", str(hf)], "", monkeypatch, capsys)
    assert rc == 0 and out.exists() and hf.exists()
    tok = Tokenizer.load(out)
    assert tok.special_tokens == {"<|endoftext|>": 256 + tok.n_merges}  # right after the merges
    text = "the cat sat<|endoftext|>on the log"
    rc, ids, _ = run(["encode", "-t", str(out), "--allowed-special", "all"], text, monkeypatch, capsys)
    assert rc == 0 and [int(x) for x in ids.split()] == tok.encode(text, allowed_special="all")
    rc, back, _ = run(["decode", "-t", str(out)], ids, monkeypatch, capsys)
    assert rc == 0 and back == text
    rc, shown, _ = run(["show", "-t", str(out), "--text", "the cat", "--color", "never"], "", monkeypatch, capsys)
    pieces = [tok.token_bytes(i).decode() for i in tok.encode("the cat")]
    assert rc == 0 and shown.strip("\n") == "|".join(pieces)
    rc, shown, _ = run(["show", "-t", str(out), "--text", "the cat", "--color", "always"], "", monkeypatch, capsys)
    assert "\x1b[" in shown


def test_tiktoken_output_by_extension(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("abc abd abe " * 20)
    out = tmp_path / "tok.tiktoken"
    rc, _, _ = run(["train", "--input", str(corpus), "--vocab-size", "260", "--out", str(out), "--quiet"],
                   "", monkeypatch, capsys)
    assert rc == 0 and len(out.read_text().splitlines()) == 260
    rc, ids, _ = run(["encode", "-t", str(out), "--text", "abc"], "", monkeypatch, capsys)
    assert rc == 0 and ids.split()


def test_errors_are_one_line(tmp_path, monkeypatch, capsys):
    rc, _, err = run(["train", "--input", str(tmp_path / "missing.txt")], "", monkeypatch, capsys)
    assert rc == 2 and "missing.txt" in err and "Traceback" not in err
    corpus = tmp_path / "c.txt"
    corpus.write_text("abc")
    rc, _, err = run(["train", "--input", str(corpus), "--vocab-size", "100"], "", monkeypatch, capsys)
    assert rc == 2 and "too small" in err
    tokf = tmp_path / "t.json"
    Tokenizer.train(corpus, vocab_size=257).save(tokf)
    with pytest.raises(SystemExit, match="not in the vocabulary"):
        main(["decode", "-t", str(tokf), "--ids", "5 99999"])
    with pytest.raises(SystemExit, match="does not exist"):
        main(["encode", "-t", str(tmp_path / "none.json"), "--text", "x"])
