"""Training across MPI ranks, ``mpiexec -n N bpe train --input ...``: every rank counts a share
of the inputs, rank 0 trains.

The files are cut into byte ranges of about a block (``files.corpus.block_ranges``: ranges whose
text tiles each file exactly, cut at chunk boundaries), range ``k`` goes to rank ``k % N``, and
each rank sends its chunk counts to rank 0 as JSON in raw byte buffers (not pickled). Counts add
up, so rank 0 learns the same merges as one process over all inputs; only rank 0 writes files.
Memory on every rank is bounded by the number of distinct chunks it holds.

A rank that fails (an unreadable file) sends its error instead of counts; rank 0 raises it and
every rank stops. mpi4py (the ``dist`` extra) is imported only under a launcher with N > 1.
"""
from __future__ import annotations

import array
import json
import os
from collections import Counter
from pathlib import Path

from ..files.corpus import block_ranges, file_sizes, read_blocks
from .chunk_counter import ChunkCounter, add_counts

# Environment variables by which launchers announce the job size (MPICH/hydra, Open MPI, PMIx).
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


def launched_world_size(environ=os.environ) -> int:
    """The number of ranks the launcher started (1 when not under MPI)."""
    for var in _SIZE_VARS:
        value = environ.get(var)
        if value and value.isdigit():
            return int(value)
    return 1


def world():
    """(comm, rank, size) under a launcher with more than one rank, else None."""
    if launched_world_size() <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeError(f"this process runs under an MPI launcher with {launched_world_size()} ranks "
                           "but mpi4py is not importable: install the extra with `pip install -e \".[dist]\"`") from None
    comm = MPI.COMM_WORLD
    return (comm, comm.Get_rank(), comm.Get_size()) if comm.Get_size() > 1 else None


def _count_share(files: list[Path], pattern: str, specials: list[str], rank: int, size: int) -> Counter:
    counter = ChunkCounter(pattern, specials)
    for k, (path, start, end) in enumerate(block_ranges(files, file_sizes(files))):
        if k % size == rank:
            for block in read_blocks(path, start, end, pattern=pattern):
                counter.add(block)
    return counter.result()


def _gather_bytes(comm, data: bytes) -> list[bytes] | None:
    """Every rank's bytes on rank 0 (None elsewhere), through raw buffers."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    sizes = array.array("q", [0] * size) if rank == 0 else None
    comm.Gather(array.array("q", [len(data)]), sizes, root=0)
    if rank != 0:
        comm.Gatherv(data, None, root=0)
        return None
    displs = [sum(sizes[:i]) for i in range(size)]
    buf = bytearray(sum(sizes))
    comm.Gatherv(data, [buf, list(sizes), displs, MPI.BYTE], root=0)
    return [bytes(buf[d : d + n]) for d, n in zip(displs, sizes)]


def count_files_across_ranks(files: list[Path], pattern: str, specials: list[str]) -> Counter | None:
    """The chunk counts of ``files`` summed over all ranks: on rank 0; None on the others.

    Must be called by every rank with the same arguments.
    """
    comm, rank, size = world()
    try:
        payload = {"ok": _count_share(files, pattern, specials, rank, size)}
    except Exception as e:  # sent to rank 0, so no rank waits forever for this one
        payload = {"error": f"rank {rank}: {type(e).__name__}: {e}"}
    parts = _gather_bytes(comm, json.dumps(payload, ensure_ascii=False).encode("utf-8"))
    decoded = [] if parts is None else [json.loads(p) for p in parts]
    error = comm.bcast(next((d["error"] for d in decoded if "error" in d), None), root=0)
    if error is not None:
        raise RuntimeError(f"chunk counting failed on {error}")
    if parts is None:
        return None
    total: Counter[str] = Counter()
    for d in decoded:
        add_counts(total, d["ok"])
    return total
