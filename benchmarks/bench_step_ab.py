"""What a choice in the CPU step is worth: the same model's forward and backward with the choice
on (B, the library as it is) and off (A, the way it was before), alternating in one process.

    python3 benchmarks/bench_step_ab.py --what norm-blocks          # config (a), 30 pairs
    python3 benchmarks/bench_step_ab.py --what norm-blocks --config b --pairs 8
    python3 benchmarks/bench_step_ab.py --what row-chain
    python3 benchmarks/bench_step_ab.py --what unshifted-softmax

Between two runs in separate processes this machine's speed can drift by more than such a change
is worth; here both settings share the process, the weights and the batch, and take turns in
windows of steps (10 for config (a), 2 for (b); which goes first alternates), so a drift falls on
both alike. Printed: the medians of both and the median of the pairs' own ratios B / A, for the
forward alone and for forward plus backward, and the load average.

The choices (off = A; more can be added to CHOICES):
- norm-blocks: a fused sublayer's pre-norm computed inside each of its blocks of rows, on the
  thread that runs the block (autograd/ops/prenorm.py); off: all rows at once on the calling
  thread before the blocks start, by the same formula.
- row-chain: the GPT's blocks run as one chain of row-block ops, each group of rows through every
  fused sublayer in one pool task (autograd/row_chain.py); off: one op at a time, each handing
  its blocks to the pool.
- unshifted-softmax: the causal attention's softmax exponentiates the scores unshifted where
  they are in exp's range (autograd/ops/causal_attention.py); off: shifted by each query's max.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import CONFIGS, _loadavg, build  # noqa: E402


def _norm_blocks():
    """set(on): on, the library's RowNorm; off, one that computes every row when it is made, as
    the LayerNorm op does (its own blocks on the pool when large; the RMSNorm op, which has no
    pool form, is not modelled for large arrays)."""
    from autograd import parallel
    from autograd.ops import prenorm

    made, block = prenorm.RowNorm.__init__, prenorm.RowNorm.block

    def made_whole(self, x2, *args):
        made(self, x2, *args)
        if self.out is None:
            self.out = np.empty_like(x2)
        parallel.for_chunks(lambda lo, hi: block(self, lo, hi), x2.shape[0], x2.shape[1])

    def set_(on: bool) -> None:
        prenorm.RowNorm.__init__ = made if on else made_whole
        prenorm.RowNorm.block = block if on else (lambda self, lo, hi: self.out[lo:hi])

    return set_


def _row_chain():
    """set(on): on, GPT.forward opens the chain as the library does; off, it records nothing."""
    from autograd import row_chain

    def set_(on: bool) -> None:
        row_chain.ENABLED = on

    return set_


def _unshifted_softmax():
    """set(on): on, the library's softmax over the keys; off, the stable one, query by query."""
    from autograd.ops import causal_attention as ca

    unshifted = ca._keys_softmax

    def set_(on: bool) -> None:
        ca._keys_softmax = unshifted if on else ca._stable_keys_softmax

    return set_


CHOICES = {"norm-blocks": _norm_blocks, "row-chain": _row_chain, "unshifted-softmax": _unshifted_softmax}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=sorted(CHOICES), required=True)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="a")
    ap.add_argument("--pairs", type=int, default=30, help="windows of each setting (default 30)")
    args = ap.parse_args()
    set_choice = CHOICES[args.what]()
    _, model, opt = build(args.config, "cpu")
    c = CONFIGS[args.config]
    rng = np.random.default_rng(0)
    x, y = (rng.integers(0, c["vocab_size"], (c["batch"], c["block_size"])) for _ in range(2))
    steps = 10 if args.config == "a" else 2
    print(f"{args.what}, config ({args.config}), {args.pairs} pairs of {steps}-step windows; "
          f"load average {_loadavg()}")

    def window() -> tuple[float, float]:
        fwd, both = [], []
        for _ in range(steps):
            t0 = time.perf_counter()
            _, loss = model(x, y)
            t1 = time.perf_counter()
            loss.backward()
            opt.zero_grad()
            fwd.append(t1 - t0)
            both.append(time.perf_counter() - t0)
        return statistics.median(fwd), statistics.median(both)

    for on in (True, False):  # warm-up of both
        set_choice(on)
        for _ in range(3):
            window()
    runs: dict[bool, list] = {True: [], False: []}
    for i in range(args.pairs):
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            set_choice(on)
            runs[on].append(window())
    set_choice(True)
    print("| setting | forward ms | forward + backward ms |\n|---|---|---|")
    for on, label in ((False, "A: off"), (True, "B: on (the library)")):
        f, b = zip(*runs[on])
        print(f"| {label} | {1e3 * statistics.median(f):.2f} | {1e3 * statistics.median(b):.2f} |")
    (fa, ba), (fb, bb) = (np.array(runs[on]).T for on in (False, True))
    print(f"paired B / A: forward {np.median(fb / fa):.3f}, forward + backward {np.median(bb / ba):.3f}; "
          f"load average after {_loadavg()}")


if __name__ == "__main__":
    main()
