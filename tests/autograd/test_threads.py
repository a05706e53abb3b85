"""The library's default threads are `gpt train`'s: chosen by autograd.threads at the first op
that would use the pool (never at import, for small ops or when set), GPT_THREADS and
set_threads over the measurement, a forked child choosing again.

Each case runs in a fresh Python process (the choice is made once per process), with the
measurement of other processes' CPU replaced by a fixed reading so that the expected count does
not depend on what else runs on the machine.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograd import parallel, threads

ROOT = Path(__file__).resolve().parents[2]

# A user's training step from Python: a small GPT (its activations are large enough for the
# pool), loss.backward(), AdamW.step(). `others` cores are reported busy by the measurement.
SCRIPT = r"""
import json, os, sys
import numpy as np
from autograd import parallel, threads

calls = []
def measured(seconds=0.3):
    calls.append(seconds)
    return float(os.environ["FAKE_OTHERS"])
parallel.other_cpu_use = measured

import autograd
from gpt import GPT, GPTConfig
from nn.optim import AdamW

if os.environ.get("SET_THREADS"):
    parallel.set_threads(int(os.environ["SET_THREADS"]))
model = GPT(GPTConfig(vocab_size=64, block_size=64, n_layer=1, n_head=4, n_embd=256, dropout=0.0))
opt = AdamW(model.parameters(), lr=1e-3)
small = (autograd.Tensor(np.ones((4, 4)), requires_grad=True) * 2.0).sum()
small.backward()
before_step = len(calls)

def step():
    idx = np.random.default_rng(0).integers(0, 64, (8, 64))
    _, loss = model(idx, idx)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss.item())

step()
out = {"before_step": before_step, "calls": len(calls), "threads": parallel.threads(),
       "blas": parallel.blas_threads()}
threads.free_cores.cache_clear()
out["apply_threads_would"] = threads.choose_threads()
if os.environ.get("FORK"):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        calls.clear()
        step()
        os.write(w, json.dumps({"calls": len(calls), "threads": parallel.threads()}).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out["child"] = json.loads(f.read())
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


def _run(others: float = 0.0, **env) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("GPT_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS") + threads._LOCAL_RANKS_ENV}
    clean.update({"FAKE_OTHERS": str(others), "PYTHONPATH": str(ROOT)}, **env)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=clean,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("others", [0.0, 1.0])
def test_a_step_from_python_computes_on_the_threads_gpt_train_would_choose(others):
    got = _run(others)
    assert got["before_step"] == 0          # import, building and small ops never measure
    assert got["calls"] == 1                # the step's first large op measures once
    assert got["threads"] == got["apply_threads_would"]
    assert got["threads"] == max(1, parallel.cpu_count() - int(others))
    if got["blas"] is not None:
        assert got["blas"] == 1             # as under gpt train: the pool splits the products


def test_gpt_threads_is_honoured_without_measuring():
    got = _run(GPT_THREADS="1", OPENBLAS_NUM_THREADS="2")
    assert got["calls"] == 0 and got["threads"] == 1 == got["apply_threads_would"]


def test_set_threads_wins_over_gpt_threads():
    got = _run(GPT_THREADS="1", SET_THREADS="3")
    assert got["calls"] == 0 and got["threads"] == 3


def test_ranks_under_an_mpi_launcher_share_the_free_cores():
    got = _run(MPI_LOCALNRANKS="2")
    assert got["threads"] == max(1, parallel.cpu_count() // 2)
    assert threads.launched_local_ranks({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 4
    assert threads.launched_local_ranks({}) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_chooses_again_unless_the_count_was_set():
    got = _run(FORK="1")
    assert got["child"] == {"calls": 1, "threads": got["threads"]}
    got = _run(FORK="1", SET_THREADS="2")
    assert got["child"] == {"calls": 0, "threads": 2}


def test_set_threads_none_returns_to_the_default(monkeypatch):
    before = parallel.threads()
    monkeypatch.setenv("GPT_THREADS", "1")
    try:
        parallel.set_threads(3)
        assert parallel.threads() == 3
        parallel.set_threads(None)
        parallel.for_chunks(lambda lo, hi: None, 4)      # small work: nothing chosen yet
        assert parallel._threads is None
        assert parallel.threads() == 1                   # GPT_THREADS, at the first ask
    finally:
        parallel.set_threads(before)
