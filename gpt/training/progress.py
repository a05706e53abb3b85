"""What a training run tells the world (a live progress line, metrics as JSON lines) and
what it hears from it (Ctrl-C).

On a terminal the progress line is rewritten in place (carriage return); in a log file or a
pipe every report is a line of its own. Metrics go to `metrics.jsonl` in the run folder, one
JSON object per line: {"kind": "train", "step", "loss", "lr", ...} or {"kind": "eval", ...}.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable


class ProgressLine:
    """Prints `update(text)` in place on a TTY, as plain lines elsewhere."""

    def __init__(self, stream: IO[str] | None = None, enabled: bool = True):
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._open = False
        self._last = 0.0

    def update(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            now = time.monotonic()
            if now - self._last < 0.1:  # a terminal redrawn 1,000 times a second helps no one
                return
            self._last = now
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + text[:width].ljust(width))
            self._open = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def print(self, text: str) -> None:
        """A permanent line (evaluations, messages), leaving the live line below it."""
        if not self.enabled:
            return
        if self._open:
            self.stream.write("\n")
            self._open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


class MetricsLog:
    """Appends JSON lines to `path`; on resume, drops records past the resumed step (they
    belong to the part of the old run that the checkpoint does not contain) and the evaluation
    at that step (the resumed run makes it again)."""

    def __init__(self, path: str | os.PathLike, resume_step: int | None = None):
        self.path = Path(path)
        if resume_step is not None and self.path.is_file():
            kept = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash
                step = int(rec.get("step", 0))
                # Evaluations at the resumed step are redone by the resumed run.
                if step < resume_step or (step == resume_step and rec.get("kind") != "eval"):
                    kept.append(line)
            from bpe.files.atomic import atomic_write_text

            atomic_write_text(self.path, "".join(k + "\n" for k in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_metrics(path: str | os.PathLike) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def format_count(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


class StopFlag:
    """First Ctrl-C: finish the current step, save, stop. A second one aborts at once."""

    def __init__(self, say: Callable[[str], None]):
        self.requested = False
        self._say = say
        self._old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._say("Ctrl-C: stopping after this step and saving (press again to abort now)")

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False


@contextlib.contextmanager
def deferred_interrupts():
    """Hold Ctrl-C (SIGINT) back until the block ends, so the block's changes happen whole.

    The signal is blocked at the OS level and delivered, to whatever handler is installed,
    as soon as the block exits; off the main thread, or without pthread_sigmask, nothing is
    held back (signals only reach Python's main thread anyway)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
