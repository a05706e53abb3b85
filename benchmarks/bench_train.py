"""Training-step speed of the GPT beside PyTorch eager from the same weights (ms/step, ratio, peak
memory, the machine's load), and optionally the quality of nanoGPT's Tiny Shakespeare run.

    python3 benchmarks/bench_train.py                     # (a) and (b) beside PyTorch, CPU
    python3 benchmarks/bench_train.py --load 0,1          # quiet, then with one core kept busy
    python3 benchmarks/bench_train.py --threads 1         # our pool threads (default: gpt train's choice)
    python3 benchmarks/bench_train.py --phases            # + forward, backward, clip, optimizer apart
    python3 benchmarks/bench_train.py --device cuda       # on a GPU through CuPy (no peer)
    python3 benchmarks/bench_train.py --shakespeare       # + val loss after 2,000 steps of (a)
    python3 benchmarks/bench_train.py --configs "" --shakespeare --seeds 1337,1,2   # quality only

(a) nanoGPT's CPU config: 4 layers, 4 heads, d=128, T=64, B=12 (vocab 65, characters).
(b) 6 layers, 6 heads, d=384, T=256, B=8, vocab 4,096.
A step is the whole of training: forward, backward, gradient clipping and AdamW, float32.

The peer (benchmarks/_torch_train.py: the same model in PyTorch eager, imported lazily where it is
installed) is the same computation: it loads our model's initial weights through `peer_state`,
the one name mapping between the two, and before anything is timed both run three steps on the
same batches. Their losses must agree to LOSS_TOL, or no ratio is printed; the losses of both
are printed either way. Both of PyTorch's attention paths are timed (scaled_dot_product_attention
and the explicit T x T softmax) and the ratio is ours over the faster of the two.

Each framework is timed alone, in a fresh process of its own, the processes taking turns in
rounds (`--rounds`, the order reversed every other round, so that the machine's drift falls on
all alike); a figure is the median of all the timed steps of its rounds, and "paired" is the
median over the rounds of each round's own ratio (ours against the faster path's process timed
next to it), the steadier figure when the machine's speed drifts between rounds. PyTorch keeps
its own thread default (`--torch-threads` overrides), and so does ours, as a user's script from
Python gets it: the threads `gpt train` would choose on the machine at that moment
(autograd/threads.py, chosen in the timed process at its first large op; `--threads`
overrides). `--load 1` starts a busy-loop process for the timed steps (one core taken, as by
another user's job). Each table gives the load average and the CPU that other processes used
while each framework was timed (from /proc, the busy loops apart), so a reader can judge it.
Each round also times the machine's matrix-product ceiling in a fresh process: NumPy's float32
GEMM of two CEILING_N x CEILING_N matrices on the threads ours uses (OpenBLAS's own split), and
each table is followed by what a step's products (``step_gflop``: the forward's, and twice that
for the backward's) take at that rate, with each framework's step as a multiple of it: how far
from the physical limit each one runs (`--no-ceiling` leaves it out).
Peak memory is measured in a fresh process per framework: the peak resident set over a few steps
above the resident set of the built model (weights, gradients, optimizer state, activations and
the framework's workspace).
"""
from __future__ import annotations

import argparse
import gc
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

from _torch_train import ATTENTION_PATHS, build_torch_step, torch_module  # noqa: E402 (no torch import)

CONFIGS = {
    "a": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=12, vocab_size=65),
    "b": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=8, vocab_size=4096),
}
CEILING_N = 1536     # the GEMM ceiling's square matrices: large enough for OpenBLAS's peak
CEILING_CALLS = 7    # products timed (after one untimed) in each ceiling process
LOSS_TOL = 1e-4      # |ours - PyTorch| allowed for each of the first CHECK_STEPS losses, float32
CHECK_STEPS = 3
# Our Linear stores its weight as (in, out) (y = x @ W + b), torch.nn.Linear as (out, in); every
# other parameter has the same layout, and the names are GPT-2's on both sides (the tied head
# has no name of its own on either).
LINEAR_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


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


def peer_state(model) -> dict:
    """Our model's parameters as the peer's state_dict: {name: float32 array (host copy)}, the
    Linear weights transposed to PyTorch's (out, in)."""
    return {name: np.ascontiguousarray(p.numpy().T if name.endswith(LINEAR_WEIGHTS) else p.numpy())
            for name, p in model.named_parameters()}


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


def framework_step(framework: str, name: str, threads: int | None = None, device: str = "cpu", mark=None):
    """step(x, y) -> loss float of `framework` ("ours", or a PyTorch attention path of
    ATTENTION_PATHS) on config `name`, from our model's initial weights. threads: our pool's
    (None: the library's default) or PyTorch's intra-op threads (None: PyTorch's default)."""
    if framework == "ours":
        if threads is not None:
            from autograd import parallel

            parallel.set_threads(threads)
        _, model, opt = build(name, device)
        return make_step(model, opt, device, mark)
    _, model, _ = build(name, "cpu")
    state = peer_state(model)
    del model
    return build_torch_step(CONFIGS[name], threads, framework, mark, state)[0]


PHASES = ("forward", "backward", "clip", "optimizer")


class PhaseClock:
    """A step's `mark`: records (phase, time) marks; `durations()` -> {phase: [seconds]}."""

    def __init__(self):
        self.marks: list = []

    def __call__(self, phase: str) -> None:
        self.marks.append((phase, time.perf_counter()))

    def durations(self) -> dict:
        per = {p: [] for p in PHASES}
        for (_, t0), (phase, t1) in zip(self.marks, self.marks[1:]):
            if phase in per:
                per[phase].append(t1 - t0)
        return per


def batches_for(name: str, n: int = 4) -> list:
    """n fixed (x, y) int64 batches of config `name`, the same for both frameworks."""
    c = CONFIGS[name]
    rng = np.random.default_rng(0)
    shape = (c["batch"], c["block_size"])
    return [(rng.integers(0, c["vocab_size"], shape), rng.integers(0, c["vocab_size"], shape)) for _ in range(n)]


def loss_check(name: str, paths: tuple, threads: int | None, torch_threads: int | None) -> tuple:
    """(agree, {framework: [loss of each of the first CHECK_STEPS steps]}, worst |ours - peer|):
    ours and each PyTorch attention path of `paths`, from the same weights on the same batches."""
    batches = batches_for(name)
    losses = {}
    for fw in ("ours",) + tuple(paths):
        step = framework_step(fw, name, threads if fw == "ours" else torch_threads)
        losses[fw] = [step(*batches[i % len(batches)]) for i in range(CHECK_STEPS)]
        del step
        gc.collect()
    worst = max((abs(a - b) for fw in paths for a, b in zip(losses["ours"], losses[fw])), default=0.0)
    return worst <= LOSS_TOL, losses, worst


def step_gflop(c: dict) -> float:
    """GFLOP of the matrix products of one training step of config `c`: each layer's four Linear
    products (24 N C^2 for N = B T rows) and attention's two over the causal half of the scores
    (2 B T^2 C), the output layer's (2 N C V); the backward's are twice the forward's."""
    rows, C = c["batch"] * c["block_size"], c["n_embd"]
    attention = 2 * c["batch"] * c["block_size"] ** 2 * C
    forward = c["n_layer"] * (24 * rows * C * C + attention) + 2 * rows * C * c["vocab_size"]
    return 3 * forward / 1e9


def _ceiling_child(job: dict) -> dict:
    """Seconds of CEILING_CALLS float32 GEMMs of CEILING_N^3 on the threads ours would use (job's
    threads, or the library's choice), OpenBLAS splitting each one itself."""
    from autograd import parallel

    threads = job["threads"] or parallel.threads()
    parallel.set_blas_threads(threads)
    rng = np.random.default_rng(0)
    a, b = (rng.random((CEILING_N, CEILING_N), dtype=np.float32) for _ in range(2))
    out = a @ b
    times = []
    for _ in range(CEILING_CALLS):
        t0 = time.perf_counter()
        np.matmul(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return {"times": times, "phases": {p: [] for p in PHASES}, "others": None, "losses": [], "threads": threads}


def time_alone(job: dict) -> dict:
    """Time one framework in a fresh process (this script's --time-child): job has framework,
    config, threads, steps, warmup, device and exclude (pids left out of others' CPU).
    -> {"times": [s], "phases": {phase: [s]}, "others": cores, "losses": [...], "threads": n}."""
    cmd = [sys.executable, __file__, "--time-child", json.dumps(job)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"timing {job['framework']} on ({job['config']}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time_child(spec: str) -> int:
    from autograd import parallel
    from autograd.parallel import CpuMeter

    job = json.loads(spec)
    if job["framework"] == "ceiling":
        print(json.dumps(_ceiling_child(job)))
        return 0
    clock = PhaseClock()
    step = framework_step(job["framework"], job["config"], job["threads"], job["device"], mark=clock)
    batches = batches_for(job["config"])
    for i in range(job["warmup"]):
        step(*batches[i % len(batches)])
    if job["framework"] == "ours":
        parallel.threads()          # the library's choice made (once) before the timed steps
    clock.marks.clear()
    times, losses = [], []
    meter = CpuMeter().start()
    for i in range(job["warmup"], job["warmup"] + job["steps"]):
        t0 = time.perf_counter()
        losses.append(step(*batches[i % len(batches)]))
        times.append(time.perf_counter() - t0)
    cpu = meter.stop(tuple(job["exclude"]))
    if job["framework"] == "ours":
        threads = parallel.threads()
    else:
        threads = torch_module().get_num_threads()
    print(json.dumps({"times": times, "phases": clock.durations(), "others": cpu["others"], "losses": losses,
                      "threads": threads}))
    return 0


def busy_loops(n: int) -> list:
    """n processes that each keep one core busy (a Python busy loop), started by this script."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def peak_memory(framework: str, name: str, threads: int | None) -> float | None:
    """Peak resident MiB of a few steps above the built model's, in a fresh process."""
    cmd = [sys.executable, __file__, "--memory-child", json.dumps([framework, name, threads])]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])["peak_mib"]
    except (subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return None


def _memory_child(spec: str) -> int:
    framework, name, threads = json.loads(spec)
    step = framework_step(framework, name, threads)
    gc.collect()
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
                      pos="learned", norm="layernorm", mlp="gelu",  # nanoGPT's GPT-2 block
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
    """Check the peer's first losses against ours, then time each config of args.configs under
    each load of args.load, each framework alone in its own processes."""
    torch = torch_module() if args.device == "cpu" and not args.no_torch else None
    paths = ATTENTION_PATHS if torch is not None else ()
    if torch is None:
        print("PyTorch: not timed (--no-torch, a GPU device, or not installed)")
    agreed = {}
    for name in args.configs:
        if paths:
            agreed[name], losses, worst = loss_check(name, paths, args.threads, args.torch_threads)
            _print_check(name, losses, worst, agreed[name])
    frameworks = ("ours",) + paths
    timed = frameworks + (("ceiling",) if args.device == "cpu" and args.ceiling else ())
    phases: list = []
    for load in (int(v) for v in args.load.split(",")):
        loops = busy_loops(load)
        try:
            time.sleep(0.5 if load else 0.0)
            exclude = [p.pid for p in loops]
            avg = _loadavg()
            results = {name: _rounds(name, timed, args, exclude) for name in args.configs}
        finally:
            for p in loops:
                p.kill()
                p.wait()
        mine = "/".join(str(n) for n in sorted({r["ours"]["threads"] for r in results.values()}))
        theirs = "/".join(str(n) for n in sorted({r[fw]["threads"] for r in results.values() for fw in paths}))
        print(f"\n## {load} busy-loop process(es); our threads {mine} "
              f"({'--threads' if args.threads else 'the library default: what gpt train chooses'}; OpenBLAS 1), "
              f"PyTorch's {theirs or '-'} ({'--torch-threads' if args.torch_threads else 'its default'}); "
              f"{args.rounds} rounds of fresh processes; load average {avg} before, {_loadavg()} after")
        cols = " | ".join(f"PyTorch {p} ms" for p in paths)
        spans = " | ".join(f"{p} min..max" for p in paths)
        print(f"| config | ours ms | {cols} | ratio to the faster | paired | ours min..max | {spans} | "
              f"others' CPU, cores ({' / '.join(frameworks)}) | timed losses, max diff |")
        print("|---" * (7 + 2 * len(paths)) + "|")
        ceilings = {name: res.pop("ceiling") for name, res in results.items() if "ceiling" in res}
        for name, res in results.items():
            _row(name, res, paths, agreed.get(name))
            phases.append((load, name, res))
        if ceilings:
            _print_ceiling(ceilings, results, paths)
    print(f"\nload average after: {_loadavg()}")
    if args.phases:
        _print_phases(phases, paths, agreed)
    if args.memory and args.device == "cpu":
        print(f"\n| config | ours peak MiB | {' | '.join(f'PyTorch {p} peak MiB' for p in paths)} | ratio to the lower |")
        print("|---" * (3 + len(paths)) + "|")
        for name in args.configs:
            mine = peak_memory("ours", name, args.threads)
            peers = [peak_memory(p, name, args.torch_threads) for p in paths]
            low = min((v for v in peers if v), default=None)
            ratio = f"{mine / low:.2f}x" if mine and low else "-"
            print(f"| ({name}) | {_fmt(mine)} | {' | '.join(_fmt(v) for v in peers)} | {ratio} |")


def _rounds(name: str, frameworks: tuple, args, exclude: list) -> dict:
    """{framework: {"times", "phases", "others" and "rounds" (one per round: others' CPU, the
    median step), "losses" (first round's), "threads"}} of args.rounds rounds, each framework
    alone in a fresh process per round."""
    steps = args.steps_a if name == "a" else args.steps_b
    out = {fw: {"times": [], "phases": {p: [] for p in PHASES}, "others": [], "rounds": [], "losses": None,
                "threads": None} for fw in frameworks}
    for r in range(args.rounds):
        for fw in (frameworks if r % 2 == 0 else frameworks[::-1]):
            job = dict(framework=fw, config=name, threads=args.threads if fw == "ours" else args.torch_threads,
                       steps=steps, warmup=args.warmup, device=args.device, exclude=exclude)
            got, acc = time_alone(job), out[fw]
            acc["times"] += got["times"]
            for p in PHASES:
                acc["phases"][p] += got["phases"][p]
            acc["others"].append(got["others"])  # None from the ceiling's process
            acc["rounds"].append(statistics.median(got["times"]))
            acc["losses"] = acc["losses"] or got["losses"]
            acc["threads"] = got["threads"]
    return out


def _median_ms(v: list) -> float:
    return statistics.median(v) * 1e3


def _faster(res: dict, paths: tuple) -> str | None:
    return min(paths, key=lambda p: _median_ms(res[p]["times"])) if paths else None


def _print_check(name: str, losses: dict, worst: float, ok: bool) -> None:
    fws = list(losses)
    print(f"\nloss check ({name}): the first {CHECK_STEPS} steps from the same weights on the same batches, float32")
    print("| step | " + " | ".join("ours" if f == "ours" else f"PyTorch {f}" for f in fws) + " |")
    print("|---" * (1 + len(fws)) + "|")
    for i in range(CHECK_STEPS):
        print(f"| {i + 1} | " + " | ".join(f"{losses[f][i]:.6f}" for f in fws) + " |")
    verdict = "agree" if ok else f"DISAGREE: no ratio is printed for ({name})"
    print(f"max |ours - PyTorch| = {worst:.2e} (tolerance {LOSS_TOL:g}): {verdict}")


def _row(name: str, res: dict, paths: tuple, agreed: bool | None) -> None:
    med = {fw: _median_ms(r["times"]) for fw, r in res.items()}
    span = {fw: f"{min(r['times']) * 1e3:.0f}..{max(r['times']) * 1e3:.0f}" for fw, r in res.items()}
    fast = _faster(res, paths)
    paired = "-"
    if fast is None:
        ratio = "-"
    elif not agreed:
        ratio = "refused (losses disagree)"
    else:
        ratio = f"{med['ours'] / med[fast]:.2f}x ({fast})"
        # each round's two medians were timed one after the other: their ratio is the steadier
        # figure where the machine's speed drifts between rounds
        paired = f"{statistics.median(a / b for a, b in zip(res['ours']['rounds'], res[fast]['rounds'])):.2f}x"
    others = " / ".join("-" if None in r["others"] else f"{statistics.mean(r['others']):.2f}" for r in res.values())
    diff = max((abs(a - b) for p in paths for a, b in zip(res["ours"]["losses"], res[p]["losses"])), default=None)
    print(f"| ({name}) x{len(res['ours']['times'])} | {med['ours']:.1f} | "
          + "".join(f"{med[p]:.1f} | " for p in paths) + f"{ratio} | {paired} | {span['ours']} | "
          + "".join(f"{span[p]} | " for p in paths) + f"{others} | {'-' if diff is None else f'{diff:.1e}'} |")


def _print_ceiling(ceilings: dict, results: dict, paths: tuple) -> None:
    """The GEMM ceiling of each config's rounds (``ceilings``: {config: the ceiling's timings}), and
    each framework's step as a multiple of the time its products take at that rate."""
    print(f"\nGEMM ceiling: float32 {CEILING_N}^3 products through NumPy, on ours' threads, medians "
          "of each config's rounds; 'x' = the step's median over the time its products take at that rate")
    print(f"| config | threads | GFLOP/s | products per step, GFLOP | at that rate, ms | ours | "
          + " | ".join(f"PyTorch {p}" for p in paths) + " |")
    print("|---" * (6 + len(paths)) + "|")
    for name, ceiling in ceilings.items():
        res = results[name]
        rate = 2 * CEILING_N ** 3 / statistics.median(ceiling["times"]) / 1e9
        gflop = step_gflop(CONFIGS[name])
        floor_ms = gflop / rate * 1e3
        times = " | ".join(f"{_median_ms(res[fw]['times']) / floor_ms:.2f}x" for fw in ("ours",) + paths)
        print(f"| ({name}) | {ceiling['threads']} | {rate:.0f} | {gflop:.1f} | {floor_ms:.1f} | {times} |")


def _print_phases(phases: list, paths: tuple, agreed: dict) -> None:
    """Each phase's median of the timed steps; the ratio is to the path faster over the whole step."""
    print(f"\n| load | config | phase | ours ms | {' | '.join(f'PyTorch {p} ms' for p in paths)} | ratio |")
    print("|---" * (5 + len(paths)) + "|")
    for load, name, res in phases:
        fast = _faster(res, paths)
        for p in PHASES:
            med = {fw: _median_ms(r["phases"][p]) for fw, r in res.items() if r["phases"][p]}
            ratio = f"{med['ours'] / med[fast]:.2f}x" if fast and agreed.get(name) and med.get(fast) else "-"
            print(f"| {load} | ({name}) | {p} | {_fmt(med.get('ours'))} | "
                  + "".join(f"{_fmt(med.get(q))} | " for q in paths) + f"{ratio} |")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def _loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--configs", default="ab", help="which configs to time (default: ab)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of fresh processes, each framework once a round")
    ap.add_argument("--steps-a", type=int, default=20, help="timed steps of (a), each framework, each round")
    ap.add_argument("--steps-b", type=int, default=4, help="timed steps of (b), each framework, each round")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first, in each process")
    ap.add_argument("--load", default="0", help="busy-loop processes during the timing, a list: 0,1")
    ap.add_argument("--threads", type=int, default=None,
                    help="our pool threads (default: the library's, which is gpt train's choice)")
    ap.add_argument("--torch-threads", type=int, default=None, help="PyTorch's threads (default: PyTorch's own)")
    ap.add_argument("--no-torch", action="store_true", help="time ours only")
    ap.add_argument("--memory", action="store_true", help="also peak memory, in fresh processes")
    ap.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                    help="leave out the GEMM ceiling (timed each round beside the frameworks)")
    ap.add_argument("--phases", action="store_true",
                    help="also the time of each phase (forward, backward, clip, optimizer) of the timed steps")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--time-child", default=None, help=argparse.SUPPRESS)
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
    if args.time_child:
        return _time_child(args.time_child)
    unknown = set(args.recipes.split(",")) - set(RECIPES)
    if unknown:
        ap.error(f"unknown recipe(s) {', '.join(sorted(unknown))}; known: {', '.join(RECIPES)}")
    bad = set(args.configs) - set(CONFIGS)
    if bad:
        ap.error(f"unknown config(s) {', '.join(sorted(bad))}; known: {', '.join(CONFIGS)}")
    if args.configs:
        print(f"device {args.device}; {os.cpu_count()} CPUs; NumPy {np.__version__}; load average {_loadavg()}; "
              "medians of the timed steps; ratio = ours / PyTorch (< 1: ours is faster)")
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
