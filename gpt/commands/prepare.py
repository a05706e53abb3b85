"""`gpt prepare`: text files -> a nanoGPT data folder (train.bin, val.bin, meta.json)."""
from __future__ import annotations

import argparse

from gpt.commands.common import path_arg
from gpt.training.config import MODEL_DEFAULTS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "prepare", help="tokenize text into a nanoGPT data folder",
        description="Tokenize files, folders or globs with our BPE (in worker processes, streaming) "
                    "into OUT/train.bin and OUT/val.bin (flat uint16, uint32 past 65,536 ids) and "
                    "OUT/meta.json. Documents (files) are separated by <|endoftext|>.")
    p.add_argument("--input", nargs="+", metavar="PATH",
                   help="files, folders or globs (default: the Python standard library's sources)")
    p.add_argument("--out", required=True, type=path_arg, metavar="DIR", help="the data folder to write")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--tokenizer", metavar="PATH",
                     help="an existing tokenizer: our JSON, a .tiktoken, a Hugging Face tokenizer.json, "
                          "or a folder holding one (a run of ours, a Hugging Face model)")
    tok.add_argument("--vocab-size", type=int, metavar="N",
                     help=f"train a BPE tokenizer of N ids on the input first (default {MODEL_DEFAULTS['vocab_size']})")
    tok.add_argument("--char", action="store_true", help="character-level ids (nanoGPT's shakespeare_char)")
    p.add_argument("--pattern", metavar="NAME_OR_REGEX", default=None,
                   help="split pattern of a trained tokenizer (bpe's default when omitted)")
    p.add_argument("--val-fraction", type=float, default=0.1, metavar="F",
                   help="fraction of documents held out for validation (default 0.1)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="tokenizer processes (default: all cores, at most 8)")
    p.add_argument("--max-chars", type=int, default=None, metavar="N", help="read at most N characters")
    p.add_argument("--force", action="store_true",
                   help="replace a data folder that holds prepared data (runs trained on it can then "
                        "no longer resume)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt.data import prepare

    inputs = args.input
    if not inputs:
        from gpt.data.corpus import DEFAULT_MAX_CHARS, default_files

        inputs = default_files(args.max_chars or DEFAULT_MAX_CHARS)
    chosen = args.vocab_size is not None or args.tokenizer or args.char
    vocab = args.vocab_size if chosen else MODEL_DEFAULTS["vocab_size"]
    pattern = args.pattern
    if pattern is not None:
        from bpe.split.patterns import PATTERNS, resolve_pattern

        pattern = resolve_pattern(pattern.lower() if pattern.lower() in PATTERNS else pattern)
    meta = prepare(inputs, args.out, tokenizer=args.tokenizer, vocab_size=vocab, char=args.char,
                   pattern=pattern, val_fraction=args.val_fraction, workers=args.workers,
                   max_chars=args.max_chars, force=args.force, verbose=True)
    print(f"wrote {args.out}: {meta['train_tokens']:,} train + {meta['val_tokens']:,} val tokens "
          f"({meta['train_bytes']:,} + {meta['val_bytes']:,} bytes of text), "
          f"vocab {meta['vocab_size']} ({meta['dtype']})")
    return 0
