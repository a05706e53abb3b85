"""The default corpus and streamed reading of files."""
import random
import sysconfig
from pathlib import Path

from bpe import default_corpus_files
from bpe.corpus import expand_inputs, read_blocks


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
