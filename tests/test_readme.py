"""The README's examples run as written: every Python block, and every shell line of its tour
(with small sizes: fewer steps, a smaller model and vocabulary), in a fresh folder holding only
what a clone holds. A README that drifts from the code fails here."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# Shell lines the test cannot run here, each with the reason.
SKIP = (
    (r"^pip ", "installs the project: the test runs in the installed one"),
    (r"^curl |^wget ", "downloads: no network in tests (the test writes the file itself)"),
    (r"mpiexec", "needs an MPI launcher (tests/gpt/test_dist.py covers it)"),
    (r"--device cuda|gpu_check", "needs an NVIDIA GPU"),
    (r"^python3? benchmarks/", "benchmarks are not tests"),
    (r"^python3? -m pytest", "the suite itself"),
)
# Small sizes, appended to (or replacing values in) the lines that would take minutes.
SMALL_TRAIN = ["--max-steps", "2", "--eval-interval", "1", "--eval-batches", "1", "--n-layer", "1",
               "--n-head", "2", "--n-embd", "32", "--block-size", "32", "--batch-size", "2",
               "--samples", "1", "--sample-tokens", "8", "--peak-flops", "1e9", "--max-chars", "200000",
               "--vocab-size", "300"]
REPLACE = (
    (r"--vocab-size \d+", "--vocab-size 300"), (r"--max-new-tokens \d+", "--max-new-tokens 8"),
    (r"--max-steps \d+", "--max-steps 4"), (r"--depths [\d,]+", "--depths 2,3"), (r"--seeds \d+", "--seeds 1"),
    (r"--steps \d+", "--steps 2"),
)


def _blocks(kind: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    langs = ("python",) if kind == "python" else ("", "sh", "bash", "console")
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M) if lang in langs]


def _shell_lines() -> list[str]:
    lines = []
    for block in _blocks("shell"):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            line = line.split("  # ")[0].split(" # ")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def _small(line: str) -> list[str]:
    for pat, rep in REPLACE:
        line = re.sub(pat, rep, line)
    argv = shlex.split(line)
    if argv[:2] == ["gpt", "train"] and "--resume" not in argv:
        argv += SMALL_TRAIN  # argparse keeps the last value of a repeated flag
    return argv


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A folder with the files of a fresh clone that the examples read."""
    d = tmp_path_factory.mktemp("clone")
    for name in ("README.md", "docs", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, d / name)
    (d / "input.txt").write_text(README.read_text(encoding="utf-8") * 3)  # stands in for the download
    return d


def test_the_readme_has_examples():
    assert len(_blocks("python")) >= 4 and len(_shell_lines()) >= 10


def test_every_python_block_runs(clone):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for block in _blocks("python"):
        res = subprocess.run([sys.executable, "-c", block], cwd=clone, env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, f"README block failed:\n{block}\n--- stderr:\n{res.stderr[-3000:]}"


def test_every_shell_line_of_the_tour_runs(clone):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bin_dir = Path(sys.executable).parent
    ran = 0
    for line in _shell_lines():
        if any(re.search(pat, line) for pat, _ in SKIP):
            continue
        argv = _small(line)
        if argv[0] in ("gpt", "bpe"):
            argv = [sys.executable, "-m", f"{argv[0]}.cli", *argv[1:]]
        shell = "|" in line or ">" in line
        cmd = line if shell else argv
        if shell:  # a pipeline: run it through the shell, with our interpreter's commands first
            env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        res = subprocess.run(cmd, shell=shell, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"README line failed: {line}\nran: {cmd}\n--- stderr:\n{res.stderr[-3000:]}"
        ran += 1
    assert ran >= 8
