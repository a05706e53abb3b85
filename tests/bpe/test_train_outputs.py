"""`bpe train`'s outputs (--out, --tiktoken-out and its side file, --hf-out) are one set: locked
against a second writer, built aside and renamed in place, so a kill or a full disk leaves all
old or all new files (issue 32, item 1)."""
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bpe import Tokenizer
from bpe.cli import main
from bpe.files.write_set import PAUSE_ENV, TEMP_PREFIX

REPO = Path(__file__).resolve().parents[2]
TEXT = "the cat sat on the mat; the dog, 42 logs.\n"


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "c.txt"
    words = ["cat", "mat", "dog", "log", "sat", "on", "the", "fox", "jumps", "over", "lazy", "brown", "quick"]
    f.write_text("".join(f"{words[k % 13]} {words[k * 7 % 13]}{k % 97} {words[k * 5 % 11]}.\n" for k in range(3000)))
    return f


def outputs(tmp_path):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return out / "tok.json", out / "tok.tiktoken", out / "tokenizer.json"


def train_args(corpus, tmp_path, vocab):
    j, t, h = outputs(tmp_path)
    return ["train", "--input", str(corpus), "--vocab-size", str(vocab), "--quiet", "--out", str(j),
            "--tiktoken-out", str(t), "--hf-out", str(h)]


def encodings(tmp_path) -> list[list[int]]:
    """TEXT encoded by each of the three outputs (the .tiktoken one with its side file)."""
    j, t, h = outputs(tmp_path)
    return [Tokenizer.load(j).encode(TEXT), Tokenizer.from_tiktoken(t).encode(TEXT),
            Tokenizer.from_huggingface(h).encode(TEXT)]


def temps(tmp_path):
    return sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(TEMP_PREFIX))


def start_paused(corpus, tmp_path, vocab):
    """`bpe train` in a subprocess, stopped after its temp files are written, before the renames."""
    env = dict(os.environ, **{PAUSE_ENV: "120"}, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "bpe.cli"] + train_args(corpus, tmp_path, vocab),
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    seen = ""
    while "pausing before the renames" not in seen:
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            pytest.fail(f"bpe train ended before its pause: {seen}")
        seen += line
    return proc


def test_a_kill_before_the_renames_leaves_the_old_set_and_the_next_writer_cleans_up(corpus, tmp_path):
    assert main(train_args(corpus, tmp_path, 270)) == 0
    old = encodings(tmp_path)
    assert old[0] == old[1] == old[2]
    proc = start_paused(corpus, tmp_path, 300)
    assert len(temps(tmp_path)) == 4  # json, tiktoken, its side file, tokenizer.json: all written aside
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert encodings(tmp_path) == old  # all old: nothing was renamed
    assert main(train_args(corpus, tmp_path, 300)) == 0
    new = encodings(tmp_path)
    assert new[0] == new[1] == new[2] != old[0]  # all new
    assert temps(tmp_path) == []  # the killed writer's temp files are gone


def test_a_second_writer_of_the_same_files_is_refused_naming_the_holder(corpus, tmp_path, capsys):
    main(train_args(corpus, tmp_path, 270))
    before = encodings(tmp_path)
    proc = start_paused(corpus, tmp_path, 300)
    try:
        capsys.readouterr()
        rc = main(train_args(corpus, tmp_path, 280))
        err = capsys.readouterr().err
        assert rc == 2 and f"is in use by process {proc.pid}" in err and err.count("\n") == 1, err
        assert "tok.json" in err
        assert encodings(tmp_path) == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_a_full_disk_leaves_the_old_set_and_no_temp_file(corpus, tmp_path, capsys, monkeypatch):
    main(train_args(corpus, tmp_path, 270))
    before = encodings(tmp_path)
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:  # the second temp file does not fit
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    capsys.readouterr()
    rc = main(train_args(corpus, tmp_path, 300))
    err = capsys.readouterr().err
    assert rc == 2 and "No space left on device; no output file was changed" in err and err.count("\n") == 1
    monkeypatch.undo()
    assert encodings(tmp_path) == before and temps(tmp_path) == []


def test_one_file_named_as_two_outputs_is_refused(corpus, tmp_path, capsys):
    j, _, _ = outputs(tmp_path)
    rc = main(["train", "--input", str(corpus), "--vocab-size", "270", "--quiet", "--out", str(j), "--hf-out", str(j)])
    assert rc == 2 and "named as two outputs" in capsys.readouterr().err
