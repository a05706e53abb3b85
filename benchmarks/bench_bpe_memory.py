"""Benchmark: peak memory of training, ours (one run, and shards counted apart) beside Hugging Face.

Memory of our trainer is bounded by the number of distinct chunks, not by the corpus size:
``bpe count`` per shard, then ``bpe train --counts``. Each measurement runs in a fresh process
and reports its peak resident memory (VmHWM of the process, since ru_maxrss survives exec and
would start at the benchmark's own size; for ours also the largest counting worker's ru_maxrss),
so the figures do not mix.

    python3 benchmarks/bench_bpe_memory.py                    # 50 MB, vocab 32768
    python3 benchmarks/bench_bpe_memory.py --sizes 50,200 --shards 4
    python3 benchmarks/bench_bpe_memory.py --sizes 200 --hf-max-gb 8   # Hugging Face capped at 8 GB

Corpus: the standard library's sources repeated to size (as in bench_bpe.py), written to a
temporary folder as files, one shard per folder.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_bpe import MB, stdlib_docs  # noqa: E402

# Runs one job in this fresh process and prints its wall time and peak memory as JSON.
RUNNER = """
import json, resource, sys, time, warnings
sys.path.insert(0, {repo!r})
warnings.simplefilter("ignore")
t = time.perf_counter()
{job}
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:  # Linux keeps ru_maxrss across exec, so it would start at the forking parent's size
    with open("/proc/self/status") as f:
        self_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({{"s": time.perf_counter() - t, "self_mb": self_kb / 1024, "child_mb": child_kb / 1024}}))
"""

OURS = """
from bpe.cli import main
assert main(sys.argv[1:]) == 0
"""

HF = """
if float(sys.argv[3]) > 0:  # a cap on the address space, so a peer that needs too much fails here
    cap = int(float(sys.argv[3]) * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from pathlib import Path
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from bpe import GPT4_PATTERN
files = sorted(str(p) for p in Path(sys.argv[1]).rglob("*.txt"))
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=int(sys.argv[2]), show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train(files, trainer=trainer)
"""


def run(job: str, args: list[str]) -> dict:
    code = RUNNER.format(repo=str(REPO), job=job)
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def write_shards(root: Path, size_mb: float, shards: int) -> list[Path]:
    docs = stdlib_docs(int(size_mb * MB))
    dirs = [root / f"shard{k}" for k in range(shards)]
    for d in dirs:
        d.mkdir()
    for i, doc in enumerate(docs):
        (dirs[i % shards] / f"{i:06d}.txt").write_text(doc, encoding="utf-8", errors="surrogateescape")
    return dirs


def cell(m: dict, children: bool = False) -> str:
    if "error" in m:
        return m["error"][:40]
    mem = f"{m['self_mb']:.0f} MB" + (f" (worker {m['child_mb']:.0f} MB)" if children else "")
    return f"{m['s']:.1f} s, {mem}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50", help="corpus sizes in MB (default 50)")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--shards", type=int, default=4, help="shards for the count-then-merge run (default 4)")
    ap.add_argument("--hf-max-gb", type=float, default=12,
                    help="address-space cap for Hugging Face's run, so it fails instead of exhausting the "
                         "machine (default 12; 0: none)")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}; vocab {args.vocab}; wall seconds, peak resident memory of the process")
    print("| corpus | bpe train (one run) | bpe count per shard (largest) | bpe train --counts | HF tokenizers |")
    print("|---|---|---|---|---|")
    for size in [float(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            dirs = write_shards(root, size, args.shards)
            one = run(OURS, ["train", "--input", *map(str, dirs), "--vocab-size", str(args.vocab),
                             "--out", str(root / "one.json"), "--quiet"])
            counts = [run(OURS, ["count", "--input", str(d), "--out", str(root / f"counts.{k}"), "--quiet"])
                      for k, d in enumerate(dirs)]
            merged = run(OURS, ["train", "--counts", str(root / "counts.*"), "--vocab-size", str(args.vocab),
                                "--out", str(root / "merged.json"), "--quiet"])
            same = (root / "one.json").read_bytes() == (root / "merged.json").read_bytes()
            biggest = max(counts, key=lambda m: m.get("self_mb", 0))
            try:
                import tokenizers  # noqa: F401

                m = run(HF, [str(root), str(args.vocab), str(args.hf_max_gb)])
                hf = f"over {args.hf_max_gb:g} GB ({m['error'][:30]})" if "error" in m else cell(m)
            except ImportError:
                hf = "absent"
            print(f"| {size:g} MB | {cell(one, True)} | {cell(biggest, True)} | {cell(merged)}"
                  f"{'' if same else ' (MERGES DIFFER)'} | {hf} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
