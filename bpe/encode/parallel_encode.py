"""Encoding many texts at once (``Tokenizer.encode_batch``): with the same ids as encoding them one
by one, in one process or split into contiguous shares, one per worker process.

In one process the new pieces of all the texts are merged together (``PieceEncoder.encode_many``),
so a batch of short texts costs what their concatenation would. The merge holds the GIL (it is
Python), so threads would take turns: the workers are processes, forked where the platform can,
so that they inherit the tokenizer and its warm piece cache without pickling, and kept for the
tokenizer's later batches (``_Pool``): a process forked per batch would copy every page that it
or the caller writes afterwards, a large share of its time. The calling process encodes the
first share itself while the others run; a worker gets its texts through a pipe (one started for
the batch inherits them) and sends its ids back part by part (PART_CHARS of text each), each
part as the bytes of one flat array, cheaper to move than lists of ints. A worker encodes
straight into those bytes (``packed_encoder``: no lists to make and pack), and a thread of its
own writes them to the pipe (``_Outbox``), so that it encodes on while the caller has not read
them yet. The caller encodes its own share part by part too and, between its parts, turns the
parts that have come back into lists (references to shared int objects, not new ones). Its share
is the smaller (CALLER_SHARE): then it claims a worker's last parts, from the back, and encodes
them itself, so that both finish together however unevenly hard the shares' texts are; a share's
last parts are smaller, for the same reason. A cost model keeps small batches in-process: a
worker pays for its start and for sending its ids, so it is started only while the time it saves
exceeds that.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import signal
import threading
import weakref
from itertools import accumulate, chain

import numpy as np

from ..text import repair_surrogates
from ..workers import default_workers
from .int_objects import id_lists
from .packed_encoder import ID_SIZE, ID_TYPE, PackedEncoder, pack_ids
from .special import check_disallowed, encode_with_specials, special_policy

START_CHARS = 1 << 17  # characters whose encoding takes about as long as starting one worker
RETURN_COST = 1 / 16  # the cost of sending a worker's ids back, as a share of encoding its characters
PART_CHARS = 1 << 18  # characters of text whose ids a worker sends back in one message
TAIL_CHARS = PART_CHARS // 8  # the smallest of a share's last parts
# The calling process's share, against a worker's 1: it also makes the lists of the workers' ids,
# and a worker's encoder into bytes skips the lists (packed_encoder). Low rather than high: the
# caller takes back a worker's last parts, while nothing takes the caller's.
CALLER_SHARE = 0.75
PIPE_BYTES = 1 << 20  # a worker's pipe of ids: about one part's (Linux's default limit for a pipe)


def free_cores() -> int:
    """The cores this process may run on, less those other processes keep busy (the load average
    over the last minute, this process counted as idle), at least 1."""
    cores = default_workers()
    try:
        busy = int(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this platform
        return cores
    return max(1, min(cores, cores + 1 - busy))


def plan(sizes: list[int], workers: int) -> list[int]:
    """Where the shares of texts of ``sizes`` characters start: ``[0, a, b, ...]`` for contiguous
    shares of about equal characters, the first (which stays in-process) CALLER_SHARE of the
    others, as many as the cost model finds worth it, at most ``workers``; ``[0]`` encodes
    everything in-process."""
    total = sum(sizes)
    n = min(workers, len(sizes))
    # Another worker pays for itself while the characters it takes off the others (1/(n-1) - 1/n of
    # the total), less the cost of sending its ids back, outweigh its start.
    while n > 1 and total * (1 / (n - 1) - 1 / n) - RETURN_COST * total / n < START_CHARS:
        n -= 1
    if n <= 1:
        return [0]
    bounds, target = [0], total / (CALLER_SHARE + n - 1)
    for i, done in enumerate(accumulate(sizes), 1):
        if done >= target * (CALLER_SHARE + len(bounds) - 1) and i < len(sizes) and len(bounds) < n:
            bounds.append(i)
    # A few long texts may not share out evenly: in-process unless the largest share still gains.
    largest = max(sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:] + [len(sizes)]))
    return bounds if largest + START_CHARS * (len(bounds) - 1) < total else [0]


def parts(sizes: list[int]) -> list[tuple[int, int]]:
    """Texts of ``sizes`` characters in runs ``(a, b)`` of about PART_CHARS characters, the last
    2 * PART_CHARS in runs of half what is left, down to TAIL_CHARS (whole texts: a longer text is a
    part of its own), in order, covering them all. The caller takes a worker's last parts: the
    smaller they are, the closer together both finish."""
    out, start, size, left = [], 0, 0, sum(sizes)
    for i, n in enumerate(sizes):
        size += n
        if size >= (PART_CHARS if left > 2 * PART_CHARS else max(TAIL_CHARS, left // 2)):
            out.append((start, i + 1))
            start, size, left = i + 1, 0, left - size
    if start < len(sizes) or not out:
        out.append((start, len(sizes)))
    return out


def _prepare(tok, texts: list, allowed_special, disallowed_special) -> tuple[list[str], set[str]]:
    """The texts as the encoder takes them (surrogates repaired) and the allowed special tokens,
    after every check that ``tok.encode`` makes, in the calling process: an error is raised here,
    for the first text that has one, before any worker starts."""
    for t in texts:
        if not isinstance(t, str):
            tok.encode(t)  # raises its TypeError
    allowed, disallowed = special_policy(tok.special_tokens, allowed_special, disallowed_special)
    finder = tok._special_re(disallowed) if disallowed else None  # noqa: SLF001 - the tokenizer's cached regex
    for t in texts:
        check_disallowed(t, finder)
    return list(map(repair_surrogates, texts)), allowed


def _encode_prepared(tok, texts: list[str], allowed: set[str]) -> list[list[int]]:
    """The ids of ``_prepare``'s texts: the text between allowed special tokens of all the texts
    encoded together, the special tokens' ids put in their places."""
    encoder = tok._ordinary  # noqa: SLF001 - the tokenizer's piece encoder and its cache
    if not allowed:
        return encoder.encode_many(texts)
    return encode_with_specials(encoder.encode_many, texts, tok._special_re(allowed).finditer,  # noqa: SLF001
                                tok.special_tokens)


def _id_dtype(tok) -> type:
    """The NumPy type that holds every id of ``tok``: 4 bytes where they fit."""
    return np.int32 if tok.vocab_size <= 1 << 31 else np.int64


def _packed_ids(tok, texts: list[str], allowed: set[str], packed: PackedEncoder | None) -> tuple[bytes, bytes]:
    """The ids of ``_prepare``'s texts as two arrays' bytes: the number of ids of each text (int64)
    and all the ids end to end (``_id_dtype``)."""
    if packed is not None:
        if allowed:
            ids = encode_with_specials(packed.encode_many, texts, tok._special_re(allowed).finditer,  # noqa: SLF001
                                       tok.special_tokens, single=lambda i: pack_ids((i,)), join=b"".join)
        else:
            ids = packed.encode_many(texts)
        counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)) // ID_SIZE
        return counts.tobytes(), b"".join(ids)
    ids = _encode_prepared(tok, texts, allowed)
    counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=_id_dtype(tok), count=int(counts.sum()))
    return counts.tobytes(), flat.tobytes()


def _serve(link, theirs, tok, job) -> None:
    """A worker's loop: do ``job``, then each job that comes (``_work``), until None comes, or
    once the process that started it is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's: it stops the workers
    for pool in list(_POOLS.values()):  # forked: the callers' ends of every pipe, this one's too
        for _, end in pool.workers:
            end.close()
    theirs.close()
    # No cyclic collections: one would scan what the worker inherits (copying those pages), and
    # what it makes holds no cycles (_work drops an error's traceback, which would).
    gc.disable()
    parent = os.getppid()
    packed = PackedEncoder(tok._ordinary) if _id_dtype(tok) is ID_TYPE else None  # noqa: SLF001
    outbox = _Outbox(link)
    while True:
        if job[0] == "job":  # else a claim that came after this worker's share was done
            _work(link, outbox.send, tok, job, packed)
        while not link.poll(1.0):
            if os.getppid() != parent:
                return
        try:
            job = link.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return


class _Outbox:
    """A worker's replies, written to its pipe by a thread of their own, in order: a part's ids may
    be more than the pipe holds, and the caller reads only between its own parts; the worker
    encodes on meanwhile."""

    def __init__(self, link):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._write, args=(link,), daemon=True).start()

    def send(self, message) -> None:
        self.queue.put(message)

    def _write(self, link) -> None:
        while True:
            message = self.queue.get()
            try:
                link.send(message)
            except OSError:  # the caller is gone: the worker's loop sees it too
                return
            except Exception as e:  # noqa: BLE001 - an error that cannot be pickled: its text is sent
                what = message[1] if message[0] == "error" else message[0]
                link.send(("error", RuntimeError(f"an encoding worker's reply could not be sent ({e!r}): {what!r}")))


def _work(link, send, tok, job, packed: PackedEncoder | None) -> None:
    """Encode the texts of ``job``, ("job", texts, allowed), and ``send`` back, part by part
    (``parts``), ("ok", the part's index, the number of ids of each text, all the ids end to end),
    both as array bytes, until the parts the caller has claimed ("mine", index of the first); then
    ("end",), or ("error", the exception) in place of the rest. ``packed``: the worker's encoder
    into bytes (None: the ids do not fit its type)."""
    try:
        _, texts, allowed = job
        cuts = parts([len(t) for t in texts])
        limit, i = len(cuts), 0
        while True:
            while link.poll():  # the caller claims parts from the back: ("mine", first of its parts)
                claim = link.recv()
                limit = min(limit, claim[1])
            if i >= limit:
                break
            a, b = cuts[i]
            send(("ok", i, *_packed_ids(tok, texts[a:b], allowed, packed)))
            i += 1
        reply = ("end",)
    except BaseException as e:  # noqa: BLE001 - sent to the caller, who raises it
        reply = ("error", e.with_traceback(None))  # its frames, this one's too, would hold it in a cycle
    send(reply)


class _Link:
    """One side of a worker's two one-way pipes: jobs go to the worker through one, its ids come
    back through the other, widened to PIPE_BYTES where the platform allows."""

    def __init__(self, incoming, outgoing):
        self.incoming, self.outgoing = incoming, outgoing

    def send(self, obj) -> None:
        self.outgoing.send(obj)

    def recv(self):
        return self.incoming.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.incoming.poll(timeout)

    def close(self) -> None:
        self.incoming.close()
        self.outgoing.close()


def _links(ctx) -> tuple[_Link, _Link]:
    """(the caller's side, the worker's side) of two new one-way pipes, each widened to PIPE_BYTES
    where the platform allows: a job's texts go out in a few writes, not one per 64 KiB."""
    jobs_in, jobs_out = ctx.Pipe(duplex=False)
    ids_in, ids_out = ctx.Pipe(duplex=False)
    try:
        import fcntl

        for end in (jobs_out, ids_out):
            fcntl.fcntl(end.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError, ValueError):  # not Linux, or a lower limit here
        pass
    return _Link(ids_in, jobs_out), _Link(jobs_in, ids_out)


class _Pool:
    """The worker processes of one tokenizer, kept for its later batches: a worker forked once keeps
    its own warm piece cache and its own pages, where one forked per batch would copy every page
    that it or the caller writes. Closed when the tokenizer is collected, and at exit (daemons)."""

    def __init__(self):
        self.pid = os.getpid()
        self.workers: list = []  # (process, the caller's end of its pipe)
        self.lock = threading.Lock()

    def take(self, tok, jobs: list) -> list:
        """A running worker for each of ``jobs`` (("job", texts, allowed)), given its job: one
        started now gets it at its start (forked, it inherits the texts, unpickled)."""
        for p, end in [w for w in self.workers if not w[0].is_alive()]:  # ended (killed, say): replaced
            end.close()
            self.workers.remove((p, end))
        # Forked, a worker's arguments are inherited, not pickled; spawned, the tokenizer is pickled
        # without its caches (Tokenizer.__getstate__).
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        running = min(len(self.workers), len(jobs))
        for (_, end), job in zip(self.workers, jobs[:running]):
            end.send(job)
        if running < len(jobs):
            tok._ordinary.share_table()  # noqa: SLF001 - its piece encoder, for the workers to inherit
        for job in jobs[running:]:
            mine, theirs = _links(ctx)
            p = ctx.Process(target=_serve, args=(theirs, mine, tok, job), daemon=True)
            p.start()
            theirs.close()
            self.workers.append((p, mine))
        return self.workers[:len(jobs)]

    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked copy: the workers are its parent's
            return
        workers, self.workers = self.workers, []
        for p, end in workers:
            try:
                end.send(None)
            except OSError:
                pass
            end.close()
        for p, _ in workers:
            p.join(timeout=1)
            if p.is_alive():
                p.terminate()
                p.join()


_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its _Pool


def _pool_of(tok) -> _Pool:
    pool = _POOLS.get(tok)
    if pool is None or pool.pid != os.getpid():  # none yet, or a forked copy of another process's
        pool = _POOLS[tok] = _Pool()
        weakref.finalize(tok, pool.close)
    return pool


def _lists(tok, counts: bytes, flat: bytes) -> list[list[int]]:
    """A worker's part as lists: ``counts``, each text's number of ids (int64), ``flat`` all the ids."""
    ends = np.cumsum(np.frombuffer(counts, dtype=np.int64)).tolist()
    return id_lists(np.frombuffer(flat, dtype=_id_dtype(tok)), ends, tok.vocab_size)


class _Share:
    """A worker's share of a batch while it is encoded: its parts (``parts``), the ids of those
    that came back, and the parts from ``limit`` on, which the caller claimed and encodes itself
    once its own share is done, from the back, so that the two finish together."""

    def __init__(self, worker, texts: list[str]):
        self.process, self.link = worker
        self.texts, self.cuts = texts, parts([len(t) for t in texts])
        self.ids: dict[int, list[list[int]]] = {}  # part -> its texts' ids, from the worker
        self.mine: dict[int, list[list[int]]] = {}  # the same, of the parts the caller claimed
        self.limit = len(self.cuts)
        self.ended = False
        self.error: BaseException | None = None

    def read(self, tok) -> None:
        """Take one message of the worker (waiting for it)."""
        try:
            message = self.link.recv()
        except EOFError:
            raise RuntimeError(f"an encoding worker process ended without its ids "
                               f"(exit code {self.process.exitcode})") from None
        if message[0] == "ok":
            self.ids[message[1]] = _lists(tok, *message[2:])
        else:
            self.ended = True
            if message[0] == "error":
                self.error = message[1]

    def read_ready(self, tok) -> None:
        while not self.ended and self.link.poll():
            self.read(tok)

    def steal(self, tok, allowed) -> bool:
        """Claim and encode the worker's last unclaimed part, when one is left beyond the part it
        is on; False when none is."""
        if self.ended or self.limit - 1 <= len(self.ids):
            return False
        self.limit -= 1
        self.link.send(("mine", self.limit))
        a, b = self.cuts[self.limit]
        self.mine[self.limit] = _encode_prepared(tok, self.texts[a:b], allowed)
        return True

    def result(self) -> list[list[int]]:
        out: list[list[int]] = []
        for i in range(len(self.cuts)):  # a part both encoded (the claim came late): the caller's
            out += self.mine[i] if i >= self.limit else self.ids[i]
        return out


def encode_batch(tok, texts: list[str], num_threads: int | None, allowed_special, disallowed_special,
                 ) -> list[list[int]]:
    """``[tok.encode(t, ...) for t in texts]``, in up to ``num_threads`` processes (default: the
    free cores; never more than the cores this process may run on), the calling one included."""
    if num_threads is None:
        num_threads = free_cores()
    elif not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be an int of at least 1, got {num_threads!r}")
    texts, allowed = _prepare(tok, texts, allowed_special, disallowed_special)
    bounds = plan([len(t) for t in texts], min(num_threads, default_workers()))
    if len(bounds) == 1:
        return _encode_prepared(tok, texts, allowed)
    shares = [texts[a:b] for a, b in zip(bounds, bounds[1:] + [len(texts)])]
    pool = _pool_of(tok)
    with pool.lock:
        try:
            jobs = [("job", share, allowed) for share in shares[1:]]
            theirs = [_Share(w, share) for w, share in zip(pool.take(tok, jobs), shares[1:])]
            out: list[list[int]] = []
            own = shares[0]
            for a, b in parts([len(t) for t in own]):
                out += _encode_prepared(tok, own[a:b], allowed)
                for share in theirs:
                    share.read_ready(tok)
            while True:  # the workers' last parts, taken from the back while any is left
                for share in theirs:
                    share.read_ready(tok)
                if not any(share.steal(tok, allowed) for share in theirs):
                    break
            for share in theirs:  # every reply read: the pipes stay in step
                while not share.ended:
                    share.read(tok)
        except BaseException:  # an interrupt, or a worker gone: replies may be left in the pipes
            pool.close()
            raise
    for share in theirs:
        if share.error is not None:
            raise share.error
    for share in theirs:
        out += share.result()
    return out
