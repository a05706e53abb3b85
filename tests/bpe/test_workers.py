"""Counting worker processes never outlive their parent, even one killed by SIGKILL."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Starts two counting workers, then blocks (the workers wait for work) until killed.
SCRIPT = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
import bpe.train.parallel_count as count
from bpe import GPT4_PATTERN
count.PARALLEL_MIN_BYTES = 1
def texts():
    yield "hello world " * 100
    yield "more text"
    print("ready", flush=True)
    time.sleep(600)
    yield "never"
count.count_texts(texts(), GPT4_PATTERN, workers=2)
"""


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent (now init) has not reaped it


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_workers_exit_when_the_parent_is_killed():
    for attempt in range(3):  # a bounded loop: the race between start-up and the kill varies
        p = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 10
            while len(_children(p.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            workers = _children(p.pid)
            assert len(workers) >= 2
        finally:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [w for w in workers if _alive(w)]
        for w in left:
            os.kill(w, signal.SIGKILL)
        assert not left, f"attempt {attempt}: workers {left} outlived their killed parent"
