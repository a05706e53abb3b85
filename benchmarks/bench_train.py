"""Training-step speed of the GPT beside PyTorch eager in the same run (ms/step, ratio, peak
memory, the machine's load), and optionally the quality of nanoGPT's Tiny Shakespeare run.

    python3 benchmarks/bench_train.py                     # (a) and (b) beside PyTorch, CPU
    python3 benchmarks/bench_train.py --load 0,1          # quiet, then with one core kept busy
    python3 benchmarks/bench_train.py --threads 1         # pool and BLAS threads (default: auto)
    python3 benchmarks/bench_train.py --phases            # + forward, backward, clip, optimizer apart
    python3 benchmarks/bench_train.py --device cuda       # on a GPU through CuPy (no peer)
    python3 benchmarks/bench_train.py --shakespeare       # + val loss after 2,000 steps of (a)
    python3 benchmarks/bench_train.py --configs "" --shakespeare --seeds 1337,1,2   # quality only

(a) nanoGPT's CPU config: 4 layers, 4 heads, d=128, T=64, B=12 (vocab 65, characters).
(b) 6 layers, 6 heads, d=384, T=256, B=8, vocab 4,096.
A step is the whole of training: forward, backward, gradient clipping and AdamW, float32. When
PyTorch is installed (imported lazily, benchmarks/_torch_train.py: the same model in PyTorch
eager), both run in this process on the same batches and thread count, their steps interleaved
(ours, theirs, theirs, ours, ...) so that the machine's noise falls on both alike; the table
gives medians and their ratio. Each timed step follows 10 ms of rest (`--gap`): PyTorch's
OpenMP threads keep spinning for a few milliseconds after its step ends, and back to back
(`--gap 0`) that spinning takes the cores from the step that follows it, ours (measured on
config (a): ours 32.9 ms right after a PyTorch step, 28.4 ms 5 ms later); our pool's threads
sleep when idle, so they take nothing from PyTorch's. `--load 1` starts a busy-loop process for
the timed steps (one core taken, as by another user's job); our thread count is then what `gpt train` would choose
on that machine (autograd/threads.py), PyTorch keeps its own default. Each figure comes with
the load average and the CPU the other processes used meanwhile (from /proc), so a reader can
judge it. Peak memory is measured in a fresh process per framework: the peak resident set over
a few steps above the resident set of the built model (weights, gradients, optimizer state,
activations and the framework's workspace are all in it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIGS = {
    "a": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12, vocab_size=65),
    "b": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=8, vocab_size=4096),
}


def build(name: str, device: str):
    import autograd
    from gpt.model.config import GPTConfig
    from gpt.model.gpt import GPT
    from nn.optim import weight_decay_groups
    from nn.optim import AdamW

    autograd.keep_freed_memory()  # as `gpt train` does (autograd/allocator.py)
    c = CONFIGS[name]
    cfg = GPTConfig(vocab_size=c["vocab_size"], block_size=c["block_size"], n_layer=c["n_layer"],
                    n_head=c["n_head"], n_embd=c["n_embd"], dropout=0.0)
    autograd.manual_seed(0)
    model = GPT(cfg)
    if device != "cpu":
        model.to(device)
    opt = AdamW(weight_decay_groups(model, 0.1, decay_embeddings=True), lr=1e-3, betas=(0.9, 0.99))
    return cfg, model, opt


def make_step(model, opt, device: str, mark=None):
    """step(x, y) -> loss float: forward, backward, clip_grad_norm 1.0, AdamW, zero_grad.
    `mark(phase)`, when given, is called at the start and at the end of each phase (PHASES)."""
    from autograd import backend
    from nn.optim import clip_grad_norm

    params = list(model.parameters())
    mark = mark or (lambda phase: None)

    def step(x, y):
        if device != "cpu":
            x, y = backend.to_device(x, device), backend.to_device(y, device)
        mark("start")
        _, loss = model(x, y)
        mark("forward")
        loss.backward()
        mark("backward")
        clip_grad_norm(params, 1.0)
        mark("clip")
        opt.step()
        opt.zero_grad()
        value = float(loss.item())
        if device != "cpu":
            backend.cupy_module().cuda.Device().synchronize()
        mark("optimizer")
        return value

    return step


PHASES = ("forward", "backward", "clip", "optimizer")


class PhaseClock:
    """A step's `mark`: records (phase, time) marks; `medians()` -> {phase: median ms}."""

    def __init__(self):
        self.marks: list = []

    def __call__(self, phase: str) -> None:
        self.marks.append((phase, time.perf_counter()))

    def medians(self) -> dict:
        per = {p: [] for p in PHASES}
        for (_, t0), (phase, t1) in zip(self.marks, self.marks[1:]):
            if phase in per:
                per[phase].append(t1 - t0)
        return {p: statistics.median(v) * 1e3 for p, v in per.items() if v}


def batches_for(name: str, n: int = 4) -> list:
    """n fixed (x, y) int64 batches of config `name`, the same for both frameworks."""
    c = CONFIGS[name]
    rng = np.random.default_rng(0)
    shape = (c["batch"], c["block_size"])
    return [(rng.integers(0, c["vocab_size"], shape), rng.integers(0, c["vocab_size"], shape)) for _ in range(n)]


def timed(steps: dict, batches: list, repeats: int, warmup: int, exclude: tuple = (),
          gap: float = 0.0) -> dict:
    """Interleaved timing of the named step functions: per repeat each runs once, the order
    reversed every other repeat, `gap` seconds of rest (untimed) before each step.
    -> {name: [seconds]}, plus "_cpu" (the CPU meter's reading)."""
    from autograd.parallel import CpuMeter

    names = list(steps)
    for i in range(warmup):
        for n in names:
            steps[n](*batches[i % len(batches)])
    times = {n: [] for n in names}
    meter = CpuMeter().start()
    for r in range(repeats):
        for n in (names if r % 2 == 0 else names[::-1]):
            time.sleep(gap)
            t0 = time.perf_counter()
            steps[n](*batches[r % len(batches)])
            times[n].append(time.perf_counter() - t0)
    times["_cpu"] = meter.stop(exclude)
    return times


def busy_loops(n: int) -> list:
    """n processes that each keep one core busy (a Python busy loop), started by this script."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def peak_memory(framework: str, name: str, threads: int) -> float | None:
    """Peak resident MiB of a few steps above the built model's, in a fresh process."""
    cmd = [sys.executable, __file__, "--memory-child", f"{framework}:{name}:{threads}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])["peak_mib"]
    except (subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return None


def _memory_child(spec: str) -> int:
    framework, name, threads = spec.split(":")
    step = _framework_step(framework, name, int(threads))
    batches = batches_for(name)

    def rss(field):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")           # resets the peak resident set (VmHWM) to the current one
    base = rss("VmRSS:")
    for i in range(3):
        step(*batches[i % len(batches)])
    print(json.dumps({"peak_mib": rss("VmHWM:") - base}))
    return 0


def _framework_step(framework: str, name: str, threads: int):
    if framework == "torch":
        from _torch_train import build_torch_step

        return build_torch_step(CONFIGS[name], threads)[0]
    from autograd import parallel

    parallel.set_threads(threads)
    _, model, opt = build(name, "cpu")
    return make_step(model, opt, "cpu")


# Training recipes for the Shakespeare run of (a). "nanogpt" is nanoGPT's shakespeare_char
# config with its CPU overrides (train.py defaults to bias=False; the config keeps that).
# "ours" changes only the learning rate: nanoGPT's 1e-3 was tuned for its 6-layer d=384
# model, and this 4-layer d=128 one learns faster at 3e-3 (same steps, tokens and model).
RECIPES = {
    "nanogpt": dict(lr=1e-3, min_lr=1e-4),
    "ours": dict(lr=3e-3, min_lr=3e-4),
}


def shakespeare(device: str, steps: int, path: Path, work: Path, seed: int = 1337,
                recipe: str = "nanogpt", eval_batches: int = 50) -> dict:
    """Train (a) for `steps` through our own `gpt train` loop with a recipe of RECIPES; report the
    trainer's val loss (`eval_batches` fixed batches), the loss over every token of the val split,
    and the standard deviation of nanoGPT's own estimate (the mean of 20 random val batches, from
    4 x eval_batches batches)."""
    from gpt.data import open_tokens, prepare
    from gpt.training.evaluate import evaluate_split
    from gpt.training.progress import ProgressLine
    from gpt.training.trainer import train
    from gpt.training.config import TrainConfig

    recipe_lr = RECIPES[recipe]
    data = work / "shakespeare_char"
    if not (data / "meta.json").is_file():
        prepare([path], data, char=True, val_fraction=0.1, workers=1)
    c = CONFIGS["a"]
    cfg = TrainConfig(data=str(data), out=str(work / f"run-{recipe}-{seed}-{int(time.time())}"), device=device,
                      n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"],
                      block_size=c["block_size"], batch_size=c["batch"], dropout=0.0, bias=False,
                      max_steps=steps, lr_decay_steps=steps, warmup_steps=100,
                      beta2=0.99, weight_decay=0.1, grad_clip=1.0, eval_interval=250, eval_batches=eval_batches,
                      log_interval=50, samples=1, sample_tokens=300, seed=seed, **recipe_lr)
    t0 = time.perf_counter()
    res = train(cfg, out=ProgressLine())
    seconds = time.perf_counter() - t0
    val = open_tokens(data, "val")
    return {"val_loss": res.val_loss, "train_loss": res.train_loss, "seconds": seconds, "steps": res.step,
            "full_val": evaluate_split(res.model, val, c["block_size"]),
            "est20_std": _estimate_std(res.model, val, c["batch"], c["block_size"], n=20, seed=seed,
                                      pool=4 * eval_batches)}


def _estimate_std(model, tokens, B: int, T: int, n: int, seed: int, pool: int = 200) -> float:
    """Standard deviation of the mean loss of `n` random (B, T) batches, from `pool` batches."""
    from gpt.training.evaluate import evaluate
    from gpt.data.loader import BatchLoader

    loader = BatchLoader(tokens, B, T, seed=seed + 99)
    per_batch = [evaluate(model, [loader.next_batch()]) for _ in range(pool)]
    return float(np.std(per_batch, ddof=1) / np.sqrt(n))


def speed_tables(args) -> None:
    """Time each config of args.configs under each load of args.load, beside PyTorch."""
    from _torch_train import build_torch_step, torch_module
    from autograd import parallel
    from autograd.threads import choose_threads, free_cores

    torch = torch_module() if args.device == "cpu" and not args.no_torch else None
    phases: list = []
    for load in (int(v) for v in args.load.split(",")):
        loops = busy_loops(load)
        try:
            time.sleep(0.5 if load else 0.0)
            free_cores.cache_clear()           # measured again under this load
            ours = args.threads or choose_threads()
            theirs = args.torch_threads or parallel.cpu_count()
            parallel.set_threads(ours)
            print(f"\n## {load} busy-loop process(es); our threads {ours} (pool; OpenBLAS 1 per thread), PyTorch's "
                  f"{theirs}; load average {_loadavg()}")
            print(f"| config | ours ms | PyTorch ms | ratio | ours min..max | PyTorch min..max | others' CPU |")
            print("|---|---|---|---|---|---|---|")
            for name in args.configs:
                steps = {"ours": make_step(*build(name, args.device)[1:], args.device)}
                if torch is not None:
                    steps["torch"] = build_torch_step(CONFIGS[name], theirs)[0]
                reps = args.steps_a if name == "a" else args.steps_b
                t = timed(steps, batches_for(name), reps, args.warmup, tuple(p.pid for p in loops), args.gap)
                _row(name, t)
                if args.phases:
                    phases.append((load, name, _phases(name, args, torch is not None, ours, theirs)))
                del steps
        finally:
            for p in loops:
                p.kill()
                p.wait()
    print(f"\nload average after: {_loadavg()}")
    if phases:
        _print_phases(phases)
    if args.memory and args.device == "cpu":
        print("\n| config | ours peak MiB | PyTorch peak MiB | ratio |\n|---|---|---|---|")
        for name in args.configs:
            ours = peak_memory("ours", name, args.threads or 2)
            theirs = peak_memory("torch", name, args.threads or 2) if torch is not None else None
            ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
            print(f"| ({name}) | {_fmt(ours)} | {_fmt(theirs)} | {ratio} |")


def _phases(name: str, args, with_torch: bool, ours: int, theirs: int) -> dict:
    """{framework: {phase: median ms}} of args.phase_steps more interleaved steps of `name`,
    each phase timed (the same threads and gap as the table's steps)."""
    from _torch_train import build_torch_step

    clocks = {"ours": PhaseClock()}
    steps = {"ours": make_step(*build(name, args.device)[1:], args.device, mark=clocks["ours"])}
    if with_torch:
        clocks["torch"] = PhaseClock()
        steps["torch"] = build_torch_step(CONFIGS[name], theirs, mark=clocks["torch"])[0]
    timed(steps, batches_for(name), args.phase_steps, args.warmup, gap=args.gap)
    for clock in clocks.values():       # the warm-up steps' marks are not timed ones
        clock.marks = clock.marks[len(PHASES + ("start",)) * args.warmup:]
    return {n: c.medians() for n, c in clocks.items()}


def _print_phases(phases: list) -> None:
    print("\n| load | config | phase | ours ms | PyTorch ms | ratio |\n|---|---|---|---|---|---|")
    for load, name, med in phases:
        for p in PHASES:
            ours, theirs = med["ours"].get(p), med.get("torch", {}).get(p)
            ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
            print(f"| {load} | ({name}) | {p} | {_fmt(ours)} | {_fmt(theirs)} | {ratio} |")


def _row(name: str, t: dict) -> None:
    cpu = t["_cpu"]
    med = {n: statistics.median(v) * 1e3 for n, v in t.items() if n != "_cpu"}
    span = {n: f"{min(v) * 1e3:.0f}..{max(v) * 1e3:.0f}" for n, v in t.items() if n != "_cpu"}
    ratio = f"{med['ours'] / med['torch']:.2f}x" if "torch" in med else "-"
    others = "-" if cpu["others"] is None else f"{cpu['others']:.2f} cores (+{cpu['excluded']:.2f} busy loop)"
    print(f"| ({name}) x{len(t['ours'])} | {med['ours']:.1f} | {_fmt(med.get('torch'))} | {ratio} | "
          f"{span['ours']} | {span.get('torch', '-')} | {others} |")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--configs", default="ab", help="which configs to time (default: ab)")
    ap.add_argument("--steps-a", type=int, default=30, help="timed steps of (a), each framework")
    ap.add_argument("--steps-b", type=int, default=6, help="timed steps of (b), each framework")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.01,
                    help="seconds of rest before each timed step (0: back to back; see the docstring)")
    ap.add_argument("--load", default="0", help="busy-loop processes during the timing, a list: 0,1")
    ap.add_argument("--threads", type=int, default=None,
                    help="our pool and BLAS threads (default: gpt train's own choice)")
    ap.add_argument("--torch-threads", type=int, default=None, help="PyTorch's threads (default: all cores)")
    ap.add_argument("--no-torch", action="store_true", help="time ours only")
    ap.add_argument("--memory", action="store_true", help="also peak memory, in fresh processes")
    ap.add_argument("--phases", action="store_true",
                    help="also time each phase (forward, backward, clip, optimizer) of both, interleaved")
    ap.add_argument("--phase-steps", type=int, default=20, help="timed steps of the phase table, each framework")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shakespeare", action="store_true",
                    help="also train (a) for 2,000 steps on ../shared/data/tinyshakespeare.txt")
    ap.add_argument("--shakespeare-steps", type=int, default=2000)
    ap.add_argument("--seeds", default="1337", help="comma-separated seeds of the Shakespeare runs")
    ap.add_argument("--eval-batches", type=int, default=50, help="fixed val batches of the Shakespeare runs")
    ap.add_argument("--recipes", default="nanogpt,ours", help=f"Shakespeare recipes among {', '.join(RECIPES)}")
    ap.add_argument("--text", default=str(Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt"))
    ap.add_argument("--work", default="runs/bench", help="folder for the Shakespeare data and run")
    args = ap.parse_args(argv)
    if args.memory_child:
        return _memory_child(args.memory_child)
    unknown = set(args.recipes.split(",")) - set(RECIPES)
    if unknown:
        ap.error(f"unknown recipe(s) {', '.join(sorted(unknown))}; known: {', '.join(RECIPES)}")
    if args.configs:
        print(f"device {args.device}; {os.cpu_count()} CPUs; NumPy {np.__version__}; medians of interleaved "
              "steps; ratio = ours / PyTorch (< 1: ours is faster)")
        speed_tables(args)
    if args.shakespeare:
        path = Path(args.text)
        if not path.is_file():
            print(f"skipping Tiny Shakespeare: {path} not found")
        else:
            rows = []
            for recipe in args.recipes.split(","):
                for seed in (int(s) for s in args.seeds.split(",")):
                    r = shakespeare(args.device, args.shakespeare_steps, path, Path(args.work), seed, recipe,
                                    args.eval_batches)
                    rows.append((recipe, seed, r))
            _print_shakespeare(rows)
    return 0


def _print_shakespeare(rows: list) -> None:
    print("\nTiny Shakespeare, char level, config (a): val loss after the last step "
          "(nanoGPT reports 1.886 from 20 random val batches; target <= 1.90)")
    print(f"{'recipe':<9}{'lr':>8}{'seed':>6}{'steps':>7}{'val (fixed)':>16}{'val (all tokens)':>18}"
          f"{'20-batch std':>14}{'train':>8}{'seconds':>9}")
    for recipe, seed, r in rows:
        print(f"{recipe:<9}{RECIPES[recipe]['lr']:>8.0e}{seed:>6}{r['steps']:>7}{r['val_loss']:>16.4f}"
              f"{r['full_val']:>18.4f}{r['est20_std']:>14.4f}{r['train_loss']:>8.4f}{r['seconds']:>9.0f}")
    for recipe in dict.fromkeys(rec for rec, _, _ in rows):
        full = [r["full_val"] for rec, _, r in rows if rec == recipe]
        print(f"{recipe}: mean val loss over all val tokens {np.mean(full):.4f} over {len(full)} seed(s)"
              f" (min {min(full):.4f}, max {max(full):.4f})")


if __name__ == "__main__":
    sys.exit(main())
