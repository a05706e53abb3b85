"""The incremental trainer learns exactly the merges of the naive trainer, and checks its input."""
import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, Tokenizer
from bpe.train.chunk_counter import ChunkCounter
from bpe.train.merge_learner import train_merges

from .reference import naive_train

# Small alphabets make ties between pair counts common.
tie_text = st.text(alphabet="ab \n", min_size=1, max_size=40)
rich_text = st.text(alphabet=st.sampled_from(list("aab  \n\t'sé1:/") + ["日", "🎉", "\r"]), min_size=1, max_size=60)


def fast_merges(texts, n, pattern):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "fewer merges than asked" is expected on tiny corpora
        return Tokenizer.train_from_iterator(texts, vocab_size=256 + n, pattern=pattern, progress=False).merges


@given(texts=st.lists(tie_text, min_size=1, max_size=6), n=st.integers(1, 40))
def test_fast_trainer_matches_naive_trainer_on_tie_heavy_corpora(texts, n):
    assert fast_merges(texts, n, GPT2_PATTERN) == naive_train(texts, n, GPT2_PATTERN)


@given(texts=st.lists(rich_text, min_size=1, max_size=5), n=st.integers(1, 60),
       pattern=st.sampled_from([GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN]))
def test_fast_trainer_matches_naive_trainer_on_unicode_corpora(texts, n, pattern):
    assert fast_merges(texts, n, pattern) == naive_train(texts, n, pattern)


@given(texts=st.lists(tie_text, min_size=1, max_size=6), n=st.integers(1, 30), minf=st.integers(1, 6))
def test_min_frequency_stops_where_the_naive_trainer_stops(texts, n, minf):
    counts = ChunkCounter(GPT2_PATTERN)
    for t in texts:
        counts.add(t)
    assert train_merges(counts.result(), n, min_frequency=minf) == naive_train(texts, n, GPT2_PATTERN, minf)


def test_ties_go_to_the_smallest_pair():
    # Chunks 'cd', ' ab', ' cd', ' ab': pairs (32, 97), (97, 98) and (99, 100) all occur
    # twice; the smallest, (32, 97), goes first.
    tok = Tokenizer.train_from_iterator(["cd ab cd ab"], vocab_size=258, pattern=GPT2_PATTERN)
    assert tok.merges[0] == (ord(" "), ord("a"))
    tok = Tokenizer.train_from_iterator(["cd", "ab", "cd", "ab"], vocab_size=257, pattern=GPT2_PATTERN)
    assert tok.merges == [(ord("a"), ord("b"))]


def test_overlapping_pairs_merge_left_to_right():
    tok = Tokenizer.train_from_iterator(["aaaaa"], vocab_size=258, pattern=GPT2_PATTERN)
    # aaaaa: (a,a) x4 -> [aa, aa, a]; then (aa, aa) x1 and (aa, a) x1 tie -> (256, 97) < (256, 256)
    assert tok.merges == [(97, 97), (256, 97)]
    # Encoding merges by rank like tiktoken: [aa,a,a,a] -> [aa,aa,a] -> [aa,aaa].
    assert tok.encode("aaaaa") == [256, 257]


def test_ids_layout_bytes_then_merges_then_specials():
    tok = Tokenizer.train_from_iterator(["hello hello world"] * 3, vocab_size=262,
                                        special_tokens=["<|endoftext|>", "<|pad|>"])
    assert tok.n_merges == 4
    assert tok.special_tokens == {"<|endoftext|>": 260, "<|pad|>": 261}
    assert tok.vocab_size == 262
    assert [tok.token_bytes(i) for i in range(3)] == [b"\x00", b"\x01", b"\x02"]
    assert tok.token_bytes(256) == tok.token_bytes(tok.merges[0][0]) + tok.token_bytes(tok.merges[0][1])


def test_explicit_special_ids():
    tok = Tokenizer.train_from_iterator(["hello hello"], vocab_size=260, special_tokens={"<|eot|>": 1000})
    assert tok.special_tokens == {"<|eot|>": 1000}
    assert tok.encode("<|eot|>", allowed_special="all") == [1000]


def test_same_corpus_same_tokenizer(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("the cat sat on the mat. the dog sat on the log.\n" * 20)
    a = Tokenizer.train(str(f), vocab_size=300)
    b = Tokenizer.train([f], vocab_size=300, workers=1)
    assert a.merges == b.merges


def test_files_folders_and_globs(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("alpha beta gamma\n")
    (tmp_path / "d" / "y.txt").write_text("beta gamma delta\n")
    (tmp_path / "z.md").write_text("gamma delta epsilon\n")
    by_folder = Tokenizer.train([tmp_path / "d", tmp_path / "z.md"], vocab_size=280)
    by_glob = Tokenizer.train([str(tmp_path / "d" / "*.txt"), str(tmp_path / "z.md")], vocab_size=280)
    texts = ["alpha beta gamma\n", "beta gamma delta\n", "gamma delta epsilon\n"]
    by_iter = Tokenizer.train_from_iterator(texts, vocab_size=280)
    assert by_folder.merges == by_glob.merges == by_iter.merges


def test_parallel_counting_equals_serial(tmp_path, monkeypatch):
    import bpe.files.corpus
    import bpe.train.parallel_count as count

    monkeypatch.setattr(count, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(bpe.files.corpus, "BLOCK_BYTES", 300)
    lines = [f"def f{i}(x):\n    return x * {i} + 'é'\n\n" for i in range(200)]
    f = tmp_path / "big.py"
    f.write_text("".join(lines))
    serial = Tokenizer.train(f, vocab_size=400, workers=1)
    parallel = Tokenizer.train(f, vocab_size=400, workers=2)
    assert parallel.merges == serial.merges
    it_parallel = Tokenizer.train_from_iterator(iter(lines), vocab_size=400, workers=2)
    it_serial = Tokenizer.train_from_iterator(lines, vocab_size=400, workers=1)
    assert it_parallel.merges == it_serial.merges
    list_parallel = Tokenizer.train_from_iterator(lines, vocab_size=400, workers=2)  # forked, by index
    assert list_parallel.merges == it_serial.merges
    # three processes claiming 24 shares of the list, some documents repeated
    docs = lines + lines[:50]
    serial_counts = count.count_texts(docs, GPT4_PATTERN, workers=1)
    assert count.count_texts(docs, GPT4_PATTERN, workers=3) == serial_counts
    # the tables the processes send for training, joined: the same counts
    want = {c.encode(): n for c, n in serial_counts.items()}
    assert _table_counts(count.count_texts(docs, GPT4_PATTERN, workers=3, table=True)) == want
    assert _table_counts(count.count_files([f], GPT4_PATTERN, workers=2, table=True)) == {
        c.encode(): n for c, n in count.count_files([f], GPT4_PATTERN, workers=1).items()}
    with pytest.raises(TypeError, match="must be str, got bytes at item 3"):
        Tokenizer.train_from_iterator(lines[:3] + [b"x"], vocab_size=400, workers=2)


# ---- bad input ------------------------------------------------------------------


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.train_from_iterator([], vocab_size=300)
    f = tmp_path / "empty.txt"
    f.write_text("")
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.train(f, vocab_size=300)


def test_vocab_too_small_is_an_error():
    with pytest.raises(ValueError, match=r"vocab_size=257 is too small.*258"):
        Tokenizer.train_from_iterator(["abc"], vocab_size=257, special_tokens=["<a>", "<b>"])


def test_vocab_of_exactly_bytes_and_specials_has_no_merges():
    tok = Tokenizer.train_from_iterator(["abc"], vocab_size=257, special_tokens=["<a>"])
    assert tok.n_merges == 0 and tok.special_tokens == {"<a>": 256}
    assert tok.encode("abc") == [97, 98, 99]


def test_duplicate_special_tokens_are_an_error():
    with pytest.raises(ValueError, match="duplicate special token '<\\|endoftext\\|>'"):
        Tokenizer.train_from_iterator(["abc"], vocab_size=300, special_tokens=["<|endoftext|>", "<|endoftext|>"])


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        Tokenizer.train(tmp_path / "nope.txt", vocab_size=300)
    with pytest.raises(FileNotFoundError, match="matches no file"):
        Tokenizer.train(str(tmp_path / "*.nothing"), vocab_size=300)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file_is_named(tmp_path):
    f = tmp_path / "secret.txt"
    f.write_text("abc")
    f.chmod(0)
    with pytest.raises(OSError, match="secret.txt"):
        Tokenizer.train(f, vocab_size=300)


def test_unreadable_path_is_named(tmp_path):
    # A folder where a file is expected to be read: reading fails, and the error names it.
    from bpe.files.corpus import read_blocks

    with pytest.raises(OSError, match="cannot read corpus file"):
        list(read_blocks(tmp_path))


def test_non_utf8_bytes_are_replaced_with_a_warning(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("café café café\n".encode("latin-1"))
    with pytest.warns(UnicodeWarning, match=r"latin1.txt.*byte offset 3"):
        tok = Tokenizer.train(f, vocab_size=270)
    assert "\ufffd".encode() in {tok.token_bytes(i) for i in range(tok.vocab_size)} or tok.n_merges > 0


def test_bad_pattern_is_named():
    with pytest.raises(ValueError, match="neither a known name"):
        Tokenizer.train_from_iterator(["abc"], vocab_size=300, pattern="gpt5(")


def test_non_string_texts_are_rejected():
    with pytest.raises(TypeError, match="must be str"):
        Tokenizer.train_from_iterator([b"bytes"], vocab_size=300)


def test_special_token_text_in_the_corpus_is_not_learned_from():
    text = "<|endoftext|>".join(["hello world"] * 50)
    tok = Tokenizer.train_from_iterator([text], vocab_size=300, special_tokens=["<|endoftext|>"])
    learned = {tok.token_bytes(256 + k) for k in range(tok.n_merges)}
    assert not any(b"<" in t or b"|" in t for t in learned)
    want = Tokenizer.train_from_iterator(["hello world"] * 50, vocab_size=300, special_tokens=["<|endoftext|>"])
    assert tok.merges == want.merges


def test_many_non_utf8_files_give_one_warning(tmp_path):
    for k in range(3):
        (tmp_path / f"f{k}.txt").write_bytes(b"ok \xff\xfe text\n")
    with pytest.warns(UnicodeWarning) as record:
        Tokenizer.train(tmp_path, vocab_size=260)
    msgs = [str(w.message) for w in record if issubclass(w.category, UnicodeWarning)]
    assert len(msgs) == 1 and msgs[0].startswith("3 corpus files") and "f0.txt" in msgs[0]


@given(chunks=st.dictionaries(st.binary(min_size=2, max_size=12), st.integers(1, 5), max_size=30))
@example(chunks={b"abab": 2, b"xab": 1, b"aaa": 3})
def test_array_index_lists_the_chunks_of_each_pair_once_in_order(chunks):
    from bpe.train.early_merges import ArrayMerges
    from bpe.train.chunk_table import ChunkTable

    table = ChunkTable.of(chunks)
    table = table.keep(table.sizes >= 2)
    early = ArrayMerges(table.data, table.sizes, table.counts)
    words = [c.decode("latin-1") for c in chunks if len(c) >= 2]
    counts = [chunks[c] for c in chunks if len(c) >= 2]
    want_pairs, want_where = {}, {}
    for wi, w in enumerate(words):
        for p in map("".join, zip(w, w[1:])):
            want_pairs[p] = want_pairs.get(p, 0) + counts[wi]
            if wi not in want_where.setdefault(p, []):
                want_where[p].append(wi)
    assert dict(early.pairs) == {ord(p[0]) << 21 | ord(p[1]): n for p, n in want_pairs.items()}
    assert early.hand_over() == words
    assert {p: early.chunks_of(ord(p[0]) << 21 | ord(p[1])) for p in want_where} == want_where


@given(chunks=st.dictionaries(st.text(alphabet="aab cé", min_size=1, max_size=14), st.integers(1, 4), max_size=25),
       n=st.integers(1, 40), minf=st.integers(1, 3))
@example(chunks={"abab": 3, "ba": 2, "cababab": 1}, n=4, minf=1)  # adjacent occurrences of a pair
@example(chunks={"aaaaa": 2, "baaab": 1, "aa": 1}, n=4, minf=1)     # runs of a pair of one token
def test_merges_are_the_same_in_numpy_and_in_the_python_loop(chunks, n, minf):
    import bpe.train.early_merges as early_merges

    # array_min 0: every merge in early_merges (by arrays, few 0, or on their memoryviews, few
    # large; the pairs made sorted by radix, radix 0, and counted in NumPy, sides 0, or in
    # Python, sides large); inf: the loop from the first; 3: a handover midway
    runs = []
    for m, few, radix, sides in ((0, 0, 0, 0), (0, 0, 10**9, 0), (0, 0, 0, 10**9), (0, 10**9, 0, 0),
                                 (math.inf, 0, 0, 0), (3, 0, 0, 0), (3, 10**9, 0, 0)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(early_merges, "FEW", few)
            mp.setattr(early_merges, "RADIX_MIN", radix)
            mp.setattr(early_merges, "FEW_SIDES", sides)
            runs.append(train_merges(chunks, n, minf, array_min=m))
    assert all(run == runs[0] for run in runs)
    texts = [c for c, k in chunks.items() for _ in range(k)]
    assert runs[0] == naive_train(texts, n, r"(?s).+", minf)  # each text one chunk


@given(chunks=st.dictionaries(st.text(max_size=6), st.integers(0, 3), max_size=20))
@example(chunks={"a\udcff": 1, "\ud835": 2, "\udfce x": 1, "é": 1, "": 3})  # escaped byte, lone surrogates
@example(chunks={b"\xff\xfe": 2, "ab": 1})                                  # bytes keys beside str ones
@example(chunks={"a\uffff": 2, "\uffff": 1, "b": 0, "": 1, "cd": 3})         # the joining separator in chunks
@example(chunks={"ab": 0, "": 2, "cd": 1})                                  # a dropped chunk inside the text
def test_a_chunk_table_is_each_chunks_utf8_end_to_end(chunks):
    from bpe.text import utf8
    from bpe.train.chunk_table import ChunkTable

    kept = [(utf8(c) if isinstance(c, str) else c, n) for c, n in chunks.items() if n > 0]
    kept = [(b, n) for b, n in kept if len(b) >= 1]
    t = ChunkTable.of(chunks)
    data, sizes, counts = t.data, t.sizes, t.counts
    assert data.tobytes() == b"".join(b for b, _ in kept)
    assert sizes.tolist() == [len(b) for b, _ in kept] and counts.tolist() == [n for _, n in kept]


@given(chunks=st.dictionaries(st.binary(max_size=20), st.integers(1, 5), max_size=30), n=st.integers(1, 40))
@example(chunks={b"abcdefgh1": 1, b"abcdefgh": 2, b"abcdefgh0": 3, b"a": 1, b"": 2}, n=5)  # ties past 8 bytes
@example(chunks={b" b": 1, b"c": 2, b" ": 3, b"b": 1, b"  a": 2}, n=3)                    # leading spaces
def test_a_table_by_prefix_holds_the_same_chunks_in_order_and_trains_the_same(chunks, n):
    from bpe.train.chunk_table import ChunkTable

    t = ChunkTable.of(chunks)
    s = t.by_prefix()

    def listed(table):
        ends = np.cumsum(table.sizes).tolist()
        return [(table.data[e - k:e].tobytes(), c) for e, k, c in zip(ends, table.sizes.tolist(), table.counts.tolist())]

    got, before = listed(s), listed(t)
    assert sorted(got) == sorted(before)
    # by the first 8 bytes after a leading space (zero-padded), chunks alike there in their order before
    assert got == sorted(before, key=lambda bc: bc[0][bc[0].startswith(b" "):][:8].ljust(8, b"\0"))
    assert train_merges(t, n) == train_merges(s, n) == train_merges(chunks, n)


@given(pairs=st.lists(st.tuples(st.integers(0, 70_000), st.integers(0, 300), st.integers(0, 6)), max_size=40))
def test_the_hand_over_table_lists_each_pair_and_chunk_once_in_order(pairs):
    from bpe.train.early_merges import SHIFT, _distinct_pairs

    pairs.sort(key=lambda p: p[2])  # in chunk order, as the positions give them
    left, right, chunks = (np.array([p[i] for p in pairs], dtype=np.int32) for i in range(3))
    keys, where = _distinct_pairs(left, right, chunks)  # ids past 2**16: a key of three digits
    want = sorted(set((a << SHIFT | b, c) for a, b, c in pairs))
    assert list(zip(keys.tolist(), where.tolist())) == want


@given(chunks=st.dictionaries(st.text(alphabet="aab cé", min_size=2, max_size=14), st.integers(1, 4), max_size=25),
       n=st.integers(1, 30), floor=st.integers(1, 3))
@example(chunks={"abab": 3, "ba": 2, "cababab": 1}, n=4, floor=1)  # adjacent occurrences of a pair
@example(chunks={"aaaaa": 2, "baaab": 1, "aa": 1}, n=4, floor=1)   # runs of a pair of one token
def test_a_merge_at_few_positions_leaves_the_arrays_index_and_counts_of_an_array_merge(chunks, n, floor):
    import bpe.train.early_merges as early_merges
    from bpe.train.chunk_table import ChunkTable

    table = ChunkTable.of(chunks)
    table = table.keep(table.sizes >= 2)
    arrays, views = (early_merges.ArrayMerges(table.data, table.sizes, table.counts) for _ in range(2))
    for c in range(256, 256 + n):
        if not any(arrays.pairs.values()):
            break
        key = min(arrays.pairs, key=lambda k: (-arrays.pairs[k], k))
        got = []
        # the arrays sort the pairs made by radix (RADIX_MIN 0) and count them in NumPy too
        # (FEW_SIDES 0), the views in Python
        for early, few in ((arrays, 0), (views, 10**9)):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(early_merges, "FEW", few)
                mp.setattr(early_merges, "RADIX_MIN", few)
                mp.setattr(early_merges, "FEW_SIDES", few)
                at = early.starts(key)
                grown, counts = early.merge(key, c, at, floor)
            del early.pairs[key]
            got.append((list(map(int, at)), sorted(zip(grown, counts))))
        assert got[0] == got[1]
        assert arrays.pairs == views.pairs
        for name in ("tok", "nxt", "prv"):
            assert np.array_equal(getattr(arrays, name), getattr(views, name)), name
        assert arrays.made.keys() == views.made.keys()
        for t, index in arrays.made.items():  # (sides, first, starts) arrays; a sorted list of ints
            sides, first, starts = index
            runs = np.diff(np.append(first, starts.size))
            entries = (np.repeat(sides, runs) << early_merges.POS | starts).tolist()
            assert entries == views.made[t]


@given(chunks=st.dictionaries(st.binary(min_size=2, max_size=8), st.integers(1, 1 << 40), min_size=1, max_size=12),
       n=st.integers(1, 20))
@example(chunks={b"    ": 3_000_000, b"  x": 2_500_000, b"ab": 2_000_000}, n=6)  # counts past 2**21
def test_merges_of_chunks_counted_millions_of_times_are_the_loops(chunks, n):
    # The loop keeps counts in Python ints; the array merges must not lose bits of big ones.
    assert train_merges(chunks, n, array_min=0) == train_merges(chunks, n, array_min=math.inf)


@given(chunks=st.dictionaries(st.text(alphabet="aab cé", min_size=1, max_size=14), st.integers(1, 9), max_size=25),
       n=st.integers(1, 40), minf=st.integers(1, 2), array_min=st.sampled_from([0, 3, math.inf]))
@example(chunks={"abab": 9, "ba": 2, "cababab": 1, "aaaa": 5}, n=8, minf=1, array_min=0)
def test_pairs_left_out_below_the_floor_are_counted_again_when_it_drops(chunks, n, minf, array_min):
    # A floor of 4 halved at each drop: the drops fall in the array phase and in the loop.
    import bpe.train.merge_learner as merges

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(merges, "PUSH_MIN", 4)
        mp.setattr(merges, "DROP", 2)
        got = train_merges(chunks, n, minf, array_min=array_min)
    texts = [c for c, k in chunks.items() for _ in range(k)]
    assert got == naive_train(texts, n, r"(?s).+", minf)


def _table_counts(t):
    ends = np.cumsum(t.sizes).tolist()
    raw = t.data.tobytes()
    return dict(zip((raw[a:b] for a, b in zip([0] + ends[:-1], ends)), t.counts.tolist()))


# Chunks of 17-40 bytes with the same first and last 8 bytes differ only in between.
_long = st.binary(min_size=1, max_size=24).map(lambda m: b"headhead" + m + b"tailtail")


@given(parts=st.lists(st.dictionaries(st.one_of(st.binary(min_size=1, max_size=18), _long),
                                      st.integers(1, 5), max_size=12), max_size=4))
@example(parts=[{b"headheadAtailtail": 1, b"x": 2}, {b"headheadBtailtail": 3, b"x": 1}, {b"x": 4}])
@example(parts=[{b"headhead" + b"m" * 300 + b"tailtail": 1}, {b"headhead" + b"m" * 300 + b"tailtail": 2,
                 b"headhead" + b"m" * 299 + b"n" + b"tailtail": 5}])  # past the words compared in rounds
@example(parts=[{b"headheadXtailtail": 1}, {b"headheadYtailtail": 2}, {b"headheadYtailtail": 3},
                {b"headheadXtailtail": 4}])  # a group of four keys: two chunks, each in two tables
def test_joined_chunk_tables_hold_each_chunk_once_with_its_summed_count(parts):
    from collections import Counter

    from bpe.train.chunk_table import ChunkTable

    joined = ChunkTable.join(ChunkTable.of(p) for p in parts)
    want = Counter()
    for p in parts:
        want.update(p)
    assert len(joined) == len(want) and _table_counts(joined) == dict(want)


@given(sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=300), workers=st.integers(2, 8))
def test_counting_shares_cover_the_texts_in_order_and_shrink_to_the_end(sizes, workers):
    from bpe.train.parallel_count import SHARES_PER_WORKER, _shares

    shares = _shares(sizes, workers)
    assert shares[0][0] == 0 and shares[-1][1] == len(sizes)
    assert all(a < b and b == c for (a, b), (c, _) in zip(shares, shares[1:] + [(len(sizes), None)]))
    # every share but the last reaches the least size
    least = sum(sizes) / (workers * SHARES_PER_WORKER)
    assert all(sum(sizes[a:b]) >= least for a, b in shares[:-1])


@pytest.mark.parametrize("specials, match", [
    ({"<|endoftext|>": 256}, r"has id 256, which the bytes \(0..255\) or the merges \(256..258"),
    ({"<a>": 100}, "has id 100, which the bytes"),
    (["<\ud800>"], "lone surrogate"),
])
def test_special_tokens_that_cannot_be_placed_are_refused_before_training(specials, match, monkeypatch):
    from bpe.train import trainer

    monkeypatch.setattr(trainer, "count_texts", lambda *a, **k: pytest.fail("trained first"))
    with pytest.raises(ValueError, match=match):
        Tokenizer.train_from_iterator(["abcabc"] * 10, vocab_size=260, special_tokens=specials)


def test_explicit_special_ids_just_past_the_merges_are_taken():
    tok = Tokenizer.train_from_iterator(["abcabc"] * 10, vocab_size=260, special_tokens={"<a>": 259, "<b>": 258})
    assert tok.special_tokens == {"<a>": 259, "<b>": 258} and tok.decode([258, 259]) == "<b><a>"
