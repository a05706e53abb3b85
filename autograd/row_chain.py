"""A chain of row-block ops run group by group: one hand-off to the pool for a whole stack of
fused sublayers instead of one per sublayer.

A fused sublayer's forward (ops/mlp.py, ops/swiglu.py, ops/self_attention.py) is row by row, or
batch entry by batch entry, and its output is the next sublayer's input. Run one op at a time,
every op hands its blocks to the pool and waits for the slowest of them before the next op
starts. Inside ``chain(rows)``, those ops record their blocks (``for_blocks``) instead of
running them, and leaving the chain runs them: each group of rows (whole blocks of every
recorded op) goes through all the ops in order as one task, so the groups run side by side
with no wait between ops. The blocks are each op's own (the same bounds as
``parallel.for_chunks`` gives it), so every number is the same as running the ops one by one,
on any number of threads. Where the ops' blocks share no bounds but the first and last, the ops
run one by one as usual.

Only a caller that knows every op in the chain records (GPT.forward around its blocks when every
block fuses) may open one: an array an op outputs is filled only when the chain ends, so
nothing inside may read it before.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from autograd import parallel

_open = threading.local()   # .ops: the recorded ops of the chain open on this thread, or None


@contextmanager
def chain(rows: int) -> Iterator[None]:
    """Record the row-block ops of `rows` rows called inside (``for_blocks``) and run them on
    leaving, group by group. A chain already open on this thread takes them instead."""
    if getattr(_open, "ops", None) is not None:
        yield
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


def _bounds(n: int, row_elements: int, step: int) -> list:
    """The (lo, hi) blocks parallel.for_chunks(fn, n, row_elements, step) calls fn with."""
    if n < 2 or n * row_elements < parallel.MIN_PARALLEL:
        return [(0, n)]
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def groups(ops: list, rows: int) -> list:
    """Rows (lo, hi) of the groups: cut where every op's blocks are cut."""
    cuts = set.intersection(*({lo * unit for lo, _ in _bounds(*args)} for _, args, unit, _ in ops))
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
    blocks = [(fn, _bounds(*args), unit) for fn, args, unit, _ in ops]

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

