"""A data folder that changes under a run: `gpt prepare` refuses to replace prepared data without
--force and while a run reads it; a resumed run refuses data whose fingerprint changed, naming
what changed, and warns on a checkpoint older than fingerprints."""
import io
import os
import subprocess
import sys
import textwrap

import pytest

from bpe.files.lock import FolderBusy
from gpt.data import fingerprint as fp
from gpt.data import prepare
from gpt.training.checkpoint import CheckpointError, load_checkpoint
from gpt.training.config import TrainConfig
from gpt.training.resume import check_data
from gpt.training.trainer import Trainer, train
from tests.gpt.test_faults_folders import _corpus
from tests.gpt.test_train import quiet, small

PY = sys.executable


@pytest.fixture
def run(tmp_path):
    """A data folder `d` and a 2-step run `r` trained on it."""
    prepare([_corpus(tmp_path / "c.txt")], tmp_path / "d", char=True, workers=1)
    train(small(tmp_path / "d", tmp_path / "r", max_steps=2), out=quiet())
    return tmp_path


def _resume(root):
    return Trainer(TrainConfig(resume=str(root / "r"), max_steps=4), {"resume", "max_steps"}, out=quiet())


def test_prepare_into_prepared_data_needs_force(run):
    before = (run / "d" / "train.bin").read_bytes()
    (run / "other.txt").write_text("a different text, with other letters: XYZ qj!\n" * 300)
    with pytest.raises(FileExistsError, match=r"already holds prepared data \(meta.json, train.bin, val.bin\).*--force"):
        prepare([run / "other.txt"], run / "d", char=True, workers=1)
    assert (run / "d" / "train.bin").read_bytes() == before  # nothing touched
    prepare([run / "other.txt"], run / "d", char=True, workers=1, force=True)
    assert (run / "d" / "train.bin").read_bytes() != before


def test_resume_on_replaced_data_is_refused_naming_what_changed(run):
    (run / "other.txt").write_text("a different text, with other letters: XYZ qj!\n" * 300)
    prepare([run / "other.txt"], run / "d", char=True, workers=1, force=True)
    with pytest.raises(CheckpointError, match=r"data folder .* changed since checkpoint .*: the tokenizer file "
                                              r"differs; train.bin was \d+ bytes and is \d+.*--init-from"):
        _resume(run)
    assert load_checkpoint(run / "r").step == 2  # the refused resume wrote nothing


def test_same_size_other_tokens_is_named(run):
    path = run / "d" / "val.bin"
    data = bytearray(path.read_bytes())
    data[0], data[2] = data[2], data[0] ^ 1  # same size, same ids' range
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"val.bin holds other tokens \(same size, another hash\)"):
        _resume(run)


def test_unchanged_data_resumes_and_the_checkpoint_keeps_the_fingerprint(run):
    meta = load_checkpoint(run / "r").meta
    assert meta["data_fingerprint"] == fp.fingerprint(run / "d", run / "d" / "tokenizer.json")
    assert meta["data_fingerprint"]["train.bin"]["bytes"] == (run / "d" / "train.bin").stat().st_size
    assert _resume(run).run().step == 4


def test_a_checkpoint_older_than_fingerprints_resumes_with_a_warning():
    said = []

    class Old:  # what load_checkpoint gives for a checkpoint written before fingerprints
        meta = {"path": "r/latest.safetensors", "data_dir": "d"}

    check_data(Old, {"tokenizer": None}, said.append)
    assert len(said) == 1 and "predates data fingerprints" in said[0] and "d still holds" in said[0]


def test_a_large_token_file_is_hashed_by_its_size_and_sampled_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(fp, "SAMPLE_FROM", 4 * fp.BLOCK)
    for split in ("train", "val"):
        (tmp_path / f"{split}.bin").write_bytes(bytes(9 * fp.BLOCK))
    a = fp.fingerprint(tmp_path, None)
    with open(tmp_path / "train.bin", "r+b") as f:  # a change inside the last block is seen
        f.seek(9 * fp.BLOCK - 10)
        f.write(b"x")
    b = fp.fingerprint(tmp_path, None)
    assert fp.changes(a, b) == ["train.bin holds other tokens (same size, another hash)"]
    assert fp.changes(a, a) == []


def test_prepare_is_refused_while_a_run_reads_the_folder(run):
    code = textwrap.dedent(f"""
        import time
        from gpt.training.run_folder import RunFolder
        RunFolder({str(run / "r2")!r}).read_data({str(run / "d")!r})
        print("reading", flush=True)
        time.sleep(60)
    """)
    reader = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert reader.stdout.readline().strip() == "reading"
        with pytest.raises(FolderBusy, match=r"data folder .* is in use by a process that reads it"):
            prepare([run / "c.txt"], run / "d", char=True, workers=1, force=True)
    finally:
        reader.kill()
        reader.wait()
    # the reader's lock went with it; a second reader at once is fine (readers share)
    prepare([run / "c.txt"], run / "d", char=True, workers=1, force=True)


def test_gpt_prepare_cli_says_force_in_one_line(run):
    p = subprocess.run([PY, "-m", "gpt.cli", "prepare", "--input", str(run / "c.txt"), "--out", str(run / "d"),
                        "--char"], capture_output=True, text=True)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--force" in lines[0] and "Traceback" not in p.stderr
