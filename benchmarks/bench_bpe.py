"""Benchmark bpe against its peers: training time, encode throughput, bytes per token.

Training corpora: code (the running Python's standard-library .py sources in sorted order,
wrapping around to reach each size; 3.11 holds 31.5 MB), English prose and multilingual text.
Every trainer gets the same documents and the same split pattern. Encoding corpora: code, English
prose and multilingual text (``bench_bpe_texts.py``: licenses, man pages in many languages,
translation catalogs), each with our trained vocabulary and with cl100k's when
``../shared/data/cl100k_base.tiktoken`` exists. Peers appear when installed: Hugging Face
tokenizers, rustbpe (training), tiktoken (encoding with the same ranks, checked equal).

    python3 benchmarks/bench_bpe.py                  # 10 and 50 MB, vocab 4096 and 32768
    python3 benchmarks/bench_bpe.py --quick          # 2 MB, vocab 1024 and 4096, one run
    python3 benchmarks/bench_bpe.py --sizes 10 --vocabs 4096 --repeat 3
    python3 benchmarks/bench_bpe.py --skip-train     # encoding alone, beside a heap no training has used

Batch encoding (``encode_ordinary_batch`` of the same documents, with ``num_threads`` 1 and
--batch-threads, default 2) prints its scaling beside tiktoken's, cold (a fresh tokenizer each
round) and warm (--batch-warm batches a round), the two thread counts taking turns batch by batch
and each ratio taken within a pair, every result checked equal to the one-thread ids;
--skip-batch leaves it out. Its title says how much that many processes running one memory-bound
loop at once slow each other, before the rows and after (on a shared machine the cores may not be
independent, and then no scaling figure is, tiktoken's included).

Each cell is the median of --repeat runs (training) or --encode-repeat runs (encoding),
the tools interleaved run by run (in training, the order turns round by round, and each round's
times go to stderr); "paired" is the median of each training round's own ratio of our time to
rustbpe's, the steadier figure on a machine whose speed drifts. Wall time and
CPU time (this process's threads plus its finished child processes) are both shown: on a
shared machine CPU time is the steadier measure. Encoding with ours is measured cold (a fresh
tokenizer: empty chunk cache) and warm (the same text again, cache filled). After the training rows in the same process
the heap is scattered and the encoders that allocate Python objects run slower (ours ~7% after
training 50 MB, tiktoken not); with --skip-train our tokenizer is trained in a child process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bpe import Tokenizer  # noqa: E402
from bpe.split.patterns import resolve_pattern  # noqa: E402
from bpe.workers import default_workers  # noqa: E402
from bench_bpe_long import load_average, processor  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402

CL100K = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl100k_base.tiktoken"

MB = 1_000_000


def stdlib_docs(n_bytes: int) -> list[str]:
    """Documents (one per standard-library file, wrapping around) whose UTF-8 bytes total ``n_bytes``."""
    return corpus_docs("code", n_bytes)


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished child processes."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def measure(fn, children: bool = True):
    """(wall seconds, CPU seconds, result) of one call. ``children=False`` counts this process
    alone: encoding starts no process, and children reaped meanwhile (earlier trainers' counting
    workers, when the collector finalizes them) are not its time."""
    cpu = cpu_seconds if children else time.process_time
    w, c = time.perf_counter(), cpu()
    out = fn()
    return time.perf_counter() - w, cpu() - c, out


def med(pairs, i):
    return statistics.median(p[i] for p in pairs)


def try_import(name):
    try:
        return __import__(name)
    except Exception:
        return None


# ---- training ---------------------------------------------------------------------


def train_ours(docs, vocab, pattern, workers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Tokenizer.train_from_iterator(docs, vocab_size=vocab, pattern=pattern,
                                             special_tokens=["<|endoftext|>"], workers=workers, progress=False)


def _train_child(conn, n_bytes, vocab, pattern, workers):
    conn.send(train_ours(stdlib_docs(n_bytes), vocab, pattern, workers))
    conn.close()


def train_apart(n_bytes, vocab, pattern, workers):
    """Our tokenizer trained on ``n_bytes`` of code in a forked process: training's garbage would
    leave this process's heap scattered, which slows every later encoder that allocates Python
    objects (ours by ~7% after 50 MB, measured) and not tiktoken."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_train_child, args=(send, n_bytes, vocab, pattern, workers))
    child.start()
    send.close()
    tok = recv.recv()
    child.join()
    return tok


def train_hf(tokenizers, docs, vocab, pattern):
    from tokenizers import Regex, decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False, min_frequency=0,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def train_rustbpe(rustbpe, docs, vocab, pattern):
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), vocab - 1, pattern=pattern)
    return tok


def train_row(corpus, docs, vocab, pattern, args, tokenizers, rustbpe):
    """One table row (each trainer ``args.repeat`` times, interleaved) and our tokenizer."""
    ours, hf, rb = [], [], []
    rb_err = tok = None

    def run_ours():
        nonlocal tok
        w, c, tok = measure(lambda: train_ours(docs, vocab, pattern, args.workers))
        ours.append((w, c))

    def run_hf():
        hf.append(measure(lambda: train_hf(tokenizers, docs, vocab, pattern))[:2])

    def run_rustbpe():
        nonlocal rb_err
        if rb_err is not None:  # its API failed once: not tried again
            return
        try:
            rb.append(measure(lambda: train_rustbpe(rustbpe, docs, vocab, pattern))[:2])
        except Exception as e:  # an API we do not know: say so, keep going
            rb_err = f"error: {type(e).__name__}"

    runs = [run_ours] + [run_hf] * bool(tokenizers) + [run_rustbpe] * bool(rustbpe)
    for r in range(args.repeat):
        # interleaved, so peers share the machine's conditions, and the order turns each round:
        # a run right after Hugging Face's (40 s of CPU on every core, hundreds of MB freed) is
        # slowed, so no trainer may always be the one that follows it
        for run in runs[r % len(runs):] + runs[:r % len(runs)]:
            run()
        print(f"    round {r + 1}: ours {ours[-1][0]:.1f} s"
              + (f", HF {hf[-1][0]:.1f} s" if hf else "") + (f", rustbpe {rb[-1][0]:.1f} s" if len(rb) > r else ""),
              file=sys.stderr)
    row = [corpus, vocab, f"{med(ours, 0):.1f} ({med(ours, 1):.1f})"]
    if hf:
        row += [f"{med(hf, 0):.1f} ({med(hf, 1):.1f})", f"{med(ours, 0) / med(hf, 0):.2f}x"]
    else:
        row += ["-", "-"]
    row.append(rb_err or (f"{med(rb, 0):.1f} ({med(rb, 1):.1f})" if rb else "-"))
    row.append(f"{med(ours, 0) / med(rb, 0):.2f}x" if rb else "-")
    # paired: the median of each round's own ratio, steadier (a round's runs share the machine)
    row.append(f"{statistics.median(o[0] / r[0] for o, r in zip(ours, rb)):.2f}x" if rb else "-")
    return row, tok


# ---- table ------------------------------------------------------------------------


def print_table(title, header, rows):
    print(f"\n{title}")
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    sys.stdout.flush()


# ---- encoding ---------------------------------------------------------------------

ENCODE_HEADER = ["corpus", "vocabulary", "ours cold", "ours warm", "tiktoken", "HF (per document)",
                 "cold/tiktoken (CPU)", "warm/tiktoken (CPU)", "bytes/token"]
BATCH_HEADER = ["corpus", "vocabulary", "ours cold, 1 thread", "ours cold, {n}", "cold scaling", "(CPU)",
                "ours warm, 1 thread", "ours warm, {n}", "warm scaling", "(CPU)", "tiktoken, 1 thread",
                "tiktoken, {n}", "tiktoken scaling"]


def hf_of(tokenizers, tok):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "tokenizer.json")
        tok.save_huggingface(p)
        return tokenizers.Tokenizer.from_file(p)


def paired(cells, key, base):
    """The median of each round's own ratio of ``base``'s CPU time to ``key``'s (a speed ratio of
    ``key`` to ``base``): a round's runs share the machine's conditions."""
    if not cells[key] or not cells[base]:
        return "-"
    return f"{statistics.median(b[1] / k[1] for k, b in zip(cells[key], cells[base])):.2f}x"


def encode_row(kind, docs, name, ranks, specials, pattern, args, tiktoken, tokenizers):
    """One table row: each encoder on the concatenated documents, interleaved run by run."""
    text = "".join(docs)
    mbs = len(text.encode("utf-8")) / MB
    warm = Tokenizer(ranks, pattern, specials)
    ids = warm.encode_ordinary(text)
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials) if tiktoken else None
    hf = hf_of(tokenizers, warm) if tokenizers and name.startswith("ours") else None  # HF ids differ for cl100k's byte order
    cells = {k: [] for k in ["cold", "warm", "tt", "hf"]}
    for _ in range(args.encode_repeat):
        fresh = Tokenizer(ranks, pattern, specials)
        w, c, out = measure(lambda: fresh.encode_ordinary(text), children=False)
        cells["cold"].append((w, c))
        assert out == ids
        cells["warm"].append(measure(lambda: warm.encode_ordinary(text), children=False)[:2])
        if enc is not None:
            w, c, out = measure(lambda: enc.encode_ordinary(text), children=False)
            cells["tt"].append((w, c))
            assert out == ids, f"tiktoken and bpe disagree on the {kind} text"
        if hf is not None:  # per document: the whole text is quadratic for it
            cells["hf"].append(measure(lambda: [hf.encode(d).ids for d in docs], children=False)[:2])

    def rate(key):
        v = cells[key]
        return f"{mbs / med(v, 0):.2f} ({mbs / med(v, 1):.2f})" if v else "-"

    return [kind, name, rate("cold"), rate("warm"), rate("tt"), rate("hf"), paired(cells, "cold", "tt"),
            paired(cells, "warm", "tt"), f"{mbs * MB / len(ids):.3f}"]


def _proc_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (Linux: /proc/PID/stat, in clock ticks); 0 elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def batch_measure(tok, fn):
    """(wall seconds, CPU seconds of the busiest process, result) of ``fn()``: this process or one of
    ``tok``'s batch workers, which are kept between batches (bpe.encode.parallel_encode). The
    busiest process's CPU is what the batch would take on cores nothing else uses."""
    from bpe.encode.parallel_encode import _POOLS

    def workers():
        pool = _POOLS.get(tok)
        return [p.pid for p, _ in pool.workers] if pool else []

    before = {pid: _proc_cpu(pid) for pid in workers()}
    w, c, out = measure(fn, children=False)
    return w, max([c] + [_proc_cpu(pid) - before.get(pid, 0.0) for pid in workers()]), out


def _gathers(start: float = 0.0) -> float:
    """Seconds of a fixed memory-bound loop (random reads of a 64 MiB table, as a large cache's
    lookups are), begun at the clock time ``start``."""
    import numpy as np

    table = np.arange(1 << 23, dtype=np.int64)
    at = np.random.default_rng(0).integers(0, table.size, 1 << 21)
    while time.time() < start:
        time.sleep(0.001)
    t = time.perf_counter()
    for _ in range(8):
        table[at].sum()
    return time.perf_counter() - t


def cores_check(n: int) -> float:
    """The time of ``n`` processes running the same memory-bound loop at once, over one's alone
    (medians): 1.0 where the cores do not slow each other; on a shared machine it can be far more,
    and then so is every scaling figure measured meanwhile, tiktoken's included."""
    import multiprocessing as mp

    alone, together = [], []
    with mp.get_context("fork").Pool(n) as pool:
        for _ in range(3):  # taking turns
            alone.append(_gathers())
            together += pool.map(_gathers, [time.time() + 0.5] * n)
    return statistics.median(together) / statistics.median(alone)


def batch_row(kind, docs, name, ranks, specials, pattern, args, tiktoken):
    """One row of the scaling table: encode_ordinary_batch on 1 and on --batch-threads threads, a
    fresh tokenizer for each per round, cold then warm (--batch-warm times), the two taking turns
    batch by batch, each result checked."""
    n = args.batch_threads
    one = Tokenizer(ranks, pattern, specials).encode_ordinary_batch(docs, num_threads=1)
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials) if tiktoken else None
    cells = {k: [] for k in ["cold1", "coldn", "warm1", "warmn", "tt1", "ttn"]}
    for _ in range(args.encode_repeat):
        toks = {threads: Tokenizer(ranks, pattern, specials) for threads in (1, n)}
        for state in ["cold"] + ["warm"] * args.batch_warm:  # the same tokenizers: their later batches are warm
            for threads, tag in ((1, "1"), (n, "n")):
                tok = toks[threads]
                w, c, out = batch_measure(tok, lambda tok=tok, threads=threads:
                                          tok.encode_ordinary_batch(docs, num_threads=threads))
                cells[state + tag].append((w, c))
                assert out == one, f"encode_batch on {threads} threads gave other ids for the {kind} text"
        del toks, tok
        for threads, tag in ((1, "1"), (n, "n")):
            if enc is not None:
                w, _, out = measure(lambda: enc.encode_ordinary_batch(docs, num_threads=threads))
                cells["tt" + tag].append((w, 0.0))
                assert out == one, f"tiktoken's batch and ours disagree on the {kind} text"
    mbs = sum(len(d.encode("utf-8")) for d in docs) / MB

    def rate(key):
        return f"{mbs / med(cells[key], 0):.2f}" if cells[key] else "-"

    def scaling(a, b, i=0):  # the median of each pair of batches' own ratio (i=1: of the busiest process's CPU)
        return f"{statistics.median(x[i] / y[i] for x, y in zip(cells[a], cells[b])):.2f}x" if cells[a] else "-"

    return [kind, name, rate("cold1"), rate("coldn"), scaling("cold1", "coldn"), scaling("cold1", "coldn", 1),
            rate("warm1"), rate("warmn"), scaling("warm1", "warmn"), scaling("warm1", "warmn", 1),
            rate("tt1"), rate("ttn"), scaling("tt1", "ttn")]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,50", help="corpus sizes in MB for training (default 10,50)")
    ap.add_argument("--vocabs", default="4096,32768", help="vocabulary sizes (default 4096,32768)")
    ap.add_argument("--encode-size", type=float, default=10, help="MB of corpus to encode (default 10)")
    ap.add_argument("--encode-vocab", type=int, default=None, help="vocab of the tokenizer used to encode (default: largest of --vocabs)")
    ap.add_argument("--pattern", default="gpt4", help="split pattern for every tool (default gpt4)")
    ap.add_argument("--repeat", type=int, default=1, help="training runs per cell (median; default 1)")
    ap.add_argument("--encode-repeat", type=int, default=3, help="encoding runs per cell (median; default 3)")
    ap.add_argument("--workers", type=int, default=None, help="our counting processes when training (default all cores)")
    ap.add_argument("--train-corpora", default="code,prose,multilingual",
                    help="corpora to train on (bench_bpe_texts.py; default code,prose,multilingual)")
    ap.add_argument("--encode-corpora", default="code,prose,multilingual",
                    help="corpora to encode (bench_bpe_texts.py; default code,prose,multilingual)")
    ap.add_argument("--batch-threads", type=int, default=2, help="threads of the batch-scaling table (default 2)")
    ap.add_argument("--batch-warm", type=int, default=4, help="warm batches per round in that table (default 4)")
    ap.add_argument("--skip-batch", action="store_true", help="leave out the batch-scaling table")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-encode", action="store_true")
    ap.add_argument("--quick", action="store_true", help="2 MB, vocab 1024 and 4096, single runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.vocabs, args.encode_size, args.repeat, args.encode_repeat = "2", "1024,4096", 2, 1, 1
    return args


def train_section(args, sizes, vocabs, pattern, tokenizers, rustbpe) -> dict:
    """Print the training table; returns {vocab: our tokenizer trained on code}."""
    trained: dict[int, Tokenizer] = {}
    rows = []
    for kind in args.train_corpora.split(","):
        for size in sizes:
            docs = corpus_docs(kind, int(size * MB))
            for vocab in vocabs:
                row, tok = train_row(f"{kind} {size:g} MB", docs, vocab, pattern, args, tokenizers, rustbpe)
                if kind == "code":
                    trained[vocab] = tok
                rows.append(row)
                print(f"  trained {kind} {size:g} MB vocab {vocab}: {row}", file=sys.stderr)
            del docs
    print_table(f"Training time: wall seconds (CPU seconds, all threads and processes), median of {args.repeat}",
                ["corpus", "vocab", "bpe (ours)", "HF tokenizers", "ours / HF (wall)", "rustbpe",
                 "ours / rustbpe (wall)", "paired"], rows)
    return trained


def encode_section(args, sizes, vocabs, pattern, trained, tiktoken, tokenizers) -> None:
    """Print the encoding table, with our tokenizer of --encode-vocab and cl100k's ranks."""
    ev = args.encode_vocab or max(vocabs)
    tok = trained.get(ev) or train_apart(int(min(sizes) * MB), ev, pattern, args.workers)
    vocabularies = [(f"ours {ev} (code)", tok.mergeable_ranks, tok.special_tokens)]
    if CL100K.is_file() and pattern == resolve_pattern("gpt4"):
        from bpe.files.tiktoken_file import load_tiktoken_ranks

        vocabularies.append(("cl100k", load_tiktoken_ranks(CL100K), {"<|endoftext|>": 100257}))
    rows, batch_rows = [], []
    checks = [] if args.skip_batch else [cores_check(args.batch_threads)]
    for kind in args.encode_corpora.split(","):
        docs = corpus_docs(kind, int(args.encode_size * MB))
        for name, ranks, specials in vocabularies:
            rows.append(encode_row(kind, docs, name, ranks, specials, pattern, args, tiktoken, tokenizers))
            print(f"  encoded {kind} with {name}: {rows[-1]}", file=sys.stderr)
        if not args.skip_batch:  # the last vocabulary: cl100k's where it is here
            name, ranks, specials = vocabularies[-1]
            batch_rows.append(batch_row(kind, docs, name, ranks, specials, pattern, args, tiktoken))
            print(f"  batch-encoded {kind} with {name}: {batch_rows[-1]}", file=sys.stderr)
    print_table(f"Encoding {args.encode_size:g} MB, one thread: MB/s of wall time (MB/s of CPU time), median of "
                f"{args.encode_repeat}; cold = fresh tokenizer (empty piece cache); ratios: speed against "
                f"tiktoken's, the median of each round's own; load average now {load_average()}", ENCODE_HEADER, rows)
    if batch_rows:
        n = f"{args.batch_threads} threads"
        checks.append(cores_check(args.batch_threads))
        cold, warm = args.encode_repeat, args.encode_repeat * args.batch_warm
        print_table(f"Batch encoding the same documents (encode_ordinary_batch): MB/s of wall time, medians of "
                    f"{cold} batches cold and {warm} warm; scaling = the time on one thread over the time on {n}, "
                    f"the median of each pair's own, the two taking turns (CPU: of the busiest process's CPU "
                    f"time, what idle cores would give); {default_workers()} cores; load average now {load_average()}; "
                    f"{args.batch_threads} processes running one memory-bound loop at once took "
                    f"{' then '.join(f'{c:.2f}x' for c in checks)} the time of one alone (before the rows, after)",
                    [h.format(n=n) for h in BATCH_HEADER], batch_rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",")]
    vocabs = [int(v) for v in args.vocabs.split(",")]
    pattern = resolve_pattern(args.pattern)
    tokenizers = try_import("tokenizers")
    tiktoken = try_import("tiktoken")
    rustbpe = try_import("rustbpe")
    print(f"{processor()}, {default_workers()} cores; python {sys.version.split()[0]}, load average "
          f"{load_average()}, pattern {args.pattern}; peers: "
          f"tokenizers {getattr(tokenizers, '__version__', 'absent')}, tiktoken {getattr(tiktoken, '__version__', 'absent')}, "
          f"rustbpe {'present' if rustbpe else 'absent'}")
    trained = {} if args.skip_train else train_section(args, sizes, vocabs, pattern, tokenizers, rustbpe)
    if not args.skip_encode:
        encode_section(args, sizes, vocabs, pattern, trained, tiktoken, tokenizers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
