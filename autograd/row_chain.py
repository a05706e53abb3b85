"""A chain of row-block ops run group by group: one hand-off to the pool for a whole stack of
fused sublayers instead of one per sublayer.

A fused sublayer's forward (ops/mlp.py, ops/swiglu.py, ops/self_attention.py) is row by row, or
batch entry by batch entry, and its output is the next sublayer's input. Run one op at a time,
every op hands its blocks to the pool and waits for the slowest of them before the next op
starts. Inside ``chain(rows)``, those ops record their blocks (``for_blocks``) instead of
running them, and leaving the chain runs them: each group of rows (whole blocks of every
recorded op) goes through all the ops in order as one task, so the groups run side by side
with no wait between ops. The blocks are each op's own (``parallel.chunk_bounds``), so every
number is the same as running the ops one by one, on any number of threads. Where the ops'
blocks share no cut but the first and the last row, the ops run one by one as usual.

The contract: a recorded block fn(lo, hi) reads, of what the chain's earlier ops output, only
its own rows (lo * unit to hi * unit); and nothing reads a recorded op's output before the chain
ends, when it is filled. Only a caller that knows every op inside may open a chain (GPT.forward
around its blocks, when every block runs as its two fused ops). What a chain records lives until
it ends: the callers open one where the ops keep their arrays for backward anyway.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

from autograd import parallel

ENABLED = True   # False: chain() records nothing (a benchmark's or a test's switch)
_open = threading.local()   # .ops: the open chain's recorded ops (or None), .rows: its rows


def chain(rows: int):
    """Context manager: record the row-block ops of `rows` rows called inside (``for_blocks``)
    and run them on leaving, group by group. Inside another chain of this thread, leaving runs
    what the outer one has recorded so far (what follows may read it)."""
    return _chain(rows) if ENABLED else nullcontext()


@contextmanager
def _chain(rows: int) -> Iterator[None]:
    if getattr(_open, "ops", None) is not None:
        yield
        ops, _open.ops = _open.ops, []
        run(ops, _open.rows)
        return
    _open.ops, _open.rows = [], rows
    try:
        yield
        ops = _open.ops
    finally:
        _open.ops = None      # left by an error: what was recorded is dropped with the graph
    run(ops, rows)


def for_blocks(fn: Callable[[int, int], None], n: int, row_elements: int, step: int, unit: int = 1,
               then: Callable[[], None] | None = None) -> None:
    """parallel.for_chunks(fn, n, row_elements, step), then then(): now, or recorded by the
    chain open on this thread when its n units of `unit` rows each are the chain's rows."""
    ops = getattr(_open, "ops", None)
    if ops is not None and n * unit == _open.rows:
        ops.append((fn, (n, row_elements, step), unit, then))
        return
    parallel.for_chunks(fn, n, row_elements, step)
    if then is not None:
        then()


def groups(ops: list, rows: int) -> list:
    """Rows (lo, hi) of the groups: cut where every op's blocks are cut."""
    cuts = set.intersection(*({lo * unit for lo, _ in parallel.chunk_bounds(*args)} for _, args, unit, _ in ops))
    edges = sorted(cuts | {rows})
    return list(zip(edges, edges[1:]))


def run(ops: list, rows: int) -> None:
    """Run recorded ops: by groups of rows on the pool, or one by one where there is one group."""
    if not ops:
        return
    spans = groups(ops, rows)
    if len(spans) < 2:
        for fn, args, _, then in ops:
            parallel.for_chunks(fn, *args)
            if then is not None:
                then()
        return
    blocks = [(fn, parallel.chunk_bounds(*args), unit) for fn, args, unit, _ in ops]

    def task(g0: int, g1: int) -> None:
        lo, hi = spans[g0][0], spans[g1 - 1][1]
        for fn, bounds, unit in blocks:
            for a, b in bounds:
                if lo <= a * unit < hi:
                    fn(a, b)

    parallel.for_chunks(task, len(spans), parallel.MIN_PARALLEL, step=1)
    for _, _, _, then in ops:
        if then is not None:
            then()
