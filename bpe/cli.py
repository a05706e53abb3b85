"""The ``bpe`` command: train, encode, decode, show.

    bpe train --input corpus/ --vocab-size 8192 --pattern gpt4 --special '<|endoftext|>' --out tok.json
    bpe train                      # default corpus: the standard library's sources
    echo "hello world" | bpe encode --tokenizer tok.json > ids.txt
    bpe decode --tokenizer tok.json ids.txt
    bpe show --tokenizer tok.json --text "hello world"
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .patterns import PATTERNS


def _load(path: str, pattern: str | None):
    from .tokenizer import Tokenizer

    p = Path(path)
    if not p.exists():
        raise SystemExit(f"bpe: tokenizer file {path!r} does not exist")
    if p.suffix == ".tiktoken":
        return Tokenizer.from_tiktoken(p, pattern=pattern or "gpt4")
    return Tokenizer.load(p)


def _read_input(file: str | None, text: str | None) -> str:
    if text is not None:
        return text
    if file is None or file == "-":
        return sys.stdin.read()
    try:
        with open(file, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"bpe: cannot read {file!r}: {e.strerror or e}")
    return data.decode("utf-8", errors="replace")


def _cmd_train(args) -> int:
    from .tokenizer import Tokenizer

    t0 = time.perf_counter()
    tok = Tokenizer.train(
        args.input or None,
        vocab_size=args.vocab_size,
        pattern=args.pattern,
        special_tokens=args.special or (),
        min_frequency=args.min_frequency,
        workers=args.workers,
        verbose=not args.quiet,
    )
    out = Path(args.out)
    if out.suffix == ".tiktoken":
        tok.save_tiktoken(out)
    else:
        tok.save(out)
    if args.hf_out:
        tok.save_huggingface(args.hf_out)
    if args.tiktoken_out:
        tok.save_tiktoken(args.tiktoken_out)
    if not args.quiet:
        print(f"trained {tok!r} in {time.perf_counter() - t0:.1f}s -> {out}", file=sys.stderr)
    return 0


def _allowed(arg: str):
    return "all" if arg == "all" else (set() if arg == "none" else set(arg.split(",")))


def _cmd_encode(args) -> int:
    tok = _load(args.tokenizer, args.pattern)
    text = _read_input(args.file, args.text)
    ids = tok.encode(text, allowed_special=_allowed(args.allowed_special))
    sys.stdout.write(" ".join(map(str, ids)) + "\n")
    return 0


def _cmd_decode(args) -> int:
    tok = _load(args.tokenizer, args.pattern)
    raw = _read_input(args.file, args.ids)
    try:
        ids = [int(x) for x in raw.replace(",", " ").split()]
    except ValueError as e:
        raise SystemExit(f"bpe decode: expected whitespace-separated integer ids: {e}")
    try:
        data = tok.decode_bytes(ids)
    except ValueError as e:
        raise SystemExit(f"bpe decode: {e}")
    sys.stdout.write(data.decode("utf-8", errors="replace"))
    return 0


_COLORS = [41, 42, 43, 44, 45, 46]


def _cmd_show(args) -> int:
    tok = _load(args.tokenizer, args.pattern)
    text = _read_input(args.file, args.text)
    ids = tok.encode(text, allowed_special=_allowed(args.allowed_special))
    color = sys.stdout.isatty() if args.color == "auto" else args.color == "always"
    out = []
    for k, i in enumerate(ids):
        piece = tok.token_bytes(i).decode("utf-8", errors="backslashreplace")
        if color:
            shown = piece.replace("\n", "\\n\n")
            out.append(f"\x1b[30;{_COLORS[k % len(_COLORS)]}m{shown}\x1b[0m")
        else:
            out.append(piece)
    sep = "" if color else args.sep
    sys.stdout.write(sep.join(out) + "\n")
    if args.ids:
        sys.stdout.write(" ".join(map(str, ids)) + "\n")
    print(f"{len(ids)} tokens, {len(text.encode('utf-8'))} bytes", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    names = ", ".join(sorted(PATTERNS))
    p = argparse.ArgumentParser(prog="bpe", description="Byte-level BPE: train a tokenizer, encode, decode, show tokens.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a tokenizer on files, folders or globs",
                       description="Train a byte-level BPE tokenizer. Without --input: the Python standard library's own .py sources.")
    t.add_argument("--input", nargs="+", metavar="PATH", help="files, folders (recursive) or glob patterns")
    t.add_argument("--vocab-size", type=int, default=4096, help="total vocabulary incl. 256 bytes and special tokens (default 4096)")
    t.add_argument("--pattern", default="gpt4", help=f"split pattern name ({names}) or a regex (default gpt4)")
    t.add_argument("--special", action="append", metavar="TOKEN", help="special token (repeatable), e.g. '<|endoftext|>'")
    t.add_argument("--min-frequency", type=int, default=1, help="stop when the best pair occurs fewer times (default 1)")
    t.add_argument("--workers", type=int, default=None, help="counting processes (default: all cores)")
    t.add_argument("--out", default="tok.json", help="output file: our JSON, or .tiktoken (default tok.json)")
    t.add_argument("--hf-out", help="also write a Hugging Face tokenizer.json here")
    t.add_argument("--tiktoken-out", help="also write a .tiktoken file here")
    t.add_argument("--quiet", action="store_true", help="no progress or summary")
    t.set_defaults(func=_cmd_train)

    def common(q, what):
        q.add_argument("--tokenizer", "-t", required=True, help="tokenizer file (our .json or a .tiktoken)")
        q.add_argument("--pattern", default=None, help="split pattern for a .tiktoken file (default gpt4)")
        q.add_argument("file", nargs="?", help=f"{what} file (default: stdin)")

    e = sub.add_parser("encode", help="text -> token ids", description="Encode text (a file or stdin) to space-separated ids.")
    common(e, "text")
    e.add_argument("--text", help="encode this string instead of a file")
    e.add_argument("--allowed-special", default="all", help="'all', 'none' or comma-separated special tokens (default all)")
    e.set_defaults(func=_cmd_encode)

    d = sub.add_parser("decode", help="token ids -> text", description="Decode whitespace-separated ids (a file or stdin) to text.")
    common(d, "ids")
    d.add_argument("--ids", help="decode these ids (a string) instead of a file")
    d.set_defaults(func=_cmd_decode)

    s = sub.add_parser("show", help="show token boundaries in a text",
                       description="Print the text with token boundaries visible (colored on a terminal, separated by --sep otherwise).")
    common(s, "text")
    s.add_argument("--text", help="show this string instead of a file")
    s.add_argument("--sep", default="|", help="separator between tokens without color (default '|')")
    s.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    s.add_argument("--ids", action="store_true", help="also print the ids")
    s.add_argument("--allowed-special", default="all", help="'all', 'none' or comma-separated special tokens")
    s.set_defaults(func=_cmd_show)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as e:
        print(f"bpe {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
