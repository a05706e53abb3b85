"""bpe/files/lock.py: a refused process names the writer that holds the lock, even in the moment
between the writer taking the lock and writing its name (or clearing it and letting go)."""
import os
import subprocess
import sys

import pytest

import bpe.files.lock as lock
from bpe.files.lock import FolderBusy, FolderLock

# Takes the exclusive lock with no name in the file, says so, waits, then writes its name
# ("name") and holds on, or lets go ("free").
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(0.3)
if sys.argv[2] == "name":
    os.pwrite(fd, f"process {os.getpid()} (holder)\\n".encode(), 0)
    time.sleep(30)
"""


def _holder(path, then):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), then], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "locked\n"
    return p


@pytest.mark.parametrize("then", ["name", "free"])
def test_a_writer_without_its_name_yet_is_not_taken_for_a_reader(tmp_path, monkeypatch, then):
    monkeypatch.setattr(lock, "NAME_TRIES", 2500)  # 5 s: the holder's 0.3 s on a busy machine
    p = _holder(tmp_path / ".lock", then)
    try:
        if then == "name":  # refused, naming the writer once its name is there
            with pytest.raises(FolderBusy, match=rf"folder .* is in use by process {p.pid} \(holder\)"):
                FolderLock(tmp_path, "folder").acquire()
        else:  # the writer let go meanwhile: the lock is taken, not refused
            held = FolderLock(tmp_path, "folder").acquire()
            assert (tmp_path / ".lock").read_text().startswith("process ")
            held.release()
    finally:
        p.kill()
        p.wait()


def test_only_readers_are_named_as_readers(tmp_path):
    with FolderLock(tmp_path, "data folder", shared=True):
        p = subprocess.run([sys.executable, "-c", "import sys; from bpe.files.lock import FolderLock; "
                            "FolderLock(sys.argv[1], 'data folder').acquire()", str(tmp_path)],
                           capture_output=True, text=True)
    assert p.returncode == 1 and "is in use by a process that reads it" in p.stderr, p.stderr


def test_a_writer_letting_go_between_the_probes_is_not_taken_for_a_reader(tmp_path, monkeypatch):
    import fcntl

    path = tmp_path / ".lock"
    writer = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # another open file: its flock conflicts
    fcntl.flock(writer, fcntl.LOCK_EX)
    flock, open_writers = fcntl.flock, [writer]

    def let_go_before_the_reader_probe(fd, op):
        if op == fcntl.LOCK_SH | fcntl.LOCK_NB and open_writers:
            os.close(open_writers.pop())  # the writer exits right after the exclusive probe was refused
        return flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", let_go_before_the_reader_probe)
    held = FolderLock(tmp_path, "folder").acquire()  # taken, not refused as "a process that reads it"
    assert path.read_text().startswith(f"process {os.getpid()} ")
    held.release()


def test_a_folder_that_is_a_file_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    for folder in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(FileExistsError, match=r"run folder '.*f(/sub)?' cannot be made: it \(or a folder above"):
            FolderLock(folder, "run folder").acquire()
    assert (tmp_path / "f").read_text() == "x"
