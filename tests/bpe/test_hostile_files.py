"""Hostile tokenizer files and flags: refused in bounded time and memory with one line naming the
file and the field, never a traceback (issue 32, items 3-7, the bpe side)."""
import copy
import json
import tracemalloc

import pytest
import regex

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, Tokenizer
from bpe.cli import main
from bpe.files.huggingface import huggingface_dict, onig_pattern
from bpe.split.redos import PatternTimeout, check_pattern

TEXT = "The cat's 12345 dogs\n\n  sat  on 3.14 mats! 日本語 Straße 🎉\r\n"
HOSTILE = r"(?:a+)+$|[\s\S]"

# Split patterns of real files: LLaMA-3's and Qwen2's tokenizer.json, DeepSeek-V3's three Splits.
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK = [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
            r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
            r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]
REAL = {"gpt2": GPT2_PATTERN, "cl100k": GPT4_PATTERN, "o200k": O200K_PATTERN, "llama3": LLAMA3, "qwen2": QWEN2,
        **{f"deepseek{k}": p + r"|[\s\S]" for k, p in enumerate(DEEPSEEK)},
        **{f"onig-{k}": onig_pattern(p) for k, p in [("cl100k", GPT4_PATTERN), ("o200k", O200K_PATTERN)]}}


@pytest.fixture(scope="module")
def small():
    return Tokenizer.train_from_iterator(["the cat sat on the mat, the dog 123 sat on the log\n" * 20],
                                         vocab_size=290, special_tokens=["<|endoftext|>"], workers=1)


def cli(args, capsys):
    """(exit code, stderr) of `bpe ARGS`; stderr of a refusal is one line and no traceback."""
    rc = main(args)
    err = capsys.readouterr().err
    return rc, err


def refused(args, capsys, *needles):
    rc, err = cli(args, capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


# ---- item 3: split patterns that backtrack catastrophically -----------------------------------

@pytest.mark.parametrize("name", sorted(REAL))
def test_real_split_patterns_pass_the_checker_and_encode(name):
    pattern = REAL[name]
    check_pattern(pattern)
    tok = Tokenizer.from_merges([], pattern)
    assert tok.decode(tok.encode(TEXT)) == TEXT
    assert len(tok.encode(TEXT)) == len(TEXT.encode())  # no merges: one id per byte


@pytest.mark.parametrize("pattern", [
    HOSTILE, r"(?:a*)*b|[\s\S]", r"(?:a|aa)+$|[\s\S]", r"(?:a|a)+b|[\s\S]", r"(?:\s|\S)+x|[\s\S]",
    r"(?:ab?)+c|[\s\S]", r"(?:a{1,3})+b|[\s\S]", r"(?:a+){2,9}b|[\s\S]", r"(?:(?:a)+)+|[\s\S]",
    r"(?=(?:a+)+b)|[\s\S]", r"(?>(?:a+)+b)|[\s\S]", r"(?i:(?:a+)+$)|[\s\S]", r"(?:a*?)*?b|[\s\S]",
    r"[[](?:a+)+$|]", r"[]](?:a+)+$|[\s\S]",  # a class that ends where `regex` ends it
    r"(?R)?a|[\s\S]", r"(?:ab){e<=1}|[\s\S]", r"(?x) a+ | [\s\S]",
    "a" * 6000,
])
def test_backtracking_patterns_are_refused_by_the_checker(pattern):
    with pytest.raises(ValueError, match="refused"):
        Tokenizer.from_merges([], pattern)


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?P<n>a)(?P=n)", r"(a)(?:b\g<1>)"])
def test_backreferences_are_refused(pattern):
    with pytest.raises(ValueError, match="backreference"):
        check_pattern(pattern)


@pytest.mark.parametrize("pattern", [r"(?:a|b)++|[\s\S]", r"(?>a|aa)+|[\s\S]", r"(?:ab)+|[\s\S]",
                                     r"[[:alpha:](?:a+)+|]", r"(?V1)[[a-z]--[aeiou]]+|[\s\S]", r"\X+"])
def test_patterns_that_cannot_backtrack_into_a_repeat_are_accepted(pattern):
    check_pattern(pattern)


def _hostile_json(tmp_path, small):
    d = json.loads((tmp_path / "ok.json").read_text()) if (tmp_path / "ok.json").exists() else None
    if d is None:
        small.save(tmp_path / "ok.json")
        d = json.loads((tmp_path / "ok.json").read_text())
    d["pattern"] = HOSTILE
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(d))
    return p


def test_hostile_pattern_in_every_file_kind_is_refused_naming_the_field(small, tmp_path, capsys):
    p = _hostile_json(tmp_path, small)
    refused(["encode", "-t", str(p), "--text", "a" * 40 + "b"], capsys, "hostile.json: field 'pattern'", "refused")
    small.save_tiktoken(tmp_path / "t.tiktoken")
    side = tmp_path / "t.tiktoken.json"
    side.write_text(side.read_text().replace(json.dumps(small.pattern)[1:-1], json.dumps(HOSTILE)[1:-1]))
    refused(["encode", "-t", str(tmp_path / "t.tiktoken"), "--text", "ab"], capsys,
            "t.tiktoken.json: field 'pat_str'", "refused")
    hf = huggingface_dict(small)
    hf["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = HOSTILE
    (tmp_path / "tokenizer.json").write_text(json.dumps(hf))
    with pytest.raises(ValueError, match=r"tokenizer.json: field 'pre_tokenizer.pretokenizers\[0\].pattern.Regex'"):
        Tokenizer.from_huggingface(tmp_path / "tokenizer.json")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a" * 40 + "b")
    for cmd in (["train", "--out", str(tmp_path / "x.json")], ["count", "--out", str(tmp_path / "counts")]):
        refused(cmd + ["--input", str(corpus), "--pattern", HOSTILE], capsys, "refused", "(?:a+)+")


def test_a_pattern_past_its_time_budget_raises_naming_it(monkeypatch):
    import bpe.split.redos as redos

    slow = r"a*a*a*b|[\s\S]"  # repeats in sequence: the rule allows them, the budget bounds them
    tok = Tokenizer.from_merges([], slow)
    monkeypatch.setattr(redos, "BUDGET_SECONDS", 0.01)
    monkeypatch.setattr(redos, "BUDGET_PER_CHAR", 0.0)
    with pytest.raises(PatternTimeout, match=r"split pattern 'a\*a\*a\*b.* took more than"):
        tok.encode("a" * 3000)


# ---- items 4 and 6: ids and sizes against what the file holds --------------------------------

def _tiktoken(small, tmp_path, extra_line):
    small.save_tiktoken(tmp_path / "t.tiktoken")
    (tmp_path / "t.tiktoken.json").unlink()
    p = tmp_path / "t.tiktoken"
    p.write_text(p.read_text() + extra_line + "\n")
    return p


@pytest.mark.parametrize("rank, needle", [("1" + "0" * 30, "is beyond"), ("100000000", "is beyond"),
                                          ("٣٠٠", "ASCII digits"), ("-5", "non-negative")])
def test_tiktoken_ranks_are_ascii_and_near_the_number_of_lines(small, tmp_path, capsys, rank, needle):
    p = _tiktoken(small, tmp_path, f"eHl6enk= {rank}")
    tracemalloc.start()
    try:
        err = refused(["encode", "-t", str(p), "--text", "ab"], capsys, "t.tiktoken, line", needle)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert "appears twice" not in err and peak < 8 << 20


def test_cl100k_ranks_pass_the_bound(cl100k_path):
    tok = Tokenizer.from_tiktoken(cl100k_path, special_tokens={"<|endoftext|>": 100257, "<|endofprompt|>": 100276})
    assert tok.vocab_size == 100277


def _json(small, tmp_path, edit):
    small.save(tmp_path / "ok.json")
    d = json.loads((tmp_path / "ok.json").read_text())
    edit(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("value, needle", [
    (10 ** 8, "is 100000000, outside the ids 0.."), (10 ** 18, "outside the ids"), (-1, "outside the ids"),
    (1.5, "is 1.5 (a number), expected an int id"), (1.0, "is 1.0 (a number), expected an int id"),
    (True, "is true or false, expected an int id"), ("289", "is a string, expected an int id")])
def test_special_ids_are_bounded_by_the_vocabulary(small, tmp_path, capsys, value, needle):
    p = _json(small, tmp_path, lambda d: d["special_tokens"].update({"<|endoftext|>": value}))
    tracemalloc.start()
    try:
        refused(["encode", "-t", str(p), "--text", "ab"], capsys, "bad.json: field 'special_tokens['<|endoftext|>']'",
                needle)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 8 << 20


def test_a_huge_id_given_to_the_library_is_refused():
    with pytest.raises(ValueError, match=r"special token '<x>' is 100000000, outside the ids"):
        Tokenizer.from_merges([], special_tokens={"<x>": 10 ** 8})


# ---- items 5 and 6: tokenizer.json with wrong types and values ---------------------------------

def _set(path, value):
    def edit(d):
        *parents, last = path
        for k in parents:
            d = d[k]
        d[last] = value
    return edit


def _vocab_id(token, value):
    return lambda d: d["model"]["vocab"].update({token: value})


HF_CASES = [
    (_set(["model"], "BPE"), "field 'model' is a string, expected an object"),
    (_set(["model", "type"], ["BPE"]), "field 'model.type' is a list"),
    (_set(["normalizer"], "NFC"), "field 'normalizer' is a string, expected an object or null"),
    (_set(["normalizer"], [1]), "field 'normalizer' is a list"),
    (_set(["normalizer"], {"type": 3}), "field 'normalizer.type' is 3 (an int), expected a string"),
    (_set(["pre_tokenizer", "pretokenizers", 0, "pattern"], "\\s+"),
     "field 'pre_tokenizer.pretokenizers[0].pattern' is a string, expected an object"),
    (_set(["pre_tokenizer", "pretokenizers", 0, "pattern"], {"String": " "}), "only a Split with a 'Regex'"),
    (_set(["pre_tokenizer", "pretokenizers", 0, "pattern"], {"Regex": 5}), "pattern.Regex' is 5 (an int)"),
    (_set(["pre_tokenizer", "pretokenizers"], "x"), "field 'pre_tokenizer.pretokenizers' is a string"),
    (_set(["pre_tokenizer", "pretokenizers", 1], 7), "field 'pre_tokenizer.pretokenizers[1]' is 7"),
    (_set(["pre_tokenizer", "pretokenizers", 1, "use_regex"], "no"), "pretokenizers[1].use_regex' is a string"),
    (_set(["pre_tokenizer"], 5), "field 'pre_tokenizer' is 5 (an int)"),
    (_vocab_id("at", "256"), "field 'model.vocab['at']' is a string, expected an int id"),
    (_vocab_id("at", -3), "field 'model.vocab['at']' is -3, outside the ids"),
    (_vocab_id("at", 1.5), "field 'model.vocab['at']' is 1.5 (a number)"),
    (_vocab_id("at", 256.0), "field 'model.vocab['at']' is 256.0 (a number)"),
    (_vocab_id("at", False), "field 'model.vocab['at']' is true or false"),
    (_vocab_id("at", 10 ** 18), "is 1000000000000000000, outside the ids 0.."),
    (_vocab_id("at", 257), "has id 257, which"),
    (_set(["model", "vocab"], []), "field 'model.vocab' is a list, expected an object"),
    (_set(["model", "merges"], 5), "field 'model.merges' is 5 (an int), expected a list or null"),
    (_set(["model", "merges"], {"a": 1}), "field 'model.merges' is an object"),
    (_set(["model", "merges", 0], 5), "field 'model.merges[0]' must be"),
    (_set(["model", "merges", 0], "zz q"), "field 'model.merges[0]' uses or makes 'zz', which is not in model.vocab"),
    (_set(["added_tokens", 0, "id"], 10 ** 8), "field 'added_tokens[0].id' is 100000000, outside the ids"),
    (_set(["added_tokens", 0, "id"], "1"), "field 'added_tokens[0].id' is a string, expected an int"),
    (_set(["added_tokens", 0], "x"), "field 'added_tokens[0]' is a string, expected an object"),
    (_set(["added_tokens"], {"a": 1}), "field 'added_tokens' is an object, expected a list or null"),
]


@pytest.mark.parametrize("k", range(len(HF_CASES)))
def test_wrong_types_in_tokenizer_json_name_the_field(small, tmp_path, k):
    edit, needle = HF_CASES[k]
    d = copy.deepcopy(huggingface_dict(small))
    edit(d)
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(d))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as e:
            Tokenizer.from_huggingface(p)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert str(e.value).startswith(f"{p}: ") and needle in str(e.value), str(e.value)
    assert peak < 8 << 20


def test_merges_naming_unknown_tokens_are_refused_as_tokenizers_does(small, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    d = huggingface_dict(small)
    d["model"]["merges"].append("Ġthe Ġzz")
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(d))
    with pytest.raises(Exception):
        tokenizers.Tokenizer.from_file(str(p))
    with pytest.raises(ValueError, match="uses or makes 'Ġzz', which is not in model.vocab"):
        Tokenizer.from_huggingface(p)


def test_a_key_given_twice_is_refused(small, tmp_path):
    small.save(tmp_path / "ok.json")
    text = (tmp_path / "ok.json").read_text().replace('"version": 1,', '"version": 1, "version": 1,')
    (tmp_path / "twice.json").write_text(text)
    with pytest.raises(ValueError, match="twice.json: key 'version' appears twice"):
        Tokenizer.load(tmp_path / "twice.json")


@pytest.mark.parametrize("edit, needle", [
    (_set(["merges"], {"a": 1}), "field 'merges' is an object, expected a list"),
    (_set(["special_tokens"], ["<x>"]), "field 'special_tokens' is a list, expected an object"),
    (_set(["pattern"], ["x"]), "field 'pattern' is a list, expected a string"),
    (_set(["merges", 0], [97, 1.0]), "field 'merges[0][1]' is 1.0 (a number)"),
    (_set(["merges", 0], [97, True]), "field 'merges[0][1]' is true or false"),
])
def test_wrong_types_in_our_json_name_the_field(small, tmp_path, capsys, edit, needle):
    p = _json(small, tmp_path, edit)
    refused(["encode", "-t", str(p), "--text", "ab"], capsys, f"{p}: ", needle)


# ---- item 7: messages that say what is wrong ---------------------------------------------------

def test_a_folder_or_a_device_given_as_a_tokenizer_file_says_so(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder, not a tokenizer file"):
        Tokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="'/dev/zero' is not a regular file"):  # not read forever
        Tokenizer.load("/dev/zero")
    with pytest.raises(ValueError, match="'/dev/zero' is not a regular file"):
        Tokenizer.from_tiktoken("/dev/zero")


def test_a_tiktoken_file_given_as_our_json_says_how_to_load_it(small, tmp_path):
    small.save_tiktoken(tmp_path / "t.tiktoken")
    (tmp_path / "t.tiktoken").rename(tmp_path / "t.json")
    with pytest.raises(ValueError, match="t.json: this looks like a .tiktoken file .* Tokenizer.from_tiktoken"):
        Tokenizer.load(tmp_path / "t.json")


def test_a_file_name_that_is_not_utf8_is_named(small, tmp_path, capsys):
    name = tmp_path / "caf\udce9.json"  # the byte 0xE9, as the shell passes it
    small.save(name)
    rc, err = cli(["encode", "-t", str(name), "--text", "ab"], capsys)
    assert rc == 0
    name.write_text("{")
    refused(["encode", "-t", str(name), "--text", "ab"], capsys, "caf\\xe9.json: not valid JSON")


def test_hostile_json_family_gives_no_other_exception(small, tmp_path):
    """Every field of a small tokenizer.json set to every kind of wrong value: our ValueError,
    naming the file, and nothing else."""
    base = huggingface_dict(small)
    paths = [["model"], ["model", "type"], ["model", "vocab"], ["model", "merges"], ["model", "byte_fallback"],
             ["normalizer"], ["pre_tokenizer"], ["pre_tokenizer", "type"], ["pre_tokenizer", "pretokenizers"],
             ["added_tokens"], ["added_tokens", 0], ["added_tokens", 0, "id"], ["added_tokens", 0, "content"]]
    bad = [None, True, 1.5, -1, "x", [], {}, [1], {"a": 1}, 10 ** 30]
    p = tmp_path / "tokenizer.json"
    n = 0
    for path in paths:
        for v in bad:
            d = copy.deepcopy(base)
            _set(path, v)(d)
            p.write_text(json.dumps(d))
            try:
                Tokenizer.from_huggingface(p)
            except ValueError as e:
                assert str(e).startswith(str(p)), (path, v, e)
                n += 1
    assert n > 100
    assert regex.compile(GPT4_PATTERN)  # the module under test never replaced the engine


@pytest.mark.parametrize("edit, needle", [
    (_set(["special_tokens"], {"<a>": 289, "<b>": 289}), "field 'special_tokens['<b>']' is id 289, which another"),
    (_set(["special_tokens"], {"<a>": 97}), "special token '<a>' has id 97, which a mergeable token already uses"),
])
def test_duplicate_ids_in_our_json_are_refused(small, tmp_path, capsys, edit, needle):
    refused(["encode", "-t", str(_json(small, tmp_path, edit)), "--text", "ab"], capsys, "bad.json: ", needle)


def test_duplicate_ids_in_a_token_list_name_both_rows(small, tmp_path):
    small.save_tiktoken(tmp_path / "t.tiktoken")
    Tokenizer.from_tiktoken(tmp_path / "t.tiktoken").save(tmp_path / "ok.json")
    d = json.loads((tmp_path / "ok.json").read_text())
    d["tokens"][5][0] = d["tokens"][4][0]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"bad.json: field 'tokens\[5\]\[0\]' is id 4, which tokens\[4\] has too"):
        Tokenizer.load(tmp_path / "bad.json")


BYTES = {bytes([i]): i for i in range(256)}


@pytest.mark.parametrize("ranks, needle", [
    ({**BYTES, b"ab": -1}, "the smallest mergeable token id is -1"),
    ({**BYTES, b"": 256}, "mergeable token b'' (id 256) must be non-empty bytes"),
    ({**BYTES, "ab": 256}, "mergeable token 'ab' (id 256) must be non-empty bytes"),
])
def test_ranks_the_files_could_not_hold_are_refused_by_the_constructor(ranks, needle):
    with pytest.raises(ValueError, match=regex.escape(needle)):
        Tokenizer(ranks)


@pytest.mark.parametrize("chunks, needle", [
    ({"ab": 10 ** 30}, "chunk 'ab' has count 1000000000000000000000000000000; counts are ints from 1 to 2**53 - 1"),
    ({"cd": 2 ** 53 + 1, "ab": 2 ** 53}, "chunk 'cd' has count 9007199254740993; counts are ints from 1 to 2**53 - 1"),
    ({"": 5}, "an empty chunk (with count 5)"),
])
def test_count_files_out_of_bounds_name_the_chunk(tmp_path, capsys, chunks, needle):
    from bpe.train.counts_file import save_counts

    save_counts(tmp_path / "c.0", chunks, GPT4_PATTERN)
    assert main(["train", "--counts", str(tmp_path / "c.0"), "--vocab-size", "300",
                 "--out", str(tmp_path / "o.json")]) != 0
    assert needle in capsys.readouterr().err and not (tmp_path / "o.json").exists()


def test_count_files_are_bounded_where_training_sums_their_counts_exactly(tmp_path, capsys):
    # the early merges sum pair counts as float64: exact while the text counted stays below 2**53 bytes
    from bpe.train.counts_file import save_counts

    save_counts(tmp_path / "c.0", {"cd": 2 ** 51 - 1, "ab": 2 ** 51 - 2}, GPT4_PATTERN)  # 2**53 - 6 bytes
    tok = Tokenizer.train_from_counts(tmp_path / "c.0", vocab_size=257)
    assert tok.merges == [(ord("c"), ord("d"))]
    for k in (1, 2):  # each file in bounds, the two together not
        save_counts(tmp_path / f"h.{k}", {"ab": 2 ** 51}, GPT4_PATTERN)
    assert main(["train", "--counts", str(tmp_path / "h.*"), "--vocab-size", "257",
                 "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert f"the count files {tmp_path / 'h.1'}, {tmp_path / 'h.2'} stand for {2 ** 53:,} bytes of text" in err
    assert not (tmp_path / "o.json").exists()


def test_loose_arguments_are_refused_by_name(tmp_path):
    tok = Tokenizer.from_merges([(97, 98)])
    with pytest.raises(ValueError, match=r"merge 0 is \(1.0, 2\), not a pair of int ids"):
        Tokenizer.from_merges([(1.0, 2)])
    with pytest.raises(ValueError, match=r"merge 1 is \(1, 2, 3\), not a pair"):
        Tokenizer.from_merges([(97, 98), (1, 2, 3)])
    with pytest.raises(TypeError, match="got str"):
        tok.decode("123")
    with pytest.raises(TypeError, match="got None"):
        Tokenizer.train_from_iterator(None)
    with pytest.raises(FileNotFoundError, match="an input path is empty"):
        Tokenizer.train("")


def test_a_link_to_nothing_in_a_folder_is_left_out(tmp_path):
    from bpe.files.corpus import expand_inputs

    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    assert expand_inputs(tmp_path) == expand_inputs(str(tmp_path / "*")) == [tmp_path / "a.txt"]
    with pytest.raises(FileNotFoundError, match="broken' does not exist"):
        expand_inputs(tmp_path / "broken")  # named itself: an error
