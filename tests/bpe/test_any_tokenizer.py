"""One reader for a tokenizer wherever one is expected (bpe.files.any_tokenizer), in the bpe
command too; `bpe train` says how many binary files a folder held."""
import io
import sys

import pytest

from bpe import GPT2_PATTERN, Tokenizer
from bpe.cli import main
from bpe.files.any_tokenizer import kind_of, load_any

TEXT = "the cat sat on the mat<|endoftext|> naïve café"


@pytest.fixture(scope="module")
def tok():
    texts = ["the cat sat on the mat and the dog sat on the log, naïve café\n" * 40]
    return Tokenizer.train_from_iterator(texts, vocab_size=280, pattern=GPT2_PATTERN,
                                         special_tokens=["<|endoftext|>"], workers=1)


@pytest.fixture(scope="module")
def files(tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    tok.save(d / "ours.json")
    tok.save_tiktoken(d / "ranks.tiktoken")
    (d / "hf").mkdir()
    tok.save_huggingface(d / "hf" / "tokenizer.json")
    (d / "gpt2").mkdir()
    tok.save_gpt2_files(d / "gpt2" / "vocab.json", d / "gpt2" / "merges.txt")
    (d / "renamed.txt").write_bytes((d / "ranks.tiktoken").read_bytes())  # no side file: GPT-4's pattern
    return d


@pytest.mark.parametrize("name,kind", [("ours.json", "json"), ("ranks.tiktoken", "tiktoken"),
                                       ("hf/tokenizer.json", "huggingface"), ("hf", "folder"),
                                       ("gpt2", "folder"), ("renamed.txt", "tiktoken")])
def test_every_kind_reads_by_its_content_and_encodes_the_same(files, tok, name, kind):
    assert kind_of(files / name) == kind
    got = load_any(Tokenizer, files / name, pattern=GPT2_PATTERN if name == "renamed.txt" else None)
    # GPT-2's files, and a .tiktoken without its side file, hold no special tokens
    text = TEXT.replace("<|endoftext|>", "") if name in ("gpt2", "renamed.txt") else TEXT
    assert got.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_a_folder_without_a_tokenizer_and_a_stranger_file_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no tokenizer .*tokenizer.json, or vocab.json"):
        load_any(Tokenizer, tmp_path)
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="x.json"):
        load_any(Tokenizer, tmp_path / "x.json")


def test_bpe_encode_reads_a_hugging_face_file_and_a_model_folder(files, tok, monkeypatch, capsys):
    for where in (files / "hf" / "tokenizer.json", files / "hf"):
        monkeypatch.setattr(sys, "stdin", io.StringIO("the cat sat"))
        assert main(["encode", "-t", str(where)]) == 0
        assert [int(x) for x in capsys.readouterr().out.split()] == tok.encode("the cat sat")


def test_train_says_how_many_binary_files_it_skipped(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("hello world, hello there\n" * 20)
    for name in ("b.bin", "c.dat"):
        (tmp_path / name).write_bytes(b"\x00\x01binary")
    assert main(["train", "--input", str(tmp_path), "--vocab-size", "260", "--out", str(tmp_path / "t.json")]) == 0
    assert "counting chunks in 1 file (2 files skipped as binary" in capsys.readouterr().err
