"""A chain of row-block ops run group by group: one hand-off to the pool for a whole stack of
fused sublayers instead of one per sublayer.

A fused sublayer's forward (ops/mlp.py, ops/swiglu.py, ops/self_attention.py) is row by row, or
batch entry by batch entry, and its output is the next sublayer's input. Run one op at a time,
every op hands its blocks to the pool and waits for the slowest of them before the next op
starts. Inside ``chain(rows)``, those ops record their blocks (``for_blocks``) instead of
running them, and leaving the chain runs them: each group of rows (whole blocks of every
recorded op) goes through all the ops in order as one task, so the groups run side by side
with no wait between ops. The blocks are each op's own (``parallel.chunk_bounds``), so every
number is the same as running the ops one by one, on any number of threads. As soon as the
ops' blocks share no cut but the first row, no group can form: what was recorded runs then,
one op at a time, and so does every later op of the chain, as if there were none.

The contract: a recorded block fn(lo, hi) reads, of what the chain's earlier ops output, only
its own rows (lo * unit to hi * unit); nothing reads a recorded op's output before the chain
ends, when it is filled; and an output an op declares (``for_blocks``'s `output`) is read by
one later op only, its input, which may write its own output over it (``take_output``): nothing
else, in the chain or after it, may read or keep it. Only a caller that knows every op inside
may open a chain (GPT.forward around its blocks, when every block runs as its two fused ops).
What a chain records, the ops' inputs included, lives until it ends: the callers open one where
the ops keep their arrays for backward anyway.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator

from autograd import parallel

ENABLED = True   # False: chain() records nothing (a benchmark's or a test's switch)


class _Open(threading.local):
    """This thread's open chain: its recorded ops (None: no chain open), the rows they cover
    (None once no group can form), the rows where every op recorded so far cuts, and the
    (address, bytes) of the outputs they declared."""
    ops: list | None = None
    rows: int | None = None
    cuts: set = frozenset()
    outputs: set = frozenset()


_open = _Open()


def chain(rows: int):
    """Context manager: record the row-block ops of `rows` rows called inside (``for_blocks``)
    and run them on leaving, group by group. Inside another chain of this thread, leaving runs
    what the outer one has recorded so far (what follows may read it)."""
    return _chain(rows) if ENABLED else nullcontext()


@contextmanager
def _chain(rows: int) -> Iterator[None]:
    if _open.ops is not None:
        yield
        _run_recorded()
        return
    _open.ops, _open.rows, _open.outputs = [], rows, set()
    try:
        yield
        _run_recorded()
    finally:
        _open.ops = _open.rows = None   # left by an error: what was recorded is dropped with the graph
        _open.outputs = frozenset()


def for_blocks(fn: Callable[[int, int], None], n: int, row_elements: int, step: int, unit: int = 1,
               then: Callable[[], None] | None = None, output=None) -> None:
    """parallel.for_chunks(fn, n, row_elements, step), then then(): now, or recorded by the
    chain open on this thread when its n units of `unit` rows each are the chain's rows.
    output: the array the blocks fill, all of it, which the op keeps no reference to for its
    backward (declared for `take_output`), or None."""
    ops = _open.ops
    if ops is None or n * unit != _open.rows:
        parallel.for_chunks(fn, n, row_elements, step)
        if then is not None:
            then()
        return
    cuts = {lo * unit for lo, _ in parallel.chunk_bounds(n, row_elements, step)}
    _open.cuts = cuts if not ops else _open.cuts & cuts
    ops.append((fn, (n, row_elements, step), unit, then))
    if output is not None:
        _open.outputs.add(_extent(output))
    if len(_open.cuts) < 2:      # no group can form: the ops run one by one from here on
        _open.rows = None
        _run_recorded()


def take_output(a) -> bool:
    """Whether the chain open on this thread records ops and `a` is the whole of an output one of
    them declared, which the caller, the op taking it as its input, may then write over
    (autograd/ops/prenorm.output_rows); taken once: a second taker is told no."""
    if _open.rows is None:
        return False
    key = _extent(a)
    if key not in _open.outputs:
        return False
    _open.outputs.discard(key)
    return True


def _extent(a) -> tuple:
    return a.__array_interface__["data"][0], a.nbytes


def _run_recorded() -> None:
    """Run what the open chain has recorded and forget it (its outputs may be read from now on)."""
    ops, _open.ops, _open.outputs = _open.ops, [], set()
    if ops:
        run(ops, sorted(_open.cuts) + [_open.rows])


def run(ops: list, edges: list) -> None:
    """Run recorded ops: by the groups of rows between `edges` on the pool, or one by one (each
    op dropped once it has run) where there is one group."""
    if len(edges) < 3:
        while ops:
            fn, args, _, then = ops.pop(0)
            parallel.for_chunks(fn, *args)
            if then is not None:
                then()
        return
    blocks = [(fn, parallel.chunk_bounds(*args), unit) for fn, args, unit, _ in ops]

    def task(g0: int, g1: int) -> None:
        lo, hi = edges[g0], edges[g1]
        for fn, bounds, unit in blocks:
            for a, b in bounds:
                if lo <= a * unit < hi:
                    fn(a, b)

    parallel.for_chunks(task, len(edges) - 1, parallel.MIN_PARALLEL, step=1)
    for _, _, _, then in ops:
        if then is not None:
            then()
