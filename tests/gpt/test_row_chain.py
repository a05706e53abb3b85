"""The GPT's blocks as one chain of row-block ops (autograd/row_chain.py): group of rows by group,
with the same bits as the ops one at a time, on one thread and on two; where the chain cannot
cut groups or cannot open, and what an error inside it leaves."""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import parallel, row_chain
from gpt.model.config import GPTConfig
from gpt.model.gpt import GPT
from tests.autograd.test_prenorm import small_blocks  # noqa: F401 (autouse: blocks of a few rows)

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def split_small_work(small_blocks, monkeypatch):
    """Work of a few thousand values cut into blocks on the pool as (a)'s are at full size: the
    attention's tasks of two batch entries (of 16 positions), the MLP's blocks of 16 rows."""
    from autograd.ops import attention, mlp as mlp_op

    monkeypatch.setattr(parallel, "MIN_PARALLEL", 256)
    monkeypatch.setattr(attention, "TASK_SCORES", 1024)
    monkeypatch.setattr(mlp_op, "BLOCK_ELEMENTS", 512)


@pytest.fixture
def spans(monkeypatch):
    """What every chain ran: its groups' (lo, hi) rows, or "one by one"."""
    seen, run = [], row_chain.run

    def spy(ops, edges):
        seen.append(list(zip(edges, edges[1:])) if len(edges) > 2 else "one by one")
        return run(ops, edges)

    monkeypatch.setattr(row_chain, "run", spy)
    return seen


def _model(**overrides):
    cfg = dict(vocab_size=11, block_size=16, n_layer=3, n_head=2, n_embd=8, dropout=0.0)
    cfg.update(overrides)
    autograd.manual_seed(3)
    return GPT(GPTConfig(**cfg))


def _step(model, idx, targets, chained: bool, threads: int):
    """(logits, loss, {name: gradient}) of one forward and backward, the chain on or off."""
    before = parallel.threads()
    try:
        parallel.set_threads(threads)
        row_chain.ENABLED = chained
        logits, loss = model(idx, targets)
        loss.backward()
    finally:
        row_chain.ENABLED = True
        parallel.set_threads(before)
    grads = {n: p.grad.copy() for n, p in model.named_parameters()}
    model.zero_grad()
    return logits.data.copy(), loss.data.copy(), grads


def _assert_same(a, b):
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2].keys() == b[2].keys()
    for name in a[2]:
        np.testing.assert_array_equal(a[2][name], b[2][name], err_msg=name)


@pytest.mark.parametrize("overrides, dtype", [(dict(), np.float32), (dict(n_head=4), np.float64),
                                              (dict(norm="rmsnorm", pos="rope", mlp="swiglu", bias=False), np.float32)])
def test_chained_blocks_give_the_bits_of_the_ops_one_by_one(overrides, dtype, spans, monkeypatch):
    """GPT-2's block and LLaMA's (RMSNorm, RoPE, SwiGLU), float32 and float64; chained, every
    sublayer after the first writes over its input."""
    from autograd.ops import prenorm

    over, output_rows = [], prenorm.output_rows

    def spy(x2, *args):
        out = output_rows(x2, *args)
        over.append(out is x2)
        return out

    monkeypatch.setattr(prenorm, "output_rows", spy)
    model = _model(**overrides)
    if dtype is np.float64:
        model.to(dtype=np.float64)
    idx, targets = RNG.integers(0, 11, (4, 16)), RNG.integers(0, 11, (4, 16))
    plain = _step(model, idx, targets, chained=False, threads=2)
    assert spans == [] and not any(over)            # off: no chain ran, no sublayer wrote over its input
    for threads in (1, 2):
        over.clear()
        _assert_same(_step(model, idx, targets, chained=True, threads=threads), plain)
        assert over == [False] + [True] * 5, over
    assert len(spans) == 2 and all(s != "one by one" for s in spans), spans   # on: groups of rows ran


def test_the_chain_groups_cut_only_where_every_op_cuts(spans, monkeypatch):
    """The attention's tasks of one entry (cuts at rows 16, 32, 48), the MLP's blocks of 24 rows:
    the groups are cut where both cut."""
    from autograd.ops import attention, mlp as mlp_op

    monkeypatch.setattr(attention, "TASK_SCORES", 512)
    monkeypatch.setattr(mlp_op, "block_rows", lambda N, H: 24)
    model = _model()
    idx, targets = RNG.integers(0, 11, (4, 16)), RNG.integers(0, 11, (4, 16))
    plain = _step(model, idx, targets, chained=False, threads=2)
    _assert_same(_step(model, idx, targets, chained=True, threads=2), plain)
    assert spans == [[(0, 48), (48, 64)]]


def test_ops_that_share_no_cut_run_one_by_one(spans, monkeypatch):
    from autograd.ops import mlp as mlp_op

    monkeypatch.setattr(mlp_op, "block_rows", lambda N, H: 7)
    model = _model()
    idx, targets = RNG.integers(0, 11, (4, 16)), RNG.integers(0, 11, (4, 16))
    plain = _step(model, idx, targets, chained=False, threads=2)
    _assert_same(_step(model, idx, targets, chained=True, threads=2), plain)
    assert spans == ["one by one"]                   # once, when the second op met no common cut


def test_no_chain_where_a_block_does_not_fuse_calls_a_hook_or_keeps_no_graph(spans):
    """No chain: a block with an inspection record (it runs layer by layer) or a forward hook
    (which reads its output), a KV cache, or no graph (each op's arrays go when it returns)."""
    model = _model()
    idx = RNG.integers(0, 11, (2, 16))
    block = model.transformer.h[1]
    block.record = {}
    model(idx)
    block.record = None
    seen = []
    handle = block.register_forward_hook(lambda module, inputs, out: seen.append(out.data.copy()))
    model(idx)
    handle.remove()
    with autograd.no_grad():
        model(idx)
        model(idx, kv_caches=model.new_kv_caches(2))
    assert spans == []
    row_chain.ENABLED = False
    try:
        model.zero_grad()
        model(idx)[0].sum().backward()
    finally:
        row_chain.ENABLED = True
    plain = {n: p.grad.copy() for n, p in model.named_parameters()}
    model.zero_grad()
    model(idx)[0].sum().backward()
    assert len(spans) == 1
    np.testing.assert_array_equal(seen[0], _hooked_output(model, idx))
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.grad, plain[name], err_msg=name)


def _hooked_output(model, idx):
    """Block 1's output as a forward hook on it sees it with the chain off."""
    seen = []
    row_chain.ENABLED = False
    handle = model.transformer.h[1].register_forward_hook(lambda module, inputs, out: seen.append(out.data.copy()))
    try:
        model(idx)
    finally:
        handle.remove()
        row_chain.ENABLED = True
    return seen[0]


def test_an_inner_chain_runs_what_the_outer_one_recorded_so_far():
    ran = []
    with row_chain.chain(64):
        row_chain.for_blocks(lambda lo, hi: ran.append(("first", lo)), 64, 8, 32)
        with row_chain.chain(64):
            row_chain.for_blocks(lambda lo, hi: ran.append(("second", lo)), 64, 8, 32)
        assert sorted(ran) == [("first", 0), ("first", 32), ("second", 0), ("second", 32)]
        row_chain.for_blocks(lambda lo, hi: ran.append(("third", lo)), 64, 8, 32)
        assert len(ran) == 4                         # recorded by the outer chain, still open
    assert sorted(ran)[-2:] == [("third", 0), ("third", 32)]


def test_the_chain_cuts_blocks_where_for_chunks_does():
    for n, elements, step in [(64, 8, 16), (64, 8, 24), (10, 1, 5), (1, 10_000, 1), (64, 8, None)]:
        calls = []
        parallel.for_chunks(lambda lo, hi: calls.append((lo, hi)), n, elements, step)
        assert sorted(calls) == parallel.chunk_bounds(n, elements, step)


def test_an_error_inside_the_chain_drops_what_it_recorded():
    ran = []
    with pytest.raises(RuntimeError, match="stop"):
        with row_chain.chain(64):
            row_chain.for_blocks(lambda lo, hi: ran.append((lo, hi)), 64, 8, 16, then=lambda: ran.append("then"))
            assert ran == []                         # recorded, not run
            raise RuntimeError("stop")
    assert ran == []
    row_chain.for_blocks(lambda lo, hi: ran.append((lo, hi)), 64, 8, 16)   # no chain open any more: runs now
    assert ran == [(0, 16), (16, 32), (32, 48), (48, 64)]


def test_an_op_of_other_rows_inside_a_chain_runs_at_once():
    ran = []
    with row_chain.chain(64):
        row_chain.for_blocks(lambda lo, hi: ran.append(("chained", lo)), 64, 8, 32)
        row_chain.for_blocks(lambda lo, hi: ran.append(("other", lo)), 10, 1, 5)
        assert ran == [("other", 0)]
    assert sorted(ran) == [("chained", 0), ("chained", 32), ("other", 0)]


def test_an_output_is_written_over_only_while_the_chain_records_it():
    from autograd.ops import prenorm

    y = np.empty((64, 8))
    norm = object()                                  # a norm in front: x2 is not kept for backward
    assert not row_chain.take_output(y)
    with row_chain.chain(64):
        row_chain.for_blocks(lambda lo, hi: None, 64, 8, 32, output=y)
        assert prenorm.output_rows(y, None, True, 8) is not y        # no norm: the backward keeps x2
        assert prenorm.output_rows(y, norm, False, 8) is not y       # no skip
        assert not row_chain.take_output(y[:32]) and not row_chain.take_output(np.empty((64, 8)))
        assert prenorm.output_rows(y, norm, True, 8) is y
        assert not row_chain.take_output(y)          # taken once
        row_chain.for_blocks(lambda lo, hi: None, 64, 8, 32, output=y)
        with row_chain.chain(64):
            pass
        assert not row_chain.take_output(y)          # run by the inner chain: it may be read now
        row_chain.for_blocks(lambda lo, hi: None, 64, 8, 32, output=y)
        row_chain.for_blocks(lambda lo, hi: None, 64, 8, 7)       # no common cut: no longer recording
        assert not row_chain.take_output(y)
    assert not row_chain.take_output(y)
