"""gpt.training.dist and `mpiexec -n 2 gpt train`: 2 ranks of batch B train exactly like 1 process of batch
2B, their checkpoints resume exactly, ranks that disagree or hang end the job with a message.

The MPI tests start the ranks themselves through the mpiexec of the `dist` extra (mpi4py + mpich
from PyPI) and skip, saying why, where either is missing. Bucket packing and batch sharding are
checked in-process, without MPI.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gpt.training.checkpoint import CheckpointError, load_checkpoint
from gpt.data import prepare
from gpt.training.buckets import GradientBuckets
from gpt.training.dist import Distributed, launched_world_size
from gpt.data.loader import BatchLoader, fixed_batches
from gpt.training.progress import ProgressLine, read_metrics
from gpt.training.trainer import train
from gpt.training.config import TrainConfig
from nn import Parameter


# ---- in-process: buckets and shards -----------------------------------------------------------
def _params(shapes, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    ps = [Parameter(rng.standard_normal(s).astype(dtype)) for s in shapes]
    for p in ps:
        p.grad = rng.standard_normal(p.shape).astype(dtype)
    return ps


def test_buckets_split_by_size_and_dtype_and_keep_parameter_order():
    ps = _params([(4, 3), (5,), (2, 2)]) + _params([(3,)], dtype=np.float64) + _params([(6,)])
    buckets = GradientBuckets(ps, bucket_bytes=16 * 4)  # room for 16 float32 numbers
    assert [[id(p) for p in g] for g in buckets.groups] == [[id(ps[0])], [id(ps[1]), id(ps[2])],
                                                            [id(ps[3])], [id(ps[4])]]
    assert [f.dtype for f in buckets.flats] == [np.float32, np.float32, np.float64, np.float32]
    # each bucket: the gradients, then one has-gradient flag per parameter
    assert [f.size for f in buckets.flats] == [12 + 1, 5 + 4 + 2, 3 + 1, 6 + 1]


def test_pack_then_unpack_scales_every_gradient_in_place():
    ps = _params([(4, 3), (5,), (2, 2)])
    before = [p.grad.copy() for p in ps]
    arrays = [p.grad for p in ps]
    buckets = GradientBuckets(ps, bucket_bytes=40)
    buckets.pack()
    np.testing.assert_array_equal(buckets.flats[0][:12], before[0].reshape(-1))
    buckets.unpack(scale=0.5)
    for p, g, arr in zip(ps, before, arrays):
        np.testing.assert_array_equal(p.grad, g * np.float32(0.5))
        assert p.grad is arr  # written in place, shapes kept


def test_summed_buckets_of_two_ranks_unpack_to_the_mean_and_missing_gradients_stay_none():
    """What the all-reduce does, by hand: sum the flat buffers of two 'ranks', unpack with 1/2."""
    rank0, rank1 = _params([(3, 2), (4,), (2,)], seed=1), _params([(3, 2), (4,), (2,)], seed=2)
    rank0[1].grad = None                   # used on rank 1 only (e.g. an MoE expert): gets the mean
    rank0[2].grad = rank1[2].grad = None   # used by no rank: stays None, as on one process
    expected = [(rank0[0].grad + rank1[0].grad) / 2, rank1[1].grad / 2]
    b0, b1 = GradientBuckets(rank0), GradientBuckets(rank1)
    b0.pack(), b1.pack()
    for f0, f1 in zip(b0.flats, b1.flats):
        f0 += f1
    b0.unpack(scale=0.5)
    np.testing.assert_allclose(rank0[0].grad, expected[0], rtol=1e-6)
    np.testing.assert_allclose(rank0[1].grad, expected[1], rtol=1e-6)
    assert rank0[2].grad is None


def test_a_shared_parameter_is_reduced_once():
    p = _params([(3,)])[0]
    assert len(GradientBuckets([p, p]).params) == 1


def test_shards_of_the_global_batch_make_up_the_single_process_batch():
    tokens = np.arange(500, dtype=np.uint16)
    whole = BatchLoader(tokens, 6, 8, seed=3)
    shards = [BatchLoader(tokens, 2, 8, seed=3, shard=(r, 3)) for r in range(3)]
    for _ in range(4):
        x, y = whole.next_batch()
        parts = [s.next_batch() for s in shards]
        np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), x)
        np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)
    # the generator state is the same on every rank: rank 0's checkpoint resumes all of them
    assert all(s.state_dict() == whole.state_dict() for s in shards)
    fixed = fixed_batches(tokens, 2, 2, 8, seed=5, shard=(1, 2))
    np.testing.assert_array_equal(fixed[0][0], fixed_batches(tokens, 2, 4, 8, seed=5)[0][0][2:])
    with pytest.raises(ValueError, match="shard"):
        BatchLoader(tokens, 2, 8, shard=(2, 2))


def test_no_launcher_means_one_process(monkeypatch):
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert launched_world_size() == 1 and Distributed.from_environment() is None
    assert launched_world_size({"PMI_SIZE": "4"}) == 4


# ---- under mpiexec ----------------------------------------------------------------------------
def _mpiexec():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None, "mpi4py is not installed (pip install -e '.[dist]')"
    here = Path(sys.executable).parent / "mpiexec"
    exe = str(here) if here.is_file() else shutil.which("mpiexec")
    if exe is None:
        return None, "no mpiexec next to the Python executable or on PATH (pip install -e '.[dist]')"
    return exe, ""


MPIEXEC, WHY = _mpiexec()
def needs_mpi(test):
    """An MPI launch: skipped without mpiexec, marked slow (a heavy share of the suite's time)."""
    return pytest.mark.slow(pytest.mark.skipif(MPIEXEC is None, reason=WHY)(test))


def _launch(ranks, timeout=120):
    """Run `mpiexec -n r1 argv1 : -n r2 argv2 ...`; ranks: list of (count, argv after python)."""
    cmd = [MPIEXEC]
    for i, (n, argv) in enumerate(ranks):
        cmd += ([":"] if i else []) + ["-n", str(n), sys.executable] + argv
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mpiexec did not finish in {timeout} s:\n{out}\n{err}")
    return proc.returncode, out, err


def _train_argv(data_dir, out, **kw):
    args = dict(data=data_dir, out=out, n_layer=2, n_head=2, n_embd=16, block_size=16, batch_size=2,
                grad_accum=2, dropout=0.0, max_steps=6, lr_decay_steps=6, warmup_steps=2, lr=3e-3,
                min_lr=3e-4, eval_interval=3, eval_batches=2, log_interval=1, samples=0,
                peak_flops=1e9, seed=7)
    args.update(kw)
    argv = ["-m", "gpt.cli", "train"]
    for k, v in args.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return argv


def _gpt_train(n, data_dir, out, **kw):
    rc, stdout, stderr = _launch([(n, _train_argv(data_dir, out, **kw))])
    assert rc == 0, f"mpiexec -n {n} gpt train failed ({rc}):\n{stdout}\n{stderr}"
    return stdout


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("distdata")
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]
    text = "".join(words[rng.integers(len(words))] + (".\n" if i % 9 == 8 else " ") for i in range(4000))
    (root / "corpus.txt").write_text(text)
    prepare([root / "corpus.txt"], root / "d", char=True, workers=1)
    return root / "d"


@pytest.fixture(scope="module")
def two_rank_run(data_dir, tmp_path_factory):
    """6 steps on 2 ranks of batch 2 (2 micro-batches each): the run the other tests compare to."""
    out = tmp_path_factory.mktemp("dist") / "two"
    if MPIEXEC is None:
        pytest.skip(WHY)
    stdout = _gpt_train(2, data_dir, out)
    return out, stdout


def _weights(run_dir):
    return load_checkpoint(Path(run_dir) / "latest.safetensors")


@needs_mpi
def test_two_ranks_of_batch_b_train_like_one_process_of_batch_2b(data_dir, two_rank_run, tmp_path):
    two_dir, stdout = two_rank_run
    cfg = TrainConfig(data=str(data_dir), out=str(tmp_path / "one"), n_layer=2, n_head=2, n_embd=16,
                      block_size=16, batch_size=4, grad_accum=2, dropout=0.0, max_steps=6, lr_decay_steps=6,
                      warmup_steps=2, lr=3e-3, min_lr=3e-4, eval_interval=3, eval_batches=2, log_interval=1,
                      samples=0, peak_flops=1e9, seed=7)
    one = train(cfg, out=ProgressLine(enabled=False))
    two, single = _weights(two_dir), _weights(one.run_dir)
    assert two.step == single.step == 6
    assert two.meta["world_size"] == 2 and single.meta["world_size"] == 1
    assert two.meta["loader"] == single.meta["loader"]   # the same windows were drawn
    init = train(TrainConfig(**{**cfg.to_dict(), "out": str(tmp_path / "init"), "max_steps": 0}),
                 out=ProgressLine(enabled=False)).model.state_dict()
    for name, w in single.model_state.items():
        # float32 sums in another order: equal to ~1e-7, while training moved them by ~1e-2
        np.testing.assert_allclose(two.model_state[name], w, rtol=0, atol=1e-5, err_msg=name)
        if w.ndim == 2:
            assert np.abs(w - np.asarray(init[name])).max() > 3e-3, f"{name} did not train"
    # logged losses are the global batch's, evaluation averages the ranks' halves
    m2, m1 = read_metrics(two_dir / "metrics.jsonl"), read_metrics(one.run_dir / "metrics.jsonl")
    for key, kind in (("loss", "train"), ("val_loss", "eval")):
        a = [r[key] for r in m2 if r["kind"] == kind]
        b = [r[key] for r in m1 if r["kind"] == kind]
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert all("allreduce_ms" in r for r in m2 if r["kind"] == "train")
    assert "all-reduce" in stdout and "x 2 MPI ranks" in stdout


@needs_mpi
def test_a_two_rank_checkpoint_resumes_exactly(data_dir, two_rank_run, tmp_path):
    two_dir, _ = two_rank_run
    out = tmp_path / "half"
    _gpt_train(2, data_dir, out, max_steps=3)
    rc, stdout, stderr = _launch([(2, ["-m", "gpt.cli", "train", "--resume", str(out), "--max-steps", "6"])])
    assert rc == 0, stdout + stderr
    resumed, straight = _weights(out), _weights(two_dir)
    assert resumed.step == straight.step == 6
    for name, w in straight.model_state.items():
        np.testing.assert_array_equal(resumed.model_state[name], w, err_msg=name)
    for k, v in straight.optimizer_state["state"].items():
        for name, arr in v.items():
            if hasattr(arr, "shape"):
                np.testing.assert_array_equal(resumed.optimizer_state["state"][k][name], arr)
    # only rank 0 wrote: one metrics line per step, none twice
    steps = [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    assert steps == [1, 2, 3, 4, 5, 6]


@needs_mpi
def test_resuming_with_another_number_of_ranks_is_a_clear_error(two_rank_run):
    two_dir, _ = two_rank_run
    with pytest.raises(CheckpointError, match=r"2 rank\(s\).*this run has 1.*mpiexec -n 2"):
        train(TrainConfig(resume=str(two_dir), max_steps=8), {"resume", "max_steps"},
              out=ProgressLine(enabled=False))


@needs_mpi
def test_ranks_started_with_different_settings_stop_with_a_message(data_dir, tmp_path):
    out = tmp_path / "mismatch"
    rc, stdout, stderr = _launch([(1, _train_argv(data_dir, out)),
                                  (1, _train_argv(data_dir, out, lr=1e-3))])
    assert rc == 2, stdout + stderr
    assert "ranks disagree about the training settings: rank 1: lr=0.001 (rank 0: 0.003)" in stderr
    assert stderr.count("ranks disagree") == 1    # reported once, by rank 0
    assert not out.exists()                        # nothing written


@needs_mpi
def test_a_rank_that_never_joins_a_collective_ends_the_job_instead_of_hanging():
    script = textwrap.dedent("""
        import time
        from gpt.training.dist import Distributed
        d = Distributed.from_environment(timeout_s=2)
        if d.rank == 0:
            d.allreduce_mean_scalar(1.0)
        else:
            time.sleep(60)
    """)
    rc, stdout, stderr = _launch([(2, ["-c", script])], timeout=40)
    assert rc != 0
    assert "rank 0: the loss all-reduce did not complete within 2 s; rank 1 never reached it" in stderr


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of the MPI rank `rank` whose command line holds `marker` (from /proc)."""
    for proc in Path("/proc").iterdir():
        try:
            if marker in (proc / "cmdline").read_bytes().decode(errors="replace") and \
                    f"PMI_RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                return int(proc.name)
        except (OSError, ValueError):
            continue
    return None


@needs_mpi
def test_a_stopped_rank_ends_a_training_job_naming_that_rank(data_dir, tmp_path):
    out = tmp_path / "stalled"
    argv = _train_argv(data_dir, out, max_steps=100_000, lr_decay_steps=100_000, eval_interval=100_000)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", GPT_THREADS="1", GPT_DIST_TIMEOUT="3")
    proc = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable] + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    pid = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (pid and (out / "metrics.jsonl").is_file()):
            pid = pid or _rank_pid(str(out), 1)
            time.sleep(0.2)
        assert pid, "rank 1 never started"
        os.kill(pid, signal.SIGSTOP)  # a rank that stalls (as under a debugger or a frozen node)
        _, err = proc.communicate(timeout=60)
    finally:
        if pid:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0
    assert re.search(r"rank 0: the .* did not complete within 3 s; rank 1 never reached it", err), err


def test_the_collective_timeout_comes_from_the_environment(monkeypatch):
    from gpt.training import dist

    monkeypatch.setenv(dist.TIMEOUT_ENV, "2.5")
    assert dist._timeout_from_environment() == 2.5
    for bad in ("0", "-1", "x", "inf", "nan"):
        monkeypatch.setenv(dist.TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match="GPT_DIST_TIMEOUT must be a number of seconds above 0"):
            dist._timeout_from_environment()
    monkeypatch.delenv(dist.TIMEOUT_ENV)
    assert dist._timeout_from_environment() == dist.DEFAULT_TIMEOUT_S


@needs_mpi
def test_an_error_on_one_rank_ends_every_rank_at_once_with_its_message(data_dir, tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from mpi4py import MPI
        import gpt.training.trainer
        if MPI.COMM_WORLD.Get_rank() == 1:
            def broken(self, metrics):
                raise OSError("disk on fire")
            gpt.training.trainer.Trainer._evaluate = broken
        from gpt.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    argv = _train_argv(data_dir, tmp_path / "run")[3:]   # the flags after "-m gpt.cli train"
    rc, stdout, stderr = _launch([(2, ["-c", script, "train", *argv])], timeout=60)
    assert rc != 0
    assert "gpt train (rank 1 of 2): error: disk on fire; ending all ranks" in stderr
    assert "OSError" in stderr   # not a user error: the traceback is shown


@needs_mpi
def test_ranks_whose_weights_drift_apart_are_stopped_at_the_next_checkpoint(data_dir, tmp_path):
    script = textwrap.dedent("""
        import sys
        from mpi4py import MPI
        import gpt.training.trainer
        if MPI.COMM_WORLD.Get_rank() == 1:
            step = gpt.training.trainer.Trainer._train_step
            def drifting(self, lr):
                out = step(self, lr)
                next(iter(self.model.parameters())).data[0] += 1e-3   # a bug on rank 1 only
                return out
            gpt.training.trainer.Trainer._train_step = drifting
        from gpt.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    argv = _train_argv(data_dir, tmp_path / "run")[3:]
    rc, stdout, stderr = _launch([(2, ["-c", script, "train", *argv])], timeout=60)
    assert rc == 2
    assert "ranks disagree about the weights at step 3 (a checksum)" in stderr
    assert not (tmp_path / "run" / "latest.safetensors").exists()


@needs_mpi
def test_mixture_of_experts_on_two_ranks_trains_like_one_process_of_the_whole_batch(data_dir, tmp_path):
    """The load-balancing loss counts each expert's tokens over both ranks, as one process would."""
    moe = dict(mlp="moe", moe_aux_coef=1.0, max_steps=4, lr_decay_steps=4, eval_interval=4)
    _gpt_train(2, data_dir, tmp_path / "two", **moe)
    one = train(TrainConfig(data=str(data_dir), out=str(tmp_path / "one"), n_layer=2, n_head=2, n_embd=16,
                            block_size=16, batch_size=4, grad_accum=2, dropout=0.0, warmup_steps=2, lr=3e-3,
                            min_lr=3e-4, eval_batches=2, log_interval=1, samples=0, peak_flops=1e9, seed=7, **moe),
                out=ProgressLine(enabled=False))
    two, single = _weights(tmp_path / "two"), _weights(one.run_dir)
    for name, w in single.model_state.items():
        np.testing.assert_allclose(two.model_state[name], w, rtol=0, atol=1e-5, err_msg=name)


def test_a_checkpoint_of_one_process_resumed_on_ranks_names_the_command_to_resume_it():
    from gpt.training.dist import check_resume_world_size

    with pytest.raises(CheckpointError, match=r"resume it in one process, with `gpt train --resume runs/r1`$"):
        check_resume_world_size({"world_size": 1}, 2, Path("runs/r1/latest.safetensors"))


def _no_val(data_dir, tmp_path):
    shutil.copytree(data_dir, tmp_path / "noval")
    (tmp_path / "noval" / "val.bin").unlink()
    return _train_argv(tmp_path / "noval", tmp_path / "run")


def _truncated(data_dir, tmp_path, two_rank_run):
    run = tmp_path / "cut"
    shutil.copytree(two_rank_run[0], run)
    (run / "best.safetensors").unlink()
    ckpt = run / "latest.safetensors"
    ckpt.write_bytes(ckpt.read_bytes()[:-100])
    return ["-m", "gpt.cli", "train", "--resume", str(run), "--max-steps", "8"]


def _block_past_val(data_dir, tmp_path):
    val = np.fromfile(data_dir / "val.bin", dtype=np.uint16)
    return _train_argv(data_dir, tmp_path / "run", block_size=len(val))


@needs_mpi
@pytest.mark.parametrize("argv,message", [
    (_no_val, "has no val.bin"),
    (_truncated, "cannot read checkpoint"),
    (_block_past_val, "val split has"),
])
def test_an_error_every_rank_meets_before_training_is_reported_once(data_dir, tmp_path, two_rank_run, argv, message):
    args = (data_dir, tmp_path, two_rank_run) if argv is _truncated else (data_dir, tmp_path)
    rc, stdout, stderr = _launch([(2, argv(*args))])
    assert rc == 2, stdout + stderr
    assert stderr.count(message) == 1, stderr   # by rank 0 alone,
    assert "Abort" not in stderr and "ending all ranks" not in stderr, stderr  # and no rank aborts the job
    assert not (tmp_path / "run").exists()
