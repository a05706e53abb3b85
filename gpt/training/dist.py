"""Data-parallel training over MPI (mpi4py), with NCCL for the all-reduce when ranks are GPUs.

Launched the usual way, `mpiexec -n 4 gpt train ...`. Every rank holds a full model; each step
every rank draws the same global batch of `world_size * B` windows (one generator, same seed on
all ranks) and keeps its own slice, so the ranks together see exactly what one process with batch
`world_size * B` would see. Gradients are averaged in a few large flat buckets after backward and
before clipping, so the optimizer state stays identical on every rank without being sent.
Evaluation batches are split the same way and their losses averaged. An MoE layer's
load-balancing loss counts the tokens sent to each expert over all ranks (`sum_counts`), as one
process would over the whole batch. Dropout masks come from
the same seed on every rank (the same masks, applied to different windows), which keeps the
generator state a checkpoint saves identical on all ranks. Only rank 0 writes files and prints;
a checkpoint records the number of ranks, and resuming it with another number is an error.

A rank that fails alone ends the whole job (MPI_Abort) with a message; a collective that does not
complete within `timeout_s` (a rank died, hangs or was stopped; GPT_DIST_TIMEOUT seconds, default
DEFAULT_TIMEOUT_S) does the same, naming the ranks that never reached it: the ranks that time out
tell each other so by point-to-point messages, and the ranks not heard from within a grace period
are the stalled ones. Errors that every rank meets alike (settings that differ between ranks, a
checkpoint of another world size or a corrupt one, data that does not fit the settings, a
diverged run) are raised on every rank with `every_rank = True`, so rank 0 reports them once and
all exit cleanly.

mpi4py is imported only when the process runs under an MPI launcher with more than one rank.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bpe.train.mpi_count import launched_world_size  # noqa: F401 (how launchers announce the job size)
from gpt.training.buckets import GradientBuckets

_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK", "SLURM_LOCALID")

DEFAULT_TIMEOUT_S = 300.0
_MAX_NAP_S = 1e-3  # the longest nap between Test() calls, in seconds
_SPIN_S = 0.05  # seconds a wait polls without sleeping
_JOB_TIMEOUT = -1.0  # "the Distributed's own timeout_s" as a default argument
TIMEOUT_ENV = "GPT_DIST_TIMEOUT"
_WAITING_TAG = 0x7A17  # the point-to-point "I am waiting too" of a timed-out collective


class RanksDisagree(ValueError):
    """Ranks were started with different settings; raised on every rank."""

    every_rank = True


def mark_every_rank(exc: BaseException) -> BaseException:
    """Flag `exc` as one that every rank raises alike (so no rank needs to abort the job)."""
    exc.every_rank = True
    return exc


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError(
            f"this process runs under an MPI launcher with {launched_world_size()} ranks but mpi4py is "
            "not importable: install the extra with `pip install -e \".[dist]\"`"
        ) from exc
    return MPI


@dataclass
class Distributed:
    """One rank's view of the job: its rank, the world size and the collectives it needs."""

    comm: Any
    rank: int
    world_size: int
    timeout_s: float = DEFAULT_TIMEOUT_S
    nccl: Any = None  # a cupy NcclCommunicator once a GPU gradient is reduced
    _reducers: dict = field(default_factory=dict)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ---- setup -------------------------------------------------------------------------
    @classmethod
    def from_environment(cls, timeout_s: float | None = None) -> "Distributed | None":
        """A Distributed when launched with more than one MPI rank, else None (single process).
        timeout_s: of every collective; None: $GPT_DIST_TIMEOUT, else DEFAULT_TIMEOUT_S."""
        if launched_world_size() <= 1:
            return None
        if timeout_s is None:
            timeout_s = _timeout_from_environment()
        MPI = _import_mpi()
        comm = MPI.COMM_WORLD
        if comm.Get_size() <= 1:
            return None
        return cls(comm=comm, rank=comm.Get_rank(), world_size=comm.Get_size(), timeout_s=timeout_s)

    def local_rank(self) -> int:
        for var in _LOCAL_RANK_VARS:
            value = os.environ.get(var)
            if value and value.isdigit():
                return int(value)
        return self.rank

    def cuda_device(self) -> str:
        """One GPU per rank: the rank's local index modulo the GPUs on its machine. The device
        becomes CuPy's current one, so buffers and the NCCL communicator are created on it."""
        from autograd.backend import cupy_module

        cp = cupy_module()
        index = self.local_rank() % cp.cuda.runtime.getDeviceCount()
        cp.cuda.Device(index).use()
        return f"cuda:{index}"

    # ---- agreement between ranks ---------------------------------------------------------
    def check_same(self, what: str, value: Any) -> None:
        """Raise RanksDisagree on every rank, naming the ranks and keys that differ from rank 0."""
        text = json.dumps(value, sort_keys=True, default=str)
        texts = self.allgather_object(text, f"check of the {what}")
        if all(t == texts[0] for t in texts):
            return
        first = json.loads(texts[0])
        parts = []
        for r, t in enumerate(texts):
            if t == texts[0]:
                continue
            other = json.loads(t)
            if isinstance(other, dict) and isinstance(first, dict):
                keys = sorted(k for k in set(other) | set(first) if other.get(k) != first.get(k))
                parts.append(f"rank {r}: " + ", ".join(f"{k}={other.get(k)!r} (rank 0: {first.get(k)!r})"
                                                      for k in keys))
            else:
                parts.append(f"rank {r}: {other!r} (rank 0: {first!r})")
        raise RanksDisagree(f"ranks disagree about the {what}: " + "; ".join(parts)
                            + ". Start every rank with the same command line.")

    def any(self, flags: Iterable[bool]) -> list[bool]:
        """For each flag: whether it is set on any rank (stop requests, time budgets)."""
        buf = np.array([1 if f else 0 for f in flags], dtype=np.int32)
        self._wait(self.comm.Iallreduce(self._mpi().IN_PLACE, buf, op=self._mpi().MAX), "stop agreement")
        return [bool(v) for v in buf]

    def allgather_object(self, obj: Any, what: str) -> list:
        """Every rank's `obj` (JSON-able), in rank order, with the collective timeout."""
        data = np.frombuffer(_encode(obj), dtype=np.uint8)
        sizes = np.zeros(self.world_size, dtype=np.int64)
        self._wait(self.comm.Iallgather(np.array([data.size], dtype=np.int64), sizes), what)
        out = np.empty(int(sizes.sum()), dtype=np.uint8)
        counts = [int(s) for s in sizes]
        displs = [int(d) for d in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
        self._wait(self.comm.Iallgatherv(data, [out, counts, displs, self._mpi().BYTE]), what)
        return [_decode(out[d:d + c].tobytes()) for d, c in zip(displs, counts)]

    def broadcast_object(self, obj: Any, what: str, timeout_s: float | None = _JOB_TIMEOUT) -> Any:
        """Rank 0's `obj` on every rank. timeout_s=None waits as long as rank 0 needs (data
        preparation); rank 0 failing meanwhile aborts the job, which ends the wait."""
        data = np.frombuffer(_encode(obj), dtype=np.uint8) if self.is_main else None
        size = np.array([data.size if self.is_main else 0], dtype=np.int64)
        self._wait(self.comm.Ibcast(size, root=0), what, timeout_s)
        if not self.is_main:
            data = np.empty(int(size[0]), dtype=np.uint8)
        else:
            data = data.copy()  # a writable buffer
        self._wait(self.comm.Ibcast(data, root=0), what, timeout_s)
        return obj if self.is_main else _decode(data.tobytes())

    def run_on_main(self, fn: Callable[[], Any], what: str, timeout_s: float | None = None) -> Any:
        """fn() on rank 0, its result on every rank. An exception of fn is raised on every rank
        (rank 0: the original; others: a RuntimeError), marked every_rank so none aborts."""
        result = error = None
        if self.is_main:
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
                error = exc
        payload = self.broadcast_object(
            ("ok", result) if error is None else ("error", f"{type(error).__name__}: {error}"), what, timeout_s)
        if payload[0] == "ok":
            return payload[1]
        if error is not None:
            raise mark_every_rank(error)
        raise mark_every_rank(RuntimeError(f"rank 0 failed during the {what}: {payload[1]}"))

    def run_on_all(self, fn: Callable[[], Any], what: str) -> Any:
        """fn() on every rank -> its result there. An error that every rank meets with the same
        message (a corrupt checkpoint, a data folder without val.bin) is raised marked every_rank,
        so rank 0 reports it once; one met by some ranks only is raised unmarked there (ending the
        job), while the other ranks wait to be ended with it."""
        result = error = None
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - compared across ranks, then re-raised
            error = exc
        mine = None if error is None else f"{type(error).__name__}: {error}"
        outcomes = self.allgather_object(mine, f"outcome of the {what}")
        if error is not None:
            raise mark_every_rank(error) if all(o == mine for o in outcomes) else error
        if any(o is not None for o in outcomes):
            self.barrier()  # never completes: the failed ranks end the job (or the timeout does)
        return result

    def broadcast_arrays(self, arrays: Iterable[Any]) -> None:
        """Overwrite every array in place with rank 0's values (initial weights)."""
        for arr in arrays:
            host = arr if isinstance(arr, np.ndarray) else arr.get()
            host = np.ascontiguousarray(host)
            self._wait(self.comm.Ibcast(host, root=0), "broadcast of the initial weights")
            if host is not arr:
                arr[...] = host if isinstance(arr, np.ndarray) else _to_like(host, arr)

    def allreduce_mean_scalar(self, value: float) -> float:
        """The mean of a Python number over ranks (losses for logging and evaluation); NaN or
        inf on any rank gives NaN or inf on all."""
        buf = np.array([value], dtype=np.float64)
        self._wait(self.comm.Iallreduce(self._mpi().IN_PLACE, buf, op=self._mpi().SUM), "loss all-reduce")
        return float(buf[0]) / self.world_size

    def sum_counts(self, counts: Any) -> Any:
        """The sum over ranks of an integer array (an MoE layer's tokens per expert), as an array
        of the same backend (numpy or cupy)."""
        host = np.ascontiguousarray(counts if isinstance(counts, np.ndarray) else counts.get(), dtype=np.int64)
        self._wait(self.comm.Iallreduce(self._mpi().IN_PLACE, host, op=self._mpi().SUM), "MoE load all-reduce")
        return host if isinstance(counts, np.ndarray) else _to_like(host, counts)

    def barrier(self, timeout_s: float | None = _JOB_TIMEOUT) -> None:
        self._wait(self.comm.Ibarrier(), "barrier", timeout_s)

    def abort(self, message: str, code: int = 1) -> None:
        """Print `message` and end every rank of the job now (MPI_Abort)."""
        sys.stdout.flush()
        sys.stderr.write(message.rstrip("\n") + "\n")
        sys.stderr.flush()
        # mpiexec forwards the ranks' output through pipes and tears them down on an abort:
        # without a moment to forward it, the message was lost in 3 of 10 runs here.
        time.sleep(0.5)
        self.comm.Abort(code)

    # ---- gradients -----------------------------------------------------------------------
    def allreduce_gradients(self, params: list) -> float:
        """Average `.grad` of `params` over ranks in flat buckets; return the seconds it took."""
        key = tuple(id(p) for p in params)
        reducer = self._reducers.get(key)
        if reducer is None:
            reducer = self._reducers[key] = GradientBuckets(params)
        start = time.perf_counter()
        reducer.pack()
        if reducer.on_gpu:
            self._allreduce_nccl(reducer)
        else:
            # All buckets are in flight at once; MPI moves them while we wait on the first.
            requests = [self.comm.Iallreduce(self._mpi().IN_PLACE, flat, op=self._mpi().SUM)
                        for flat in reducer.flats]
            for req in requests:
                self._wait(req, "gradient all-reduce")
        reducer.unpack(scale=1.0 / self.world_size)
        return time.perf_counter() - start

    def _allreduce_nccl(self, reducer: "GradientBuckets") -> None:
        import cupy as cp
        from cupy.cuda import nccl

        if self.nccl is None:
            uid = self.broadcast_object(list(nccl.get_unique_id()) if self.is_main else None, "NCCL set-up")
            uid = tuple(uid)
            self.nccl = nccl.NcclCommunicator(self.world_size, uid, self.rank)
        stream = cp.cuda.get_current_stream()
        kinds = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float16): nccl.NCCL_FLOAT16,
                 np.dtype(np.float64): nccl.NCCL_FLOAT64}
        for flat in reducer.flats:
            self.nccl.allReduce(flat.data.ptr, flat.data.ptr, flat.size, kinds[flat.dtype],
                                nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()  # the time measured is the all-reduce's, not the next kernel's

    # ---- internals -----------------------------------------------------------------------
    def _mpi(self):
        return _import_mpi()

    def _wait(self, request, what: str, timeout_s: float | None = _JOB_TIMEOUT) -> None:
        """Wait for a non-blocking collective; a rank that died or hangs ends the job with a message."""
        limit = self.timeout_s if timeout_s == _JOB_TIMEOUT else timeout_s
        start = time.monotonic()
        deadline = None if limit is None else start + limit
        # MPI moves a non-blocking collective forward only inside MPI calls: Test() back to back
        # at first, yielding the core between tests to any process that wants it (napping from the
        # start slows a short all-reduce down), then with naps that double up to _MAX_NAP_S once
        # the wait is long (a slow rank, or rank 0 preparing data).
        pause = 0.0
        while not request.Test():
            now = time.monotonic()
            if deadline is not None and now > deadline:
                self.abort(f"rank {self.rank}: the {what} did not complete within {limit:g} s; "
                           f"{self._who_is_missing(limit)}. Aborting the whole job.")
            if now - start < _SPIN_S:
                os.sched_yield()
            else:
                pause = min(max(pause * 2, 1e-5), _MAX_NAP_S)
                time.sleep(pause)

    def _who_is_missing(self, limit: float) -> str:
        """Which ranks never reached the collective: every rank that times out sends the others a
        word; those not heard from within the grace period (a quarter of the timeout, 1 to 10 s)
        are stopped, stuck or dead."""
        others = [r for r in range(self.world_size) if r != self.rank]
        word = np.array([self.rank], dtype=np.int32)
        heard = {r: np.zeros(1, dtype=np.int32) for r in others}
        recvs = {r: self.comm.Irecv(heard[r], source=r, tag=_WAITING_TAG) for r in others}
        self._sends = [self.comm.Isend(word, dest=r, tag=_WAITING_TAG) for r in others]  # alive until the abort
        end = time.monotonic() + min(10.0, max(1.0, limit / 4))
        while time.monotonic() < end and not all(req.Test() for req in recvs.values()):
            time.sleep(_MAX_NAP_S)
        missing = [r for r, req in recvs.items() if not req.Test()]
        if not missing:
            return "every rank is alive but they wait in different collectives"
        return (f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never reached it "
                f"(stopped, stuck or dead; the others waited)")


def _timeout_from_environment() -> float:
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds above 0, got {value!r}")
    return seconds


def check_resume_world_size(meta: dict, world_size: int, path) -> None:
    """Raise (on every rank alike) when a checkpoint was written by another number of ranks: its
    step meant a global batch of that many x --batch-size, and its data position with it."""
    from gpt.training.checkpoint import CheckpointError

    saved = int(meta.get("world_size", 1))  # checkpoints from before data-parallel runs: one process
    if saved != world_size:
        how = f"with `mpiexec -n {saved} gpt train" if saved > 1 else "in one process, with `gpt train"
        raise mark_every_rank(CheckpointError(
            f"checkpoint {str(path)!r} was written by a run of {saved} rank(s) (a global batch of "
            f"{saved} x --batch-size) and this run has {world_size}: resume it "
            f"{how} --resume {Path(path).parent}`"))


def weights_checksum(params: Iterable[Any]) -> str:
    """A digest of every parameter's float64 sum (summed on its device, one transfer): equal on
    ranks whose weights are equal, and almost surely not otherwise."""
    import hashlib

    from autograd.backend import xp_of

    params = list(params)
    xp = xp_of(params[0].data)
    sums = xp.stack([xp.sum(p.data, dtype=np.float64) for p in params])
    host = sums if xp is np else sums.get()
    return hashlib.sha1(np.ascontiguousarray(host).tobytes()).hexdigest()[:16]


def _encode(obj: Any) -> bytes:
    """Messages between ranks travel as JSON (plain data only: no pickle, even between ranks)."""
    return json.dumps(obj).encode("utf-8")


def _decode(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def _to_like(host: np.ndarray, like: Any) -> Any:
    from autograd.backend import xp_of

    return xp_of(like).asarray(host)
