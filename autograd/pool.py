"""The worker threads behind autograd.parallel: chunks of one op now, and work deferred to later.

Two kinds of work reach the workers:
- `helpers`: a chunked op in progress (parallel.for_chunks) asks every worker to help take its
  chunks. These come first: the op's caller is waiting on them.
- `deferred`: work whose result nobody reads until a later `drain()`, such as a Linear layer's
  weight gradient during backward (only the optimizer reads it, after backward). A worker runs it
  whenever no chunked op needs help, so that it overlaps the caller's own work with one hand-off
  per task instead of one per chunk. `drain()` runs what no worker has started yet on the
  caller's thread, waits for the rest and raises the first error any of it raised.

What runs where never changes a result: each task is a fixed piece of work (its bounds depend on
the arrays' shapes only), whichever thread runs it.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable


class Pool:
    """n worker threads (daemons) taking helpers first, then deferred tasks."""

    def __init__(self, n: int, name: str = "autograd"):
        self._cv = threading.Condition(threading.Lock())
        self._helpers: deque = deque()
        self._deferred: deque = deque()
        self._running = 0          # deferred tasks a worker has taken and not finished
        self._errors: list = []
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def _next(self):
        """(task, deferred?) for a worker, or (None, False) once the pool is closed."""
        with self._cv:
            while not (self._helpers or self._deferred or self._closed):
                self._cv.wait()
            if self._helpers:
                return self._helpers.popleft(), False
            if self._deferred:
                self._running += 1
                return self._deferred.popleft(), True
            return None, False

    def _work(self) -> None:
        while True:
            task, deferred = self._next()
            if task is None:
                return
            if not deferred:
                task()             # a helper catches its chunks' errors itself
                continue
            try:
                task()
            except BaseException as exc:  # re-raised by drain() on the caller's thread
                self._errors.append(exc)
            with self._cv:
                self._running -= 1
                if not self._running and not self._deferred:
                    self._cv.notify_all()

    def help(self, helper: Callable[[], None], copies: int) -> None:
        """Ask `copies` workers to run `helper` (each returns once the op has no chunk left)."""
        with self._cv:
            self._helpers.extend([helper] * copies)
            self._cv.notify(copies)

    def defer(self, task: Callable[[], None]) -> None:
        with self._cv:
            self._deferred.append(task)
            self._cv.notify()

    def pending(self) -> bool:
        """Whether some deferred task is queued or running."""
        return bool(self._deferred or self._running)

    def drain(self) -> None:
        """Run or wait for every deferred task; raise the first error one of them raised."""
        while True:
            with self._cv:
                task = self._deferred.popleft() if self._deferred else None
            if task is None:
                break
            try:
                task()
            except BaseException as exc:
                self._errors.append(exc)
        with self._cv:
            while self._running:
                self._cv.wait()
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first

    def close(self) -> None:
        """Finish the deferred work, then let the workers exit."""
        try:
            self.drain()
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
