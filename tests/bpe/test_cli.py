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


@pytest.mark.parametrize("cmd", [[], ["train"], ["count"], ["encode"], ["decode"], ["show"]])
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
    monkeypatch.chdir(tmp_path)  # `bpe train` without --out writes tok.json here: never into the clone
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


# ---- nothing lost without a word ------------------------------------------------


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 30)
    return f


def test_train_without_out_does_not_overwrite_tok_json(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["train", "--input", str(corpus), "--vocab-size", "260", "--quiet"]
    assert run(args, "", monkeypatch, capsys)[0] == 0
    before = (tmp_path / "tok.json").read_bytes()
    with pytest.raises(SystemExit, match="tok.json exists; pass --out PATH .* or --force"):
        main(args[:-3] + ["--vocab-size", "265"])
    assert (tmp_path / "tok.json").read_bytes() == before
    assert run(args[:-3] + ["--vocab-size", "265", "--force", "--quiet"], "", monkeypatch, capsys)[0] == 0
    assert Tokenizer.load(tmp_path / "tok.json").vocab_size == 265


def test_tiktoken_out_keeps_special_tokens_in_a_side_file(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "x.tiktoken"
    rc, _, err = run(["train", "--input", str(corpus), "--vocab-size", "270", "--pattern", "gpt2",
                      "--special", "<|endoftext|>", "--out", str(out)], "", monkeypatch, capsys)
    side = tmp_path / "x.tiktoken.json"
    assert rc == 0 and side.exists() and "x.tiktoken.json (split pattern and 1 special token(s)" in err
    info = json.loads(side.read_text())
    assert info["special_tokens"] == {"<|endoftext|>": 269}
    tok = Tokenizer.from_tiktoken(out)  # pattern and special tokens come back from the side file
    assert tok.special_tokens == {"<|endoftext|>": 269} and tok.pattern == info["pat_str"]
    assert tok.encode("<|endoftext|>", allowed_special="all") == [269]
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    enc = tiktoken.Encoding(info["name"], pat_str=info["pat_str"], mergeable_ranks=load_tiktoken_bpe(str(out)),
                            special_tokens=info["special_tokens"])
    text = "the cat<|endoftext|>the log"
    assert enc.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    with pytest.raises(ValueError, match="side file of .*x.tiktoken"):
        Tokenizer.load(side)


def test_encode_special_policy_matches_the_library(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.json"
    run(["train", "--input", str(corpus), "--vocab-size", "270", "--special", "<|endoftext|>",
         "--out", str(out), "--quiet"], "", monkeypatch, capsys)
    tok = Tokenizer.load(out)
    text = "the cat<|endoftext|>"
    rc, _, err = run(["encode", "-t", str(out), "--text", text], "", monkeypatch, capsys)
    assert rc == 2 and "--allowed-special all" in err and "--disallowed-special none" in err
    for flags, kw in [(["--allowed-special", "all"], dict(allowed_special="all")),
                      (["--disallowed-special", "none"], dict(disallowed_special=()))]:
        rc, ids, _ = run(["encode", "-t", str(out), "--text", text] + flags, "", monkeypatch, capsys)
        assert rc == 0 and [int(x) for x in ids.split()] == tok.encode(text, **kw)


def test_encode_warns_on_non_utf8_input_and_bytes_is_exact(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.json"
    run(["train", "--input", str(corpus), "--vocab-size", "270", "--out", str(out), "--quiet"], "", monkeypatch, capsys)
    data = tmp_path / "latin1.txt"
    data.write_bytes(b"caf\xe9 <|x|>\n")
    rc, ids, err = run(["encode", "-t", str(out), str(data)], "", monkeypatch, capsys)
    assert rc == 0 and "not UTF-8 (the first at byte offset 3)" in err and "--bytes" in err
    assert err.startswith("bpe: warning: ") and err.count("\n") == 1  # the message alone
    rc, ids, err = run(["encode", "-t", str(out), "--bytes", str(data)], "", monkeypatch, capsys)
    assert rc == 0 and err == ""
    assert Tokenizer.load(out).decode_bytes([int(x) for x in ids.split()]) == data.read_bytes()


def test_library_warnings_print_the_message_alone(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("ab ab")
    rc, _, err = run(["train", "--input", str(corpus), "--vocab-size", "400", "--out", str(tmp_path / "t.json"),
                      "--quiet"], "", monkeypatch, capsys)
    assert rc == 0 and "bpe: warning: the corpus supports only" in err
    assert "Tokenizer.train(" not in err and "UserWarning" not in err and err.count("\n") == 1


def test_count_shards_then_train_on_the_counts(tmp_path, monkeypatch, capsys):
    shards = []
    for k in range(3):
        d = tmp_path / f"shard{k}"
        d.mkdir()
        (d / "a.txt").write_text(f"def f{k}(x):\n    return x * {k} + 'é'\n" * (k + 3))
        (d / "b.txt").write_text("the cat sat<|endoftext|>on the mat\n" * (4 - k))
        shards.append(d)
    for k, d in enumerate(shards):
        rc, _, _ = run(["count", "--input", str(d), "--out", str(tmp_path / f"counts.{k}"), "--special",
                        "<|endoftext|>", "--pattern", "gpt2", "--quiet"], "", monkeypatch, capsys)
        assert rc == 0
    out = tmp_path / "t.json"
    rc, _, err = run(["train", "--counts", str(tmp_path / "counts.*"), "--vocab-size", "280", "--out", str(out)],
                     "", monkeypatch, capsys)
    assert rc == 0, err
    union = Tokenizer.train(shards, vocab_size=280, pattern="gpt2", special_tokens=["<|endoftext|>"], workers=1)
    merged = Tokenizer.load(out)
    assert merged.merges == union.merges and merged.special_tokens == union.special_tokens
    assert merged.pattern == union.pattern
    rc, _, err = run(["train", "--counts", str(tmp_path / "counts.*"), "--pattern", "gpt4", "--out", str(out)],
                     "", monkeypatch, capsys)
    assert rc == 2 and "made with pattern" in err


def _count(files, out, specials, monkeypatch, capsys):
    args = ["count", "--input", *map(str, files), "--out", str(out), "--quiet"]
    return run(args + [a for s in specials for a in ("--special", s)], "", monkeypatch, capsys)


def test_count_files_keep_the_special_tokens_order_so_their_ids_match_training_on_the_inputs(
        tmp_path, monkeypatch, capsys):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("hello world, the cat sat<|z|>on the mat <|a|> then\n" * 40)
    b.write_text("more text here<|a|> yes\n" * 30)
    order = ["<|z|>", "<|a|>"]
    for k, f in enumerate((a, b)):
        assert _count([f], tmp_path / f"c.{k}", order if k == 0 else order[::-1], monkeypatch, capsys)[0] == 0
    assert json.loads((tmp_path / "c.0").read_text())["special_tokens"] == order
    out = tmp_path / "fromc.json"
    rc, _, err = run(["train", "--counts", str(tmp_path / "c.*"), "--vocab-size", "270", "--out", str(out),
                      "--quiet"], "", monkeypatch, capsys)
    assert rc == 0, err  # files agree whatever their order; the first file's order gives the ids
    union = Tokenizer.train([a, b], vocab_size=270, special_tokens=order, workers=1)
    assert Tokenizer.load(out).special_tokens == union.special_tokens == {"<|z|>": 268, "<|a|>": 269}


@pytest.mark.parametrize("specials, needle", [(["X", "X"], "duplicate special token 'X'"),
                                              ([""], "special tokens must be non-empty strings, got ''")])
def test_count_refuses_the_special_tokens_training_would_refuse(tmp_path, monkeypatch, capsys, specials, needle):
    (tmp_path / "a.txt").write_text("hello world X\n")
    rc, _, err = _count([tmp_path / "a.txt"], tmp_path / "d.0", specials, monkeypatch, capsys)
    assert rc == 2 and f"bpe count: error: {needle}" in err and not (tmp_path / "d.0").exists()


def test_an_empty_shard_counts_to_a_file_of_no_chunks_and_trains_with_the_others(tmp_path, monkeypatch, capsys):
    a, empty = tmp_path / "a.txt", tmp_path / "empty.txt"
    a.write_text("the cat sat on the mat\n" * 20)
    empty.write_text("")
    rc, _, err = _count([empty], tmp_path / "c.0", [], monkeypatch, capsys)
    assert rc == 0 and "bpe: warning: the shard (1 file) holds no text" in err
    assert json.loads((tmp_path / "c.0").read_text())["chunks"] == {}
    out = tmp_path / "t.json"
    rc, _, err = run(["train", "--counts", str(tmp_path / "c.0"), "--vocab-size", "260", "--out", str(out)],
                     "", monkeypatch, capsys)
    assert rc == 2 and "empty" in err and not out.exists()  # every shard empty: nothing to learn from
    assert _count([a], tmp_path / "c.1", [], monkeypatch, capsys)[0] == 0
    rc, _, err = run(["train", "--counts", str(tmp_path / "c.*"), "--vocab-size", "260", "--out", str(out),
                      "--quiet"], "", monkeypatch, capsys)
    assert rc == 0, err
    assert Tokenizer.load(out).merges == Tokenizer.train([a, empty], vocab_size=260, workers=1).merges


def test_an_output_that_is_an_input_file_is_refused_and_the_input_kept(tmp_path, monkeypatch, capsys):
    keep = tmp_path / "keep.txt"
    keep.write_text("the cat sat on the mat\n" * 20)
    before = keep.read_bytes()
    cases = [(["count", "--input", str(keep), "--out", str(keep)], "--out writes"),
             (["train", "--input", str(keep), "--out", str(keep)], "--out writes"),
             (["train", "--input", str(tmp_path), "--out", str(tmp_path / "t.json"), "--hf-out", str(keep)],
              "--hf-out writes"),
             (["train", "--input", str(tmp_path / "*.txt"), "--out", str(tmp_path / "keep.txt")], "--out writes")]
    for args, flag in cases:
        rc, _, err = run(args + ["--quiet"], "", monkeypatch, capsys)
        assert rc == 2 and f"{flag} {keep}, which is one of the --input files" in err, err
        assert keep.read_bytes() == before
    assert _count([keep], tmp_path / "c.0", [], monkeypatch, capsys)[0] == 0
    rc, _, err = run(["train", "--counts", str(tmp_path / "c.0"), "--out", str(tmp_path / "c.0")], "",
                     monkeypatch, capsys)
    assert rc == 2 and "which is one of the --counts files" in err
    assert json.loads((tmp_path / "c.0").read_text())["format"] == "bpe-chunk-counts"
