"""Data-parallel training over MPI (mpi4py), with NCCL for the all-reduce when ranks are GPUs.

Launched the usual way, `mpiexec -n 4 gpt train ...`. Every rank holds a full model; each step
every rank draws the same global batch of `world_size * B` windows (one generator, same seed on
all ranks) and keeps its own slice, so the ranks together see exactly what one process with batch
`world_size * B` would see. Gradients are averaged in a few large flat buckets after backward and
before clipping, so the optimizer state stays identical on every rank without being sent.

mpi4py is imported only when the process runs under an MPI launcher with more than one rank.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

# Environment variables by which launchers announce the job size (MPICH/hydra, Open MPI, PMIx, Slurm).
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK", "SLURM_LOCALID")

DEFAULT_BUCKET_BYTES = 32 * 1024 * 1024
DEFAULT_TIMEOUT_S = 300.0


def launched_world_size(environ=os.environ) -> int:
    """The number of ranks the launcher started (1 when not under MPI)."""
    for var in _SIZE_VARS:
        value = environ.get(var)
        if value and value.isdigit():
            return int(value)
    return 1


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
    def from_environment(cls, timeout_s: float = DEFAULT_TIMEOUT_S) -> "Distributed | None":
        """A Distributed when launched with more than one MPI rank, else None (single process)."""
        if launched_world_size() <= 1:
            return None
        MPI = _import_mpi()
        comm = MPI.COMM_WORLD
        return cls(comm=comm, rank=comm.Get_rank(), world_size=comm.Get_size(), timeout_s=timeout_s)

    def local_rank(self) -> int:
        for var in _LOCAL_RANK_VARS:
            value = os.environ.get(var)
            if value and value.isdigit():
                return int(value)
        return self.rank

    def cuda_device(self) -> str:
        """One GPU per rank: the rank's local index modulo the GPUs on its machine."""
        from autograd.backend import cupy_module

        cp = cupy_module()
        return f"cuda:{self.local_rank() % cp.cuda.runtime.getDeviceCount()}"

    # ---- agreement between ranks ---------------------------------------------------------
    def check_same(self, what: str, value: Any) -> None:
        """Raise on every rank, naming the differing keys, when ranks disagree about `value`."""
        text = json.dumps(value, sort_keys=True, default=str)
        texts = self.comm.allgather(text)
        if all(t == text for t in texts):
            return
        bad = [r for r, t in enumerate(texts) if t != texts[0]]
        detail = ""
        mine, first = json.loads(text), json.loads(texts[0])
        if isinstance(mine, dict) and isinstance(first, dict):
            keys = sorted(k for k in set(mine) | set(first) if mine.get(k) != first.get(k))
            detail = f" (rank {self.rank} differs from rank 0 in {keys})" if keys else ""
        raise RuntimeError(f"ranks disagree about the {what}: ranks {bad} differ from rank 0{detail}")

    def broadcast_arrays(self, arrays: Iterable[Any]) -> None:
        """Overwrite every array in place with rank 0's values (initial weights)."""
        for arr in arrays:
            host = arr if isinstance(arr, np.ndarray) else arr.get()
            host = np.ascontiguousarray(host)
            self._wait(self.comm.Ibcast(host, root=0), "broadcast of the initial weights")
            if host is not arr:
                arr[...] = host if isinstance(arr, np.ndarray) else _to_like(host, arr)

    def allreduce_mean_scalar(self, value: float) -> float:
        """The mean of a Python number over ranks (losses for logging and evaluation)."""
        buf = np.array([value], dtype=np.float64)
        self._wait(self.comm.Iallreduce(self._mpi().IN_PLACE, buf, op=self._mpi().SUM), "loss all-reduce")
        return float(buf[0]) / self.world_size

    def barrier(self) -> None:
        self._wait(self.comm.Ibarrier(), "barrier")

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
            uid = nccl.get_unique_id() if self.is_main else None
            uid = self.comm.bcast(uid, root=0)
            self.nccl = nccl.NcclCommunicator(self.world_size, uid, self.rank)
        stream = cp.cuda.get_current_stream()
        kinds = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float16): nccl.NCCL_FLOAT16,
                 np.dtype(np.float64): nccl.NCCL_FLOAT64}
        for flat in reducer.flats:
            self.nccl.allReduce(flat.data.ptr, flat.data.ptr, flat.size, kinds[flat.dtype],
                                nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()

    # ---- internals -----------------------------------------------------------------------
    def _mpi(self):
        return _import_mpi()

    def _wait(self, request, what: str) -> None:
        """Wait for a non-blocking collective; a rank that died or hangs ends the job with a message."""
        deadline = time.monotonic() + self.timeout_s
        pause = 1e-5
        while not request.Test():
            if time.monotonic() > deadline:
                sys.stderr.write(
                    f"rank {self.rank}: the {what} did not complete within {self.timeout_s:.0f} s; another "
                    "rank probably died or is stuck. Aborting the whole job.\n"
                )
                sys.stderr.flush()
                self.comm.Abort(1)
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)


def _to_like(host: np.ndarray, like: Any) -> Any:
    from autograd.backend import xp_of

    return xp_of(like).asarray(host)


class GradientBuckets:
    """Flat buffers holding the gradients of consecutive parameters, a few large ones per model.

    Parameters are grouped in order, per dtype, until a bucket holds `bucket_bytes`; each
    all-reduce then moves one large contiguous buffer instead of one small one per parameter.
    """

    def __init__(self, params: list, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        from autograd.backend import xp_of

        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("no parameters that require gradients to all-reduce")
        xp = xp_of(self.params[0].data)
        self.xp = xp
        self.on_gpu = xp is not np
        self.groups: list[list] = []
        current: list = []
        size = 0
        for p in self.params:
            if current and (size + p.data.nbytes > bucket_bytes or p.data.dtype != current[0].data.dtype):
                self.groups.append(current)
                current, size = [], 0
            current.append(p)
            size += p.data.nbytes
        self.groups.append(current)
        self.flats = [xp.empty(sum(p.data.size for p in g), dtype=g[0].data.dtype) for g in self.groups]

    def pack(self) -> None:
        for group, flat in zip(self.groups, self.flats):
            offset = 0
            for p in group:
                n = p.data.size
                if p.grad is None:
                    flat[offset:offset + n] = 0
                else:
                    flat[offset:offset + n] = p.grad.reshape(-1)
                offset += n

    def unpack(self, scale: float) -> None:
        for group, flat in zip(self.groups, self.flats):
            flat *= flat.dtype.type(scale)
            offset = 0
            for p in group:
                n = p.data.size
                view = flat[offset:offset + n].reshape(p.data.shape)
                if p.grad is None:
                    p.grad = view.copy()
                else:
                    p.grad[...] = view
                offset += n
