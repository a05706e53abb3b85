"""gpt.data: nanoGPT's layout, documents and end-of-text tokens, the val split, streaming."""
import json
import os

import numpy as np
import pytest

from bpe import GPT2_PATTERN, GPT4_PATTERN, Tokenizer
from bpe import O200K_PATTERN
from gpt.data.char_tokenizer import CharTokenizer
from gpt.data.folder import EOT, load_tokenizer, open_tokens, read_meta, token_dtype
from gpt.data.prepare import input_files, iter_documents, prepare

TEXT = (
    "def f(x):\n    return x + 1  \n\nclass A:\n    pass\n"
    "First Citizen:\nBefore we proceed any further, hear me speak.  \n \nAll:\nSpeak, speak.\n"
    "x = [1, 2, 3]\t\n# comment\n'''doc'''\n"
)


def write_docs(tmp_path, n, text=TEXT):
    paths = []
    for i in range(n):
        p = tmp_path / "src" / f"doc{i:02d}.txt"
        p.parent.mkdir(exist_ok=True)
        p.write_text(f"document {i}\n" + text * (1 + i % 3), encoding="utf-8")
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return Tokenizer.train_from_iterator([TEXT * 3], vocab_size=300, special_tokens=[EOT], workers=1)


def test_layout_documents_and_eot(tmp_path, tok):
    paths = write_docs(tmp_path, 20)
    meta = prepare(paths, tmp_path / "d", tokenizer=tok, val_fraction=0.1, workers=1)
    d = tmp_path / "d"
    on_disk = json.loads((d / "meta.json").read_text())
    assert on_disk["vocab_size"] == tok.vocab_size == meta["vocab_size"]
    assert on_disk["dtype"] == "uint16" and on_disk["tokenizer"] == "tokenizer.json"
    eot = tok.encode(EOT, allowed_special="all")[0]
    assert on_disk["eot_id"] == eot
    train = np.fromfile(d / "train.bin", dtype=np.uint16)
    val = np.fromfile(d / "val.bin", dtype=np.uint16)
    assert len(train) == meta["train_tokens"] and len(val) == meta["val_tokens"]
    # Every 10th document (indices 9 and 19) is val; each document ends with one EOT.
    expect_val = [p for i, p in enumerate(paths) if i in (9, 19)]
    expect_train = [p for p in paths if p not in expect_val]
    for ids, docs in ((train, expect_train), (val, expect_val)):
        assert int((ids == eot).sum()) == len(docs)
        pieces = np.split(ids, np.flatnonzero(ids == eot) + 1)[:-1]
        for piece, path in zip(pieces, docs):
            assert piece[-1] == eot
            assert tok.decode(piece[:-1].tolist()) == path.read_text(encoding="utf-8")
    # The folder's tokenizer is the one that wrote the ids.
    again = load_tokenizer(d / "tokenizer.json")
    assert again.encode_ordinary(TEXT) == tok.encode_ordinary(TEXT)


def test_literal_eot_text_in_a_document_is_ordinary_text(tmp_path, tok):
    p = tmp_path / "a.txt"
    p.write_text("before <|endoftext|> after\n" * 40)
    meta = prepare([p], tmp_path / "d", tokenizer=tok, workers=1)
    ids = np.concatenate([np.fromfile(tmp_path / "d" / f"{s}.bin", dtype=np.uint16) for s in ("train", "val")])
    assert int((ids == meta["eot_id"]).sum()) == 1  # only the separator after the document


def test_one_document_splits_its_last_tokens_into_val(tmp_path, tok):
    p = tmp_path / "one.txt"
    p.write_text(TEXT * 30)
    meta = prepare([p], tmp_path / "d", tokenizer=tok, val_fraction=0.1, workers=1)
    total = meta["train_tokens"] + meta["val_tokens"]
    assert meta["val_tokens"] == round(total * 0.1) > 0
    train = np.fromfile(tmp_path / "d" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "d" / "val.bin", dtype=np.uint16)
    whole = tok.encode_ordinary(TEXT * 30) + [meta["eot_id"]]
    assert np.concatenate([train, val]).tolist() == whole


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN], ids=["gpt2", "gpt4", "o200k"])
def test_blocks_of_a_large_file_encode_like_the_whole_file(tmp_path, pattern):
    # "!\n/" is one o200k pre-token: a cut after that newline would change the ids.
    text = (TEXT + "x = a!\n/b\n") * 40
    tok = Tokenizer.train_from_iterator([text[:2000]], vocab_size=320, pattern=pattern,
                                        special_tokens=[EOT], workers=1)
    p = tmp_path / "big.txt"
    p.write_text(text)
    meta = prepare([p], tmp_path / "d", tokenizer=tok, block_bytes=64, workers=1)
    ids = np.concatenate([np.fromfile(tmp_path / "d" / f"{s}.bin", dtype=np.uint16) for s in ("train", "val")])
    assert ids.tolist() == tok.encode_ordinary(text) + [meta["eot_id"]]
    assert len(list(iter_documents([p], block_bytes=64, pattern=pattern))) > 10


def test_gpt_reads_inputs_exactly_as_bpe_does(tmp_path):
    from bpe.files.corpus import expand_inputs

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("a")
    (tmp_path / "d" / "sub" / "b.txt").write_text("b")
    (tmp_path / "d" / "blob.bin").write_bytes(b"\0\1\2")
    inputs = [tmp_path / "d", str(tmp_path / "d" / "*.txt"), tmp_path / "d" / "sub" / ".." / "a.txt"]
    assert input_files(inputs) == expand_inputs(inputs)
    assert sorted(f.name for f in input_files(inputs)) == ["a.txt", "b.txt"]  # binary skipped, each once


def test_worker_processes_write_the_same_bytes_as_one_process(tmp_path, tok):
    paths = write_docs(tmp_path, 12)
    prepare(paths, tmp_path / "one", tokenizer=tok, workers=1, block_bytes=64)
    prepare(paths, tmp_path / "two", tokenizer=tok, workers=2, block_bytes=64)
    for s in ("train.bin", "val.bin"):
        assert (tmp_path / "one" / s).read_bytes() == (tmp_path / "two" / s).read_bytes()


def test_ids_past_65535_are_stored_as_uint32(tmp_path):
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
    chars = [chr(0x10000 + i) for i in range(70000)]
    tok = CharTokenizer(chars, special_tokens=[EOT])
    text = "".join(chars[-50:] + chars[:50]) * 3
    p = tmp_path / "wide.txt"
    p.write_text(text, encoding="utf-8")
    meta = prepare([p], tmp_path / "d", tokenizer=tok, workers=1)
    assert meta["dtype"] == "uint32"
    ids = np.concatenate([open_tokens(tmp_path / "d", s) for s in ("train", "val")])
    assert ids.dtype == np.uint32 and ids.tolist() == tok.encode_ordinary(text) + [tok.vocab_size - 1]
    assert int(ids.max()) > 65535


def test_char_level_trains_its_own_vocabulary(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("hello world\n" * 100)
    meta = prepare([p], tmp_path / "d", char=True, workers=1)
    assert meta["vocab_size"] == len(set("hello world\n")) + 1
    tok = load_tokenizer(tmp_path / "d" / "tokenizer.json")
    ids = open_tokens(tmp_path / "d", "train")
    assert tok.decode(ids[:12].tolist()) == "hello world\n"


def test_trains_a_bpe_tokenizer_when_given_a_vocab_size(tmp_path):
    paths = write_docs(tmp_path, 3)
    meta = prepare(paths, tmp_path / "d", vocab_size=280, workers=1)
    assert meta["vocab_size"] == 280
    assert isinstance(load_tokenizer(tmp_path / "d" / "tokenizer.json"), Tokenizer)


def test_bad_inputs_name_the_problem(tmp_path, tok):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        prepare([tmp_path / "nope.txt"], tmp_path / "d", tokenizer=tok)
    with pytest.raises(FileNotFoundError, match=r"\*\.zzz"):
        prepare([str(tmp_path / "*.zzz")], tmp_path / "d", tokenizer=tok)
    (tmp_path / "x.txt").write_text("hi there\n")
    with pytest.raises(ValueError, match="--vocab-size"):
        prepare([tmp_path / "x.txt"], tmp_path / "d")
    with pytest.raises(ValueError, match="val_fraction"):
        prepare([tmp_path / "x.txt"], tmp_path / "d", tokenizer=tok, val_fraction=1.5)


def test_reading_a_data_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_meta(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="train.bin.*nanoGPT"):
        read_meta(tmp_path / "empty")
    # A folder written by nanoGPT's own scripts has no meta.json: uint16, vocab = max id + 1.
    d = tmp_path / "nano"
    d.mkdir()
    np.array([1, 5, 64, 3], dtype=np.uint16).tofile(d / "train.bin")
    np.array([2, 7], dtype=np.uint16).tofile(d / "val.bin")
    meta = read_meta(d)
    assert meta["vocab_size"] == 65 and meta["dtype"] == "uint16" and meta["tokenizer_path"] is None
    assert open_tokens(d, "val", meta).tolist() == [2, 7]
    (d / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="meta.json"):
        read_meta(d)
    (d / "meta.json").write_text(json.dumps({"vocab_size": 65, "dtype": "uint16"}))
    (d / "val.bin").write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match="val.bin.*whole number"):
        open_tokens(d, "val")


def test_default_corpus_is_standard_library_sources_within_a_budget():
    from gpt.data.corpus import default_files

    files = default_files(max_chars=200_000)
    assert files and all(f.suffix == ".py" and "encodings" not in f.parts for f in files)
    sizes = [f.stat().st_size for f in files]
    assert sum(sizes) >= 200_000 and sum(sizes[:-1]) < 200_000
    assert default_files(max_chars=200_000) == files  # the same choice every time


def test_data_folders_inside_an_input_folder_are_not_read_as_text(tmp_path):
    """`prepare --input corp --out corp/data` again with force, or into corp/data2: the prepared
    folders' meta.json and tokenizer.json are no documents."""
    corp = tmp_path / "corp"
    corp.mkdir()
    (corp / "a.txt").write_text("hello world, a small corpus. " * 200)
    first = prepare([corp], corp / "data", char=True)
    again = prepare([corp], corp / "data", char=True, force=True)
    other = prepare([corp], corp / "data2", char=True)
    assert first["vocab_size"] == again["vocab_size"] == other["vocab_size"] == len(set("hello world, a small corpus. ")) + 1
    with pytest.raises(ValueError, match="no text files found outside data folders"):
        prepare([corp / "data"], tmp_path / "d3", char=True)


def test_a_text_file_given_as_a_data_folder_says_how_to_prepare_it(tmp_path):
    (tmp_path / "t.txt").write_text("hello")
    with pytest.raises(FileNotFoundError, match="is a file, not a data folder: give text as --input"):
        read_meta(tmp_path / "t.txt")
    with pytest.raises(FileNotFoundError, match="data folder .* does not exist"):
        read_meta(tmp_path / "nothing")


@pytest.mark.parametrize("bad, error, message", [
    ("missing tokenizer", FileNotFoundError, "nonexistent.json' does not exist"),
    ("too little text", ValueError, "too few to split"),  # fails after the new tokenizer and ids are written
])
def test_a_forced_prepare_that_fails_leaves_the_old_folder_as_it_was(tmp_path, bad, error, message):
    paths = write_docs(tmp_path, 3)
    d = tmp_path / "d"
    prepare(paths, d, char=True, workers=1)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(error, match=message):
        if bad == "missing tokenizer":
            prepare(paths, d, tokenizer=tmp_path / "nonexistent.json", force=True, workers=1)
        else:
            prepare([tmp_path / "empty.txt"], d, char=True, force=True, workers=1)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # no .incomplete, no temp file
    assert read_meta(d)["train_tokens"] > 0


def test_prepared_files_get_the_mode_of_any_file_the_user_writes(tmp_path):
    old = os.umask(0o022)
    try:
        prepare(write_docs(tmp_path, 3), tmp_path / "d", char=True, workers=1)
    finally:
        os.umask(old)
    modes = {n: (tmp_path / "d" / n).stat().st_mode & 0o777
             for n in ("train.bin", "val.bin", "tokenizer.json", "meta.json")}
    assert modes == dict.fromkeys(modes, 0o644)
