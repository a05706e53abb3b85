"""The default `gpt train` (no arguments) against the default it replaced, in one run.

    python benchmarks/bench_default.py                  # both, from empty caches
    python benchmarks/bench_default.py --only new       # one of them
    GPT_THREADS=2 python benchmarks/bench_default.py    # the threads of both runs (default: free cores)

For each: the wall time of the whole job (data preparation, training, evaluation, the closing
samples) from an empty cache, the validation loss in nats per token and in bits per byte over
every token of the val split (`gpt eval`, no sampling noise; bits per byte compare across
tokenizers), and the share of sampled lines that Python's own `tokenize` accepts (samples of
`gpt sample` from a new document, the default sampling settings, fixed seeds; the last line of a
sample, cut by the token budget, is not counted). "old" is the default before the corpus filter
and the sweep: its corpus (every .py of the standard library but encodings/, shuffled, 3 MB; a
tokenizer of 2048 ids trained on the first 1.5 MB) is rebuilt here, its settings are flags.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path

# The settings of the old default, as flags (what `gpt train` with no arguments ran before).
OLD_FLAGS = ["--vocab-size", "2048", "--block-size", "128", "--n-layer", "4", "--n-head", "4",
             "--n-embd", "128", "--batch-size", "16", "--max-steps", "800", "--lr", "3e-3",
             "--min-lr", "3e-4", "--warmup-steps", "50", "--eval-interval", "100", "--eval-batches", "8",
             "--pos", "learned", "--norm", "layernorm", "--mlp", "gelu", "--bias"]


def old_corpus_files() -> list[Path]:
    """The old default corpus: standard-library sources but encodings/, shuffled (seed 0), 3 MB."""
    from bpe import default_corpus_files

    files = sorted(Path(p) for p in default_corpus_files() if "encodings" not in Path(p).parts)
    random.Random(0).shuffle(files)
    chosen, total = [], 0
    for f in files:
        if f.stat().st_size:
            chosen.append(f)
            total += f.stat().st_size
            if total >= 3_000_000:
                break
    return chosen


def accepted_share(samples: list[str]) -> tuple[float, int]:
    """(share of the non-blank lines that Python's tokenize reads without an error, lines counted).

    Each sample is read as one stream, as a file is: a line inside a docstring or an open bracket
    is judged with the lines around it. A line where tokenize fails (a bad indent, an
    ERRORTOKEN such as a stray '$' or an unterminated '...') is refused and reading starts again
    after it. The sample's last line, cut by the token budget, is not counted, nor a construct
    left open at the end."""
    ok = n = 0
    for text in samples:
        lines = text.split("\n")[:-1]
        n += sum(1 for line in lines if line.strip())
        start = 0
        while start < len(lines):
            bad = _first_bad_line(lines[start:])
            good = lines[start:] if bad is None else lines[start:start + bad]
            ok += sum(1 for line in good if line.strip())
            if bad is None:
                break
            start += bad + 1
    return (ok / n if n else 0.0), n


def _first_bad_line(lines: list[str]) -> int | None:
    """The index of the first line tokenize refuses, or None."""
    text = "\n".join(lines) + "\n"
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.ERRORTOKEN and not tok.string.isspace():
                return tok.start[0] - 1
    except tokenize.TokenError as exc:
        if "EOF in multi-line" in str(exc.args[0]):
            return None  # left open at the end of the sample: cut, not wrong
        return max(0, exc.args[1][0] - 1)
    except SyntaxError as exc:  # IndentationError: an unindent to no outer level
        return max(0, (exc.lineno or 1) - 1)
    return None


def _gpt(args: list[str], cwd: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "gpt.cli", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"gpt {' '.join(args[:3])} ... failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def measure(name: str, work: Path, n_samples: int, sample_tokens: int, extra: list[str]) -> dict:
    """Run one default from empty caches in `work` (`extra`: flags after its own); its wall time,
    val loss, bits per byte and tokenize share."""
    work.mkdir(parents=True)
    run = work / "run"
    t0 = time.perf_counter()
    if name == "old":
        from gpt.data.prepare import prepare

        prepare(old_corpus_files(), work / "data", vocab_size=2048, max_chars=3_000_000,
                tokenizer_max_chars=1_500_000)
        _gpt(["train", "--data", str(work / "data"), "--out", str(run), *OLD_FLAGS[2:], *extra], work)
    else:
        _gpt(["train", "--out", str(run), *extra], work)
    wall = time.perf_counter() - t0
    ev = json.loads(_gpt(["eval", "--run", str(run), "--json"], work))
    texts = []
    for seed in range(n_samples):
        raw = _gpt(["sample", "--run", str(run), "--max-new-tokens", str(sample_tokens), "--seed", str(seed)], work)
        texts.append(raw)
    share, lines = accepted_share(texts)
    return {"name": name, "wall_s": wall, "val_loss": ev["loss"], "val_bpb": ev.get("bits_per_byte"),
            "tokenize_ok": share, "lines": lines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("old", "new"), help="run one of the two")
    ap.add_argument("--samples", type=int, default=20, help="samples per model (default 20)")
    ap.add_argument("--sample-tokens", type=int, default=200, help="tokens per sample (default 200)")
    ap.add_argument("--max-steps", type=int, default=None, help="override both defaults' steps (a quick check)")
    args = ap.parse_args()
    names = [args.only] if args.only else ["old", "new"]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, GPT_THREADS={os.environ.get('GPT_THREADS', '-')}")
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--max-steps", str(args.max_steps)] if args.max_steps else []
        rows = [measure(n, Path(tmp) / n, args.samples, args.sample_tokens, extra) for n in names]
    print(f"{'default':<8} {'wall s':>7} {'val nats/tok':>13} {'val bits/byte':>14} {'tokenize ok':>12} {'lines':>6}")
    for r in rows:
        print(f"{r['name']:<8} {r['wall_s']:>7.0f} {r['val_loss']:>13.3f} {r['val_bpb']:>14.3f} "
              f"{r['tokenize_ok']:>11.0%} {r['lines']:>6}")
    if len(rows) == 2:
        print(f"new / old bits per byte: {rows[1]['val_bpb'] / rows[0]['val_bpb']:.3f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
