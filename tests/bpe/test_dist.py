"""`mpiexec -n 2 bpe train`: the ranks count apart, rank 0 trains the tokenizer of one process."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bpe import Tokenizer

REPO = Path(__file__).resolve().parents[2]

# Small byte ranges, so every file is split between the two ranks.
SCRIPT = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
import bpe.files.corpus
bpe.files.corpus.BLOCK_BYTES = 300
from bpe.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _mpi_ready() -> bool:
    if shutil.which("mpiexec") is None:
        return False
    r = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], capture_output=True)
    return r.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _mpi_ready(), reason="needs mpiexec and mpi4py (the dist extra)")
def test_two_ranks_train_like_one_process(tmp_path):
    lines = [f"def f{i}(x):\n    return x * {i} + 'é'<|endoftext|>\n\n" for i in range(60)]
    (tmp_path / "a.py").write_text("".join(lines))
    (tmp_path / "b.txt").write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = tmp_path / "mpi.json"
    r = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-c", SCRIPT, "train", "--input", str(tmp_path),
                        "--vocab-size", "400", "--special", "<|endoftext|>", "--out", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    one = Tokenizer.train([tmp_path / "a.py", tmp_path / "b.txt"], vocab_size=400,
                          special_tokens=["<|endoftext|>"], workers=1)
    got = Tokenizer.load(out)
    assert got.merges == one.merges and got.special_tokens == one.special_tokens
    r = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-c", SCRIPT, "train", "--input",
                        str(tmp_path / "missing.txt"), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "missing.txt" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not _mpi_ready(), reason="needs mpiexec and mpi4py (the dist extra)")
def test_two_ranks_training_from_count_files_write_once(tmp_path):
    from bpe.cli import main

    for k in range(2):
        (tmp_path / f"s{k}.txt").write_text(f"def f{k}(x):\n    return x * {k}\n" * 20)
        assert main(["count", "--input", str(tmp_path / f"s{k}.txt"), "--out", str(tmp_path / f"c.{k}"),
                     "--quiet"]) == 0
    out = tmp_path / "m.json"
    r = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-c", SCRIPT, "train", "--counts",
                        str(tmp_path / "c.*"), "--vocab-size", "270", "--out", str(out)],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"wrote {out}") == 1 and r.stderr.count("trained Tokenizer") == 1, r.stderr
    one = Tokenizer.train_from_counts(str(tmp_path / "c.*"), vocab_size=270)
    assert Tokenizer.load(out).merges == one.merges
