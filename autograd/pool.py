"""The worker threads behind autograd.parallel: chunks of one op now, and work deferred to later.

Two kinds of work reach the workers:
- `helpers`: a chunked op in progress (parallel.for_chunks) asks every worker to help take its
  chunks. These come first: the op's caller is waiting on them.
- `deferred`: work whose result nobody reads until a later `drain()`, such as a Linear layer's
  weight gradient during backward (only the optimizer reads it, after backward). A worker runs it
  whenever no chunked op needs help, so that it overlaps the caller's own work with one hand-off
  per task instead of one per chunk. `drain()` runs what no worker has started yet on the
  caller's thread, waits for the rest and raises the first error any of it raised.

Each queued piece of work puts one token into a C-level queue (queue.SimpleQueue) that the idle
workers block on: waking a worker is one put, and a woken worker takes a helper when there is
one, else a deferred task, so no worker sleeps while work is queued. (A Condition's notify and
wait run in Python on every hand-off, which a small op's hand-off noticed.) What runs where
never changes a result: each task is a fixed piece of work (its bounds depend on the arrays'
shapes only), whichever thread runs it.
"""
from __future__ import annotations

import threading
from collections import deque
from queue import SimpleQueue
from typing import Callable


class Pool:
    """n worker threads (daemons) taking helpers first, then deferred tasks."""

    def __init__(self, n: int, name: str = "autograd"):
        self._lock = threading.Lock()          # guards the queues and the running count
        self._idle = threading.Condition(self._lock)   # drain() waits here for running tasks
        self._tokens: SimpleQueue = SimpleQueue()      # one per queued piece of work; None: exit
        self._helpers: deque = deque()
        self._deferred: deque = deque()
        self._running = 0          # deferred tasks a worker has taken and not finished
        self._errors: list = []
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(n)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            if self._tokens.get() is None:
                return
            with self._lock:
                if self._helpers:
                    task, deferred = self._helpers.popleft(), False
                elif self._deferred:
                    task, deferred = self._deferred.popleft(), True
                    self._running += 1
                else:
                    continue           # drain() ran it meanwhile
            if not deferred:
                task()                 # a helper catches its chunks' errors itself
                continue
            try:
                task()
            except BaseException as exc:  # re-raised by drain() on the caller's thread
                self._errors.append(exc)
            with self._lock:
                self._running -= 1
                if not self._running:
                    self._idle.notify_all()

    def help(self, helper: Callable[[], None], copies: int) -> None:
        """Ask `copies` workers to run `helper` (each returns once the op has no chunk left)."""
        with self._lock:
            self._helpers.extend([helper] * copies)
        for _ in range(copies):
            self._tokens.put(True)

    def defer(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._deferred.append(task)
        self._tokens.put(True)

    def pending(self) -> bool:
        """Whether some deferred task is queued or running."""
        return bool(self._deferred or self._running)

    def drain(self) -> None:
        """Run or wait for every deferred task; raise the first error one of them raised."""
        while True:
            with self._lock:
                task = self._deferred.popleft() if self._deferred else None
            if task is None:
                break
            try:
                task()
            except BaseException as exc:
                self._errors.append(exc)
        with self._lock:
            while self._running:
                self._idle.wait()
        if self._errors:
            first, self._errors = self._errors[0], []
            raise first

    def close(self) -> None:
        """Finish the deferred work, then let the workers exit."""
        try:
            self.drain()
        finally:
            for _ in self._threads:
                self._tokens.put(None)
