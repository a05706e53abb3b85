"""Files: our JSON, .tiktoken, GPT-2's encoder.json + vocab.bpe, Hugging Face tokenizer.json.
Round trips are exact; malformed files fail with the file and the line or field named."""
import json
import os

import pytest
import regex

from bpe import GPT2_PATTERN, Tokenizer
from bpe.files.huggingface import unicode_to_bytes

from .conftest import PROSE

SAMPLE = PROSE + "def f(x):\n    return x ** 2  # comment\n\n" + "x<|endoftext|>y"


def same_encoding(a, b, text=SAMPLE):
    return a.encode(text, allowed_special="all") == b.encode(text, allowed_special="all")


def test_json_roundtrip(tok4, tmp_path):
    p = tmp_path / "tok.json"
    tok4.save(p)
    d = json.loads(p.read_text())
    assert d["version"] == 1 and d["pattern"] == tok4.pattern
    assert d["special_tokens"] == {"<|endoftext|>": 1198, "<|fim|>": 1199}
    assert [tuple(m) for m in d["merges"]] == tok4.merges
    back = Tokenizer.load(p)
    assert back.merges == tok4.merges and back.special_tokens == tok4.special_tokens
    assert same_encoding(back, tok4)


def test_tiktoken_roundtrip(tok4, tmp_path):
    p = tmp_path / "tok.tiktoken"
    tok4.save_tiktoken(p)
    back = Tokenizer.from_tiktoken(p, pattern=tok4.pattern, special_tokens=tok4.special_tokens)
    assert back.mergeable_ranks == tok4.mergeable_ranks
    assert same_encoding(back, tok4)
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    assert load_tiktoken_bpe(str(p)) == tok4.mergeable_ranks
    # A vocabulary that is not a merge list (tiktoken ranks) saves to JSON as tokens.
    j = tmp_path / "from_tiktoken.json"
    back.save(j)
    assert "tokens" in json.loads(j.read_text())
    again = Tokenizer.load(j)
    assert again.mergeable_ranks == tok4.mergeable_ranks and same_encoding(again, tok4)


def test_gpt2_files_roundtrip_and_huggingface_reads_them(tok2, tmp_path):
    enc, bpe_ = tmp_path / "encoder.json", tmp_path / "vocab.bpe"
    tok2.save_gpt2_files(enc, bpe_)
    back = Tokenizer.from_gpt2_files(enc, bpe_)
    assert back.pattern == GPT2_PATTERN
    assert back.special_tokens == {"<|endoftext|>": 1199}
    assert back.mergeable_ranks == tok2.mergeable_ranks
    assert same_encoding(back, tok2)
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(enc), str(bpe_)))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = SAMPLE.replace("<|endoftext|>", "")
    assert hf.encode(text).ids == tok2.encode(text)


@pytest.mark.parametrize("which", ["tok2", "tok4"])
def test_huggingface_export_encodes_identically(which, request, tmp_path, corpus_texts):
    tokenizers = pytest.importorskip("tokenizers")
    tok = request.getfixturevalue(which)
    p = tmp_path / "tokenizer.json"
    tok.save_huggingface(p)
    hf = tokenizers.Tokenizer.from_file(str(p))
    texts = [SAMPLE, "0x0010 \\U0001f600 1234567890", "a" * 3000, "  \n\n\t x  y\r\n"] + corpus_texts[::7]
    for text in texts:
        ids = tok.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids
        assert hf.decode(ids, skip_special_tokens=False) == text
        # The pre-tokenizers agree chunk for chunk (not only where the vocabulary hides it).
        plain = text.replace("<|endoftext|>", "")
        theirs = [bytes(unicode_to_bytes()[c] for c in s) for s, _ in hf.pre_tokenizer.pre_tokenize_str(plain)]
        assert theirs == [c.encode() for c in regex.findall(tok.pattern, plain)]


# ---- malformed files ------------------------------------------------------------


def test_truncated_json_names_file_and_line(tok4, tmp_path):
    p = tmp_path / "tok.json"
    tok4.save(p)
    text = p.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"cut.json: not valid JSON \(line \d+"):
        Tokenizer.load(cut)


@pytest.mark.parametrize("patch, field", [
    ({"pattern": 3}, "'pattern'"),
    ({"version": 99}, "'version'"),
    ({"merges": [[1, 2], [3]]}, r"'merges\[1\]'"),
    ({"merges": [[1, -2]]}, r"'merges\[0\]\[1\]'"),
    ({"merges": [[1, 5000]]}, "merge 0"),
    ({"special_tokens": {"<x>": "a"}}, r"special_tokens\['<x>'\]"),
])
def test_bad_json_fields_are_named(tmp_path, patch, field):
    d = {"format": "bpe-tokenizer", "version": 1, "pattern": GPT2_PATTERN, "merges": [[97, 98]], "special_tokens": {}}
    d.update(patch)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=field) as e:
        Tokenizer.load(p)
    assert "bad.json" in str(e.value)


def test_missing_tokenizer_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.json"):
        Tokenizer.load(tmp_path / "nothere.json")


def test_malformed_tiktoken_names_line(tok4, tmp_path):
    good = tmp_path / "good.tiktoken"
    tok4.save_tiktoken(good)
    lines = good.read_text().splitlines()
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("\n".join(lines[:10] + ["Zm9v"] + lines[10:]) + "\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken, line 11"):
        Tokenizer.from_tiktoken(bad)
    bad.write_text("\n".join(lines[:5] + ["!!!notbase64 7"]) + "\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken, line 6: invalid base64"):
        Tokenizer.from_tiktoken(bad)
    bad.write_text("\n".join(lines[:100]) + "\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken: .*single bytes are not tokens.*truncated"):
        Tokenizer.from_tiktoken(bad)
    bad.write_text("\n".join(lines + [lines[0].split()[0] + " 99999"]) + "\n")
    with pytest.raises(ValueError, match=rf"line {len(lines) + 1}: token .* appears twice"):
        Tokenizer.from_tiktoken(bad)


def test_malformed_vocab_bpe_names_line(tok2, tmp_path):
    enc, bpe_ = tmp_path / "encoder.json", tmp_path / "vocab.bpe"
    tok2.save_gpt2_files(enc, bpe_)
    lines = bpe_.read_text().splitlines()
    bpe_.write_text("\n".join(lines[:4] + ["onlyone"] + lines[4:]) + "\n")
    with pytest.raises(ValueError, match=r"vocab.bpe, line 5"):
        Tokenizer.from_gpt2_files(enc, bpe_)
    enc.write_text(enc.read_text()[:-100])
    with pytest.raises(ValueError, match=r"encoder.json: not valid JSON"):
        Tokenizer.from_gpt2_files(enc, bpe_)


def test_writes_are_atomic(tok4, tmp_path, monkeypatch):
    p = tmp_path / "tok.json"
    tok4.save(p)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="No space left"):
        tok4.save(p)
    assert p.read_bytes() == before  # the old file is intact
    assert sorted(f.name for f in tmp_path.iterdir()) == ["tok.json"]  # no temp file left behind
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tok4.save(tmp_path / "no" / "such" / "dir.json")


def test_loading_a_huggingface_file_says_what_it_is(tok2, tmp_path):
    p = tmp_path / "tokenizer.json"
    tok2.save_huggingface(p)
    with pytest.raises(ValueError, match="Hugging Face tokenizer.json"):
        Tokenizer.load(p)


BAD_VALUES = [None, True, 1.5, -1, "x", [], {}, [[1]], {"a": 1}, 10 ** 30, [[None, "AA=="]]]


@pytest.mark.filterwarnings("ignore:split pattern")
def test_hostile_json_gives_one_error_naming_the_file(tmp_path):
    """Wrong types in every field, a 5,000-digit number and deep nesting: always the project's
    ValueError with the file's name, never another exception."""
    base = {"format": "bpe-tokenizer", "version": 1, "pattern": GPT2_PATTERN, "merges": [[97, 98]],
            "special_tokens": {"<x>": 257}}
    cases = []
    for key in ["format", "version", "pattern", "merges", "tokens", "special_tokens"]:
        for v in BAD_VALUES:
            cases.append(json.dumps({**base, key: v}))
    cases += [json.dumps({**base, "special_tokens": {"<x>": v}}) for v in BAD_VALUES]
    cases += [json.dumps({**base, "merges": [v]}) for v in BAD_VALUES]
    cases += [json.dumps({k: v for k, v in base.items() if k != "merges"} | {"tokens": [v]}) for v in BAD_VALUES]
    cases += ['{"version": 1, "merges": [[1, ' + "9" * 5000 + "]]}", "[" * 100_000 + "]" * 100_000, "5", '"x"']
    p = tmp_path / "hostile.json"
    for text in cases:
        p.write_text(text)
        try:
            Tokenizer.load(p)
        except ValueError as e:
            assert "hostile.json" in str(e), (text[:80], e)
    assert len(cases) > 90


def test_side_file_of_tiktoken_gives_pattern_and_specials(tok2, tmp_path):
    p = tmp_path / "t.tiktoken"
    side = tok2.save_tiktoken(p)
    assert side == tmp_path / "t.tiktoken.json"
    back = Tokenizer.from_tiktoken(p)
    assert back.pattern == GPT2_PATTERN and back.special_tokens == tok2.special_tokens
    assert Tokenizer.from_tiktoken(p, pattern="gpt4", special_tokens={}).special_tokens == {}
    side.write_text('{"format": "bpe-tiktoken-side", "pat_str": 3}')
    with pytest.raises(ValueError, match=r"t.tiktoken.json: field 'pat_str' is 3 \(an int\), expected a string"):
        Tokenizer.from_tiktoken(p)
    side.unlink()
    assert Tokenizer.from_tiktoken(p).special_tokens == {}  # a plain .tiktoken file still loads


def test_written_files_honour_the_umask(tok4, tmp_path):
    old = os.umask(0o022)
    try:
        tok4.save(tmp_path / "a.json")
        os.umask(0o002)
        tok4.save(tmp_path / "b.json")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o664


def test_atomic_writes_from_threads_never_touch_the_process_umask(tmp_path, monkeypatch):
    # os.umask sets the mask of the whole process: a read-and-restore in one thread would give
    # a file that another thread creates meanwhile the wrong mode.
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from bpe.files.atomic import atomic_write, atomic_write_bytes, atomic_write_text

    mask = os.umask(0o022)  # read it (and restore it) before the writes
    os.umask(mask)

    def no_umask(_):
        raise AssertionError("the atomic writer changed the process umask")

    monkeypatch.setattr(os, "umask", no_umask)
    writers = [lambda p: atomic_write_text(p, "text"), lambda p: atomic_write_bytes(p, b"\0\1"),
               lambda p: atomic_write(p, lambda tmp: Path(tmp).write_text("by callback"))]
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda k: writers[k % 3](tmp_path / f"f{k}"), range(48)))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"f{k}" for k in range(48))
    assert {p.stat().st_mode & 0o777 for p in paths} == {0o666 & ~mask}
    assert (tmp_path / "f2").read_text() == "by callback" and (tmp_path / "f1").read_bytes() == b"\0\1"


def test_rename_is_followed_by_a_folder_fsync(tok4, tmp_path, monkeypatch):
    import stat

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)), real(fd)))
    tok4.save(tmp_path / "t.json")
    assert synced == [False, True]  # the file, then its folder after the rename


def test_huggingface_export_keeps_special_ids_past_a_gap(tmp_path):
    """`tokenizers` numbers an added token that model.vocab lacks after the vocabulary, whatever
    added_tokens says: the export lists each special token in model.vocab with its id."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = Tokenizer.train_from_iterator(["abcabc hello hello world"] * 20, vocab_size=262,
                                        special_tokens={"<x>": 1000, "<y>": 700})
    tok.save_huggingface(tmp_path / "t.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    text = "hello<x> world<y>abc"
    assert hf.encode(text).ids == tok.encode(text, allowed_special="all")
    back = Tokenizer.from_huggingface(tmp_path / "t.json")
    assert back.special_tokens == tok.special_tokens and back.mergeable_ranks == tok.mergeable_ranks


@pytest.mark.parametrize("edit, said", [
    (lambda d: d["added_tokens"][0].update(lstrip=True), "'<x>' lstrip"),
    (lambda d: d["added_tokens"][0].update(single_word=True), "'<x>' single_word"),
    (lambda d: d["model"].update(dropout=0.1), "model.dropout 0.1 is not applied"),
    (lambda d: d.update(post_processor={"type": "TemplateProcessing", "single": [], "pair": [],
                                        "special_tokens": {}}), "post_processor 'TemplateProcessing'"),
])
def test_huggingface_options_we_do_not_apply_are_said(tmp_path, edit, said):
    tok = Tokenizer.train_from_iterator(["abcabc hello"] * 20, vocab_size=260, special_tokens=["<x>"])
    tok.save_huggingface(tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text())
    edit(d)
    (tmp_path / "t.json").write_text(json.dumps(d))
    with pytest.warns(UserWarning, match=regex.escape(said)):
        assert Tokenizer.from_huggingface(tmp_path / "t.json").encode("abc") == tok.encode("abc")


def test_saving_over_a_folder_is_refused_naming_it(tok4, tmp_path):
    (tmp_path / "d").mkdir()
    for save in (tok4.save, tok4.save_huggingface):
        with pytest.raises(IsADirectoryError, match=r"cannot write '.*d': it is a folder"):
            save(tmp_path / "d")
        with pytest.raises(IsADirectoryError, match="cannot write '.': it is a folder"):
            save("")
    assert os.listdir(tmp_path / "d") == [] and sorted(os.listdir(tmp_path)) == ["d"]
