"""The default corpus and streamed reading of files."""
import random
import sysconfig
from pathlib import Path

from bpe import default_corpus_files
from bpe.files.corpus import expand_inputs, read_blocks


def test_default_corpus_is_the_stdlib_sources_sorted():
    files = default_corpus_files()
    assert len(files) > 100 and all(f.suffix == ".py" for f in files)
    assert not any("site-packages" in f.parts for f in files)
    root = Path(sysconfig.get_paths()["stdlib"])
    rel = [f.relative_to(root).as_posix() for f in files]
    assert rel == sorted(rel)
    assert "os.py" in rel


def test_blocks_tile_the_file_for_any_ranges(tmp_path):
    rng = random.Random(0)
    f = tmp_path / "f.txt"
    for trial in range(200):
        data = bytes(rng.choice(b"ab\n\n  1\xc3\xa9") for _ in range(rng.randint(0, 400)))
        f.write_bytes(data)
        bs = rng.randint(1, 60)
        whole = "".join(read_blocks(f, block_bytes=bs))
        assert whole == data.decode("utf-8", errors="replace")
        cuts = sorted(rng.sample(range(len(data) + 1), min(3, len(data) + 1)))
        bounds = [0] + cuts + [len(data)]
        assert "".join("".join(read_blocks(f, a, b, bs)) for a, b in zip(bounds, bounds[1:])) == whole


def test_expand_inputs_sorted_and_deduplicated(tmp_path):
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / ".hidden").write_text("h")
    files = expand_inputs([tmp_path, tmp_path / "a.txt"])
    assert [f.name for f in files] == ["a.txt", "b.txt"]


def test_block_cuts_never_change_the_chunks_of_any_pattern(tmp_path):
    """Each block is pre-tokenized on its own, so a cut must be a chunk boundary of every
    pattern: "x \\n\\nclass" cut before "class" would turn GPT-2's chunks " ", "\\n", "\\n"
    into one "\\n\\n" chunk (its whitespace rule looks at what follows)."""
    from collections import Counter

    import regex

    from bpe.split.patterns import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN

    rng = random.Random(1)
    f = tmp_path / "f.txt"
    pieces = ["x", " ", "\n", "\n\n", "  \n", "class", "1", ":", "\t", "\u3000", "\xa0", "'s", "é", "!", "/", "a!\n/b"]
    for trial in range(150):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 120)))
        f.write_text(text, encoding="utf-8")
        bs = rng.randint(1, 30)
        blocks = list(read_blocks(f, block_bytes=bs))
        assert "".join(blocks) == text
        for pattern in (GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN):
            assert list(read_blocks(f, block_bytes=bs, pattern=pattern)) == blocks
            whole = Counter(regex.findall(pattern, text))
            assert sum((Counter(regex.findall(pattern, b)) for b in blocks), Counter()) == whole, (text, bs)


def test_first_cut_matches_its_definition_for_any_read_size(tmp_path):
    from bpe.files.corpus import _first_cut

    def brute(data, q):
        if q <= 0:
            return 0
        for p in range(q, len(data)):
            if data[p - 1:p] == b"\n" and p >= 2 and 0x20 < data[p - 2] < 0x7F and data[p:p + 1].isalnum():
                return p
        return len(data)

    rng = random.Random(2)
    f = tmp_path / "f.bin"
    for trial in range(300):
        data = bytes(rng.choice(b"ab\n\n \t:1\xc2\xa0") for _ in range(rng.randint(0, 40)))
        f.write_bytes(data)
        with open(f, "rb") as fh:
            for q in range(len(data) + 1):
                want = brute(data, q)
                for step in (1, 2, 3, 7, 1 << 16):
                    assert _first_cut(fh, q, len(data), step) == want, (data, q, step)


def test_one_reader_skips_binary_files_found_and_lists_each_file_once(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("alpha")
    (tmp_path / "d" / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / "d" / "sub").mkdir()
    (tmp_path / "d" / "sub" / "b.txt").write_text("beta")
    (tmp_path / "link.txt").symlink_to(tmp_path / "d" / "a.txt")
    found = expand_inputs([tmp_path / "d", str(tmp_path / "d" / "*.*"), tmp_path / "d" / "sub" / ".." / "a.txt",
                           tmp_path / "link.txt"])
    assert [f.name for f in found] == ["a.txt", "b.txt"]
    assert [f.name for f in expand_inputs([tmp_path / "d" / "blob.bin"])] == ["blob.bin"]  # named: kept
    assert len(expand_inputs([tmp_path / "d"], skip_binary=False)) == 3


def test_blocks_of_a_pattern_without_known_cuts_are_the_whole_file(tmp_path):
    f = tmp_path / "f.txt"
    text = "abc\ndef\nghi\n" * 20
    f.write_text(text)
    assert list(read_blocks(f, block_bytes=10, pattern=r"\S+\n\S|\s+|\S+")) == [text]
    assert list(read_blocks(f, 5, 50, block_bytes=10, pattern=r"\S+|\s+")) == []
    assert len(list(read_blocks(f, block_bytes=10, pattern="gpt4"))) > 5
