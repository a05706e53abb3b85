"""Data-parallel training speed: tokens/s of `gpt train` on 1 process and on N MPI ranks, and the
time the gradient all-reduce takes per step.

    python3 benchmarks/bench_dist.py                     # tiny and small configs, 1 and 2 ranks
    python3 benchmarks/bench_dist.py --ranks 1 2 4 --configs small --steps 40 --repeats 3

Each row is the real command, `gpt train` (one process) or `mpiexec -n N gpt train` (N ranks), on
a synthetic token folder, with B sequences per rank (so N ranks train on N x B per step: weak
scaling, as with DDP). tokens/s counts the tokens of all ranks; it is the median over the logged
steps after warm-up, then the median over --repeats runs. Every process gets --threads BLAS
threads (default 1, so that N ranks on N cores use what one process with N threads would;
--threads-row adds that alternative use of the same cores, "1 x N threads"). Rows take turns
within each repeat, so that load from elsewhere on a shared machine falls on all of them.

"all-reduce in step" is what `gpt train` reports: the time from the start of the gradient
all-reduce to its end, which includes waiting for the slowest rank to finish its backward.
"all-reduce alone" times `Distributed.allreduce_gradients` on the model's gradients with the
ranks lined up by a barrier first: the communication itself (bytes in flat buckets / time).
Needs the `dist` extra (mpi4py + mpich); without it only the 1-process rows are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = {
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, batch_size=8, vocab=512),
    "small": dict(n_layer=4, n_head=4, n_embd=128, block_size=128, batch_size=8, vocab=2048),
}


def mpiexec() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.is_file() else shutil.which("mpiexec")


def write_data(folder: Path, vocab: int, n_tokens: int = 400_000) -> Path:
    """A nanoGPT data folder of random ids (speed does not depend on what the ids say)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rng.integers(0, vocab, n_tokens, dtype=np.uint16).tofile(folder / "train.bin")
    rng.integers(0, vocab, n_tokens // 10, dtype=np.uint16).tofile(folder / "val.bin")
    (folder / "meta.json").write_text(json.dumps({"vocab_size": vocab, "dtype": "uint16"}))
    return folder


def env_for(threads: int) -> dict:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def train_once(cfg: dict, data: Path, out: Path, ranks: int, threads: int, steps: int, mpi: str | None) -> dict:
    args = ["--data", str(data), "--out", str(out), "--max-steps", str(steps), "--eval-interval", str(10 * steps),
            "--eval-batches", "1", "--log-interval", "1", "--samples", "0", "--peak-flops", "1e12",
            "--warmup-steps", "2", "--dropout", "0"]
    for k in ("n_layer", "n_head", "n_embd", "block_size", "batch_size"):
        args += [f"--{k.replace('_', '-')}", str(cfg[k])]
    cmd = [sys.executable, "-m", "gpt.cli", "train", *args]
    if ranks > 1:
        cmd = [mpi, "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(threads), timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"][3:]  # warm-up steps (and step 0's eval) out
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in train),
            "ms_per_step": statistics.median(r["ms_per_step"] for r in train),
            "allreduce_ms": statistics.median(r["allreduce_ms"] for r in train) if ranks > 1 else None}


def allreduce_worker(name: str, repeats: int) -> None:
    """Under mpiexec: time allreduce_gradients alone on the model's gradients; rank 0 prints JSON."""
    from autograd import manual_seed
    from gpt.model.config import GPTConfig
    from gpt.training.dist import Distributed
    from gpt.model.gpt import GPT

    cfg = CONFIGS[name]
    dist = Distributed.from_environment()
    manual_seed(0)
    model = GPT(GPTConfig(vocab_size=cfg["vocab"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                          n_head=cfg["n_head"], n_embd=cfg["n_embd"]))
    params = list(model.parameters())
    for p in params:
        p.grad = np.ones_like(p.data)
    times = []
    for _ in range(repeats + 3):
        dist.barrier()
        times.append(dist.allreduce_gradients(params))
    if dist.is_main:
        nbytes = sum(p.data.nbytes for p in params)
        print(json.dumps({"ms": statistics.median(times[3:]) * 1e3, "bytes": nbytes,
                          "buckets": len(dist._reducers[tuple(id(p) for p in params)].flats)}))


def allreduce_alone(name: str, ranks: int, mpi: str) -> dict:
    cmd = [mpi, "-n", str(ranks), sys.executable, str(Path(__file__).resolve()), "--allreduce-worker", name]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(1), timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_rows(name: str, cfg: dict, rows: list, results: dict, n_params: int) -> None:
    """One table line per (ranks, threads) row of a config, tokens/s against the first row."""
    base = None
    for ranks, threads in rows:
        runs = results[(ranks, threads)]
        tps = statistics.median(r["tokens_per_s"] for r in runs)
        ms = statistics.median(r["ms_per_step"] for r in runs)
        ar = statistics.median(r["allreduce_ms"] for r in runs) if ranks > 1 else None
        if base is None:
            base = tps
        label = f"{ranks} x {threads} thread{'s' if threads > 1 else ''}"
        if ranks > 1:
            label = f"{ranks} ranks x {threads}"
        gb = ranks * cfg["batch_size"]
        print(f"{name:<7} {n_params / 1e6:>7.2f}M {label:<16} {gb:>5} x {cfg['block_size']:<4} "
              f"{tps:>9,.0f} {ms:>8.1f} {('-' if ar is None else f'{ar:.1f} ms'):>18} "
              f"{tps / base:>11.2f}x", flush=True)


def print_alone(alone: dict) -> None:
    """The all-reduce timed alone, with its bus bandwidth."""
    print()
    print(f"{'config':<7} {'ranks':>5} {'gradients':>10} {'buckets':>7} {'all-reduce alone':>16} "
          f"{'bus GB/s':>9}")
    for name, by_ranks in alone.items():
        for ranks, res in by_ranks.items():
            # ring all-reduce moves 2 (n-1)/n of the buffer through each rank
            bus = 2 * (ranks - 1) / ranks * res["bytes"] / (res["ms"] / 1e3) / 1e9
            print(f"{name:<7} {ranks:>5} {res['bytes'] / 2**20:>8.2f}MB {res['buckets']:>7} "
                  f"{res['ms']:>13.3f} ms {bus:>9.2f}")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads per process")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads-row", action="store_true",
                    help="also time 1 process with as many BLAS threads as the ranks have in all")
    ap.add_argument("--allreduce-worker", metavar="CONFIG", help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    if args.allreduce_worker:
        allreduce_worker(args.allreduce_worker, repeats=20)
        return
    mpi = mpiexec()
    if mpi is None:
        print("mpi4py / mpiexec missing (pip install -e '.[dist]'): only 1-process rows", file=sys.stderr)
    print(f"gpt train, data-parallel over MPI ranks; {os.cpu_count()} CPU cores; {args.threads} BLAS thread(s) "
          f"per process unless said; {args.steps} steps, median of {args.repeats} runs")
    header = (f"{'config':<7} {'params':>8} {'processes':<16} {'global batch':>12} {'tokens/s':>9} "
              f"{'ms/step':>8} {'all-reduce in step':>18} {'vs 1 process':>12}")
    print(header)
    print("-" * len(header))
    from gpt.model.config import GPTConfig

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        alone = {}
        for name in args.configs:
            cfg = CONFIGS[name]
            data = write_data(tmp / f"data-{name}", cfg["vocab"])
            n_params = GPTConfig(vocab_size=cfg["vocab"], block_size=cfg["block_size"], n_layer=cfg["n_layer"],
                                 n_head=cfg["n_head"], n_embd=cfg["n_embd"]).count_params()
            rows = [(r, args.threads) for r in args.ranks if r == 1 or mpi is not None]
            if args.threads_row and 1 in args.ranks and max(args.ranks) > 1:
                rows.insert(1, (1, max(args.ranks) * args.threads))  # the same cores as threads instead
            results: dict = {row: [] for row in rows}
            for i in range(args.repeats):  # rows take turns, so a burst of load elsewhere hits all
                for ranks, threads in rows:
                    out = tmp / f"{name}-{ranks}-{threads}-{i}"
                    results[(ranks, threads)].append(train_once(cfg, data, out, ranks, threads, args.steps, mpi))
                    shutil.rmtree(out)
            print_rows(name, cfg, rows, results, n_params)
            if mpi is not None:
                alone[name] = {r: allreduce_alone(name, r, mpi) for r in args.ranks if r > 1}
        if alone:
            print_alone(alone)


if __name__ == "__main__":
    main()
