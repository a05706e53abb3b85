"""The same model trained from Python (the README's loop, no settings) and by `gpt train`: ms/step.

    python3 benchmarks/bench_cli_parity.py               # config (b) of bench_train.py, 4 rounds
    python3 benchmarks/bench_cli_parity.py --steps 60 --rounds 6

A data folder is prepared once (standard-library sources, vocab 4096). Each round runs, each in a
fresh process and one after the other, `gpt train` first in rounds 1, 3, ... and the loop first
in rounds 2, 4, ...: `gpt train --data` for --steps steps (its metrics.jsonl gives ms/step per
window of 10 steps), and a plain Python loop over the same model, data and optimizer settings as
a user writes it (GPT(GPTConfig(...)), AdamW over weight_decay_groups, forward, zero_grad,
backward, clip_grad_norm, step), with no thread or allocator call of its own, timed step by
step. The first window of steps is warm-up for both and is left out. Each round prints its two
medians and their ratio; the summary gives the median over the windows of all rounds and the
median of the rounds' own ratios ("paired", the steadier figure where the machine's speed
drifts between rounds). The load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, pos="learned", norm="layernorm", mlp="gelu",
             bias=True)
BATCH, LR, WINDOW = 8, 1e-3, 10

PY_LOOP = r"""
import json, sys, time
import numpy as np
import nn
from gpt import GPT, GPTConfig
from nn.optim import AdamW, clip_grad_norm
data, steps, model_kw, B, lr = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
meta = json.load(open(f"{data}/meta.json"))
tokens = np.memmap(f"{data}/train.bin", dtype=meta["dtype"], mode="r")
model = GPT(GPTConfig(vocab_size=meta["vocab_size"], dropout=0.0, **model_kw))
opt = AdamW(nn.optim.weight_decay_groups(model, 0.1), lr=lr, betas=(0.9, 0.99))
rng, T = np.random.default_rng(0), model_kw["block_size"]
times = []
for step in range(steps):
    starts = rng.integers(0, len(tokens) - T - 1, B)
    rows = np.stack([np.asarray(tokens[s:s + T + 1], dtype=np.int64) for s in starts])
    t0 = time.perf_counter()
    _, loss = model(rows[:, :-1], rows[:, 1:])
    opt.zero_grad(); loss.backward(); clip_grad_norm(model.parameters(), 1.0); opt.step()
    loss.item()
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def flags() -> list[str]:
    out = []
    for k, v in MODEL.items():
        name = "--" + k.replace("_", "-")
        out += ([name] if v is True else [f"--no-{k}"] if v is False else [name, str(v)])
    return out


def run_cli(data: Path, steps: int, out: Path) -> list[float]:
    """ms/step of each metrics window after the first, from `gpt train`'s metrics.jsonl."""
    cmd = [sys.executable, "-m", "gpt.cli", "train", "--data", str(data), "--out", str(out), "--max-steps",
           str(steps), "--batch-size", str(BATCH), "--lr", str(LR), "--eval-interval", str(10 * steps),
           "--log-interval", str(WINDOW), "--samples", "0", "--dropout", "0", *flags()]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["ms_per_step"] for r in records if r.get("kind") == "train" and r["step"] > WINDOW]


def run_python(data: Path, steps: int) -> list[float]:
    """ms of each step after the first WINDOW, from a plain Python loop in a fresh process."""
    out = subprocess.run([sys.executable, "-c", PY_LOOP, str(data), str(steps), json.dumps(MODEL), str(BATCH),
                          str(LR)], check=True, cwd=ROOT, capture_output=True, text=True).stdout
    times = json.loads(out.strip().splitlines()[-1])[WINDOW:]
    # the same windows as the CLI's records: the mean of each WINDOW steps
    return [1e3 * statistics.fmean(times[i:i + WINDOW]) for i in range(0, len(times), WINDOW)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, GPT_THREADS={os.environ.get('GPT_THREADS', '-')}")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", "gpt.cli", "prepare", "--out", str(data), "--vocab-size", "4096",
                        "--max-chars", "3000000"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        cli, py, ratios = [], [], []
        for r in range(args.rounds):
            cli_first = r % 2 == 0
            if not cli_first:
                p_r = run_python(data, args.steps)
            c_r = run_cli(data, args.steps, Path(tmp) / f"run{r}")
            if cli_first:
                p_r = run_python(data, args.steps)
            cli += c_r
            py += p_r
            ratios.append(statistics.median(p_r) / statistics.median(c_r))
            print(f"round {r + 1} ({'gpt train' if cli_first else 'Python'} first): gpt train "
                  f"{statistics.median(c_r):.0f} ms/step, Python {statistics.median(p_r):.0f}, ratio {ratios[-1]:.3f}")
    c, p = statistics.median(cli), statistics.median(py)
    print(f"config (b): {MODEL['n_layer']} layers, d={MODEL['n_embd']}, T={MODEL['block_size']}, B={BATCH}, "
          f"vocab 4096; {args.rounds} rounds of {args.steps} steps, medians of {WINDOW}-step windows")
    print("| run | ms/step |\n|---|---|")
    print(f"| gpt train | {c:.0f} |\n| Python loop (README) | {p:.0f} |")
    print(f"Python / gpt train: {p / c:.3f} (medians of all windows); {statistics.median(ratios):.3f} "
          f"(paired: the median of the rounds' own ratios)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
