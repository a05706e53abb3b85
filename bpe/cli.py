"""The ``bpe`` command: train, count, encode, decode, show.

    bpe train --input corpus/ --vocab-size 8192 --pattern gpt4 --special '<|endoftext|>' --out tok.json
    bpe train                      # default corpus: the standard library's sources
    bpe count --input shard3/ --out counts.3          # one shard, on any machine
    bpe train --counts 'counts.*' --vocab-size 8192   # the tokenizer of one run over all shards
    echo "hello world" | bpe encode --tokenizer tok.json > ids.txt
    bpe encode --tokenizer tok.json --bytes data.bin  # any bytes, exactly
    bpe decode --tokenizer tok.json ids.txt
    bpe show --tokenizer tok.json --text "hello world"

Warnings print as one line, ``bpe: warning: ...``; errors as ``bpe CMD: error: ...``, exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

from .files.lock import FolderBusy
from .split.patterns import PATTERNS, resolve_pattern
from .tokenizer import DEFAULT_VOCAB_SIZE, Tokenizer

DEFAULT_OUT = "tok.json"


def _load(path: str, pattern: str | None):
    """Any tokenizer bpe reads (our JSON, .tiktoken, Hugging Face tokenizer.json, a model folder)."""
    from .files.any_tokenizer import load_any

    if not Path(path).exists():
        raise SystemExit(f"bpe: tokenizer file {path!r} does not exist")
    return load_any(Tokenizer, path, pattern)  # a .tiktoken's pattern: --pattern, its side file's, gpt4


def _printable(msg: str) -> str:
    """``msg`` with the bytes of a file name that is not UTF-8 (surrogate escapes) shown as ``\\xNN``,
    so that it prints on any stream and names the file as the shell would."""
    try:
        return msg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return msg.encode("utf-8", "backslashreplace").decode("utf-8")


def _warn(msg: str) -> None:
    print(_printable(f"bpe: warning: {msg}"), file=sys.stderr)


def _read_bytes(file: str | None) -> bytes:
    if file is None or file == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        return stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
    try:
        with open(file, "rb") as f:
            return f.read()
    except OSError as e:
        raise SystemExit(f"bpe: cannot read {file!r}: {e.strerror or e}")


def _read_text(file: str | None, text: str | None) -> str:
    """The input as text; bytes that are not UTF-8 become U+FFFD with a warning that says so."""
    if text is not None:
        data = os.fsencode(text)  # --text arrives with undecodable bytes as surrogate escapes
    else:
        data = _read_bytes(file)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = "--text" if text is not None else (file if file not in (None, "-") else "stdin")
        _warn(f"{where} holds bytes that are not UTF-8 (the first at byte offset {e.start}); they were "
              "replaced by U+FFFD, which changes the text; pass --bytes to encode the bytes exactly")
        return data.decode("utf-8", errors="replace")


def _out_path(args) -> Path:
    """--out, or tok.json; an existing tok.json is not overwritten unless --force."""
    if args.out is not None:
        return Path(args.out)
    out = Path(DEFAULT_OUT)
    if out.exists() and not args.force:
        raise SystemExit(f"bpe train: {out} exists; pass --out PATH for another file, or --force to "
                         "overwrite it")
    return out


def _outputs(args, out: Path) -> list[tuple[Path, str]]:
    """(path, kind) of every file ``bpe train`` writes; kind is json, tiktoken or hf."""
    outs = [(out, "tiktoken" if out.suffix == ".tiktoken" else "json")]
    outs += [(Path(p), kind) for p, kind in [(args.tiktoken_out, "tiktoken"), (args.hf_out, "hf")] if p]
    seen: dict[Path, Path] = {}
    for p, _ in outs:
        if p.resolve() in seen:
            raise ValueError(f"{p} is named as two outputs (--out, --tiktoken-out, --hf-out must differ)")
        seen[p.resolve()] = p
    return outs


def _output_files(outs: list[tuple[Path, str]]) -> list[Path]:
    from .files.tiktoken_file import tiktoken_side_path

    return [f for p, kind in outs for f in ([p, tiktoken_side_path(p)] if kind == "tiktoken" else [p])]


def _flagged_outputs(outs: list[tuple[Path, str]]) -> list[tuple[str, Path]]:
    """(flag, file) of every file ``bpe train`` writes (a .tiktoken's side file under its flag)."""
    flags = {"tiktoken": "--tiktoken-out", "hf": "--hf-out"}
    return [("--out" if i == 0 else flags[kind], f) for i, (p, kind) in enumerate(outs)
            for f in _output_files([(p, kind)])]


def _refuse_overwriting_inputs(outputs: list[tuple[str, Path]], inputs, input_flag: str) -> None:
    """ValueError when an output (flag, file) is one of the input files, which writing it would destroy."""
    existing = [(flag, f) for flag, f in outputs if f.exists()]  # a file not there yet is no input
    if not existing or not inputs:
        return
    from .files.corpus import expand_inputs

    files = {os.path.realpath(f) for f in expand_inputs(inputs, skip_binary=False)}
    for flag, f in existing:
        if os.path.realpath(f) in files:
            raise ValueError(f"{flag} writes {f}, which is one of the {input_flag} files: it would overwrite "
                             f"that input; name another output file")


def _save(tok, outs: list[tuple[Path, str]], quiet: bool) -> None:
    """Write every output as one set (``bpe.files.write_set``): a kill or a full disk leaves the
    old files or the new ones, never some of each."""
    from .files.bpe_json import json_text
    from .files.huggingface import huggingface_dict
    from .files.jsonio import json_text as json_value_text
    from .files.tiktoken_file import tiktoken_side_path, tiktoken_texts
    from .files.write_set import write_together

    texts: dict[Path, str] = {}
    written = []
    for path, kind in outs:
        if kind == "tiktoken":
            texts.update(tiktoken_texts(tok, path))
            written.append(f"{path} (mergeable ranks) + {tiktoken_side_path(path)} (split pattern and "
                           f"{len(tok.special_tokens)} special token(s), which a .tiktoken file cannot hold: pass "
                           "them to tiktoken.Encoding as pat_str= and special_tokens=; bpe reads them back)")
        elif kind == "hf":
            texts[path] = json_value_text(huggingface_dict(tok))
            written.append(f"{path} (Hugging Face tokenizer.json)")
        else:
            texts[path] = json_text(tok)
            written.append(str(path))
    write_together(texts)
    if not quiet:
        for w in written:
            print(f"wrote {w}", file=sys.stderr)


def _cmd_train(args) -> int:
    from .files.write_set import locked
    from .train.mpi_count import world

    outs = _outputs(args, _out_path(args))
    _refuse_overwriting_inputs(_flagged_outputs(outs), args.counts or args.input,
                               "--counts" if args.counts else "--input")
    t0 = time.perf_counter()
    # The outputs are locked from the start, so a second `bpe train` into them stops at once; under
    # MPI only rank 0 writes, and it locks them when it does.
    with locked(_output_files(outs)) if world() is None else nullcontext():
        tok = _train(args)
        if tok is None:
            return 0  # not rank 0: it counted its share; rank 0 trains and writes
        _save(tok, outs, args.quiet)
    if not args.quiet:
        print(f"trained {tok!r} in {time.perf_counter() - t0:.1f}s -> {outs[0][0]}", file=sys.stderr)
    return 0


def _train(args):
    """The trained tokenizer (None on MPI ranks other than 0)."""
    from .train.mpi_count import world

    ranks = world()
    if ranks is not None and not args.counts:
        return _train_across_ranks(args)
    if args.counts:
        if args.input:
            raise SystemExit("bpe train: give --input or --counts, not both")
        if ranks is not None and ranks[1] != 0:
            return None  # the files hold every count: rank 0 alone trains and writes
        return Tokenizer.train_from_counts(args.counts, vocab_size=args.vocab_size, pattern=args.pattern,
                                           special_tokens=args.special, min_frequency=args.min_frequency,
                                           verbose=not args.quiet)
    return Tokenizer.train(args.input or None, vocab_size=args.vocab_size, pattern=args.pattern,
                           special_tokens=args.special or (), min_frequency=args.min_frequency,
                           workers=args.workers, verbose=not args.quiet)


def _train_across_ranks(args):
    """Under ``mpiexec -n N``: every rank counts its share, rank 0 trains (others get None)."""
    from .files.corpus import default_corpus_files, expand_inputs
    from .train.mpi_count import count_files_across_ranks
    from .train.trainer import train_from_chunk_counts

    pattern = resolve_pattern(args.pattern)
    files = expand_inputs(args.input) if args.input else default_corpus_files()
    counts = count_files_across_ranks(files, pattern, args.special or [])
    if counts is None:
        return None
    return train_from_chunk_counts(Tokenizer, counts, args.vocab_size, pattern, args.special or (),
                                   args.min_frequency, not args.quiet, None)


def _cmd_count(args) -> int:
    from .train.counts_file import save_counts
    from .train.trainer import count_shard

    pattern = resolve_pattern(args.pattern)
    specials = args.special or []
    _refuse_overwriting_inputs([("--out", Path(args.out))], args.input, "--input")
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    counts = count_shard(args.input, pattern, specials, args.workers, log)
    save_counts(args.out, counts, pattern, specials)
    log(f"wrote {len(counts):,} distinct chunks to {args.out}")
    return 0


def _special_arg(arg: str, flag: str):
    """'all', 'none' or a comma-separated list, as the library's allowed/disallowed_special."""
    if arg == "all":
        return "all"
    if arg == "none":
        return set() if flag == "allowed" else ()
    return {s for s in arg.split(",") if s}


def _encode(args, tok) -> list[int]:
    from .encode.special import DisallowedSpecialError

    if args.bytes:
        data = os.fsencode(args.text) if args.text is not None else _read_bytes(args.file)
        return tok.encode_bytes(data)
    text = _read_text(args.file, args.text)
    try:
        return tok.encode(text, allowed_special=_special_arg(args.allowed_special, "allowed"),
                          disallowed_special=_special_arg(args.disallowed_special, "disallowed"))
    except DisallowedSpecialError as e:
        raise ValueError(f"the input holds special-token text {e.token!r} at "
                         f"character {e.position}; pass --allowed-special all (or {e.token}) to encode it as "
                         "the special token, or --disallowed-special none to encode it as ordinary text") from None


def _cmd_encode(args) -> int:
    ids = _encode(args, _load(args.tokenizer, args.pattern))
    sys.stdout.write(" ".join(map(str, ids)) + "\n")
    return 0


def _cmd_decode(args) -> int:
    tok = _load(args.tokenizer, args.pattern)
    raw = _read_text(args.file, args.ids)
    try:
        ids = [int(x) for x in raw.replace(",", " ").split()]
    except ValueError as e:
        raise SystemExit(f"bpe decode: expected whitespace-separated integer ids: {e}")
    try:
        data = tok.decode_bytes(ids)
    except ValueError as e:
        raise SystemExit(f"bpe decode: {e}")
    out = getattr(sys.stdout, "buffer", None)
    if out is not None and args.bytes:
        sys.stdout.flush()
        out.write(data)
    else:
        sys.stdout.write(data.decode("utf-8", errors="replace"))
    return 0


_COLORS = [41, 42, 43, 44, 45, 46]


def _cmd_show(args) -> int:
    tok = _load(args.tokenizer, args.pattern)
    ids = _encode(args, tok)
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
    print(f"{len(ids)} tokens, {len(tok.decode_bytes(ids))} bytes", file=sys.stderr)
    return 0


def _add_train(sub, names: str) -> None:
    t = sub.add_parser("train", help="train a tokenizer on files, folders or globs, or on count files",
                       description="Train a byte-level BPE tokenizer. Without --input: the Python standard "
                                   "library's own .py sources.")
    t.add_argument("--input", nargs="+", metavar="PATH", help="files, folders (recursive) or glob patterns")
    t.add_argument("--counts", nargs="+", metavar="FILE",
                   help="train on chunk-count files of `bpe count` (globs such as 'counts.*'): the same "
                        "tokenizer as one run over all their shards")
    t.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE,
                   help="total vocabulary incl. 256 bytes and special tokens (default %(default)s)")
    t.add_argument("--pattern", default=None, help=f"split pattern name ({names}) or a regex (default gpt4; "
                                                   "with --counts, the files' own)")
    t.add_argument("--special", action="append", metavar="TOKEN", help="special token (repeatable), e.g. '<|endoftext|>'")
    t.add_argument("--min-frequency", type=int, default=1, help="stop when the best pair occurs fewer times (default %(default)s)")
    t.add_argument("--workers", type=int, default=None, help="counting processes (default: all cores)")
    t.add_argument("--out", default=None, help=f"output file: our JSON, or .tiktoken (default {DEFAULT_OUT}, "
                                               "which is not overwritten without --force)")
    t.add_argument("--force", action="store_true", help=f"overwrite an existing {DEFAULT_OUT}")
    t.add_argument("--hf-out", help="also write a Hugging Face tokenizer.json here")
    t.add_argument("--tiktoken-out", help="also write a .tiktoken file here (and its side file <file>.json)")
    t.add_argument("--quiet", action="store_true", help="no progress or summary")
    t.set_defaults(func=_cmd_train)

    c = sub.add_parser("count", help="write the chunk counts of one shard (for train --counts)",
                       description="Count the pre-tokenized chunks of files, folders or globs and write them "
                                   "to --out; `bpe train --counts` merges such files from any number of shards.")
    c.add_argument("--input", nargs="+", required=True, metavar="PATH", help="files, folders or globs of this shard")
    c.add_argument("--out", required=True, help="output count file, e.g. counts.3")
    c.add_argument("--pattern", default=None, help=f"split pattern name ({names}) or a regex (default gpt4)")
    c.add_argument("--special", action="append", metavar="TOKEN", help="special token (repeatable): its text splits documents")
    c.add_argument("--workers", type=int, default=None, help="counting processes (default: all cores)")
    c.add_argument("--quiet", action="store_true")
    c.set_defaults(func=_cmd_count)


def _add_codec(sub) -> None:
    def common(q, what):
        q.add_argument("--tokenizer", "-t", required=True,
                       help="tokenizer: our .json, a .tiktoken, a Hugging Face tokenizer.json or a model folder")
        q.add_argument("--pattern", default=None, help="split pattern for a .tiktoken file (default: its side "
                                                       "file's, else gpt4)")
        q.add_argument("file", nargs="?", help=f"{what} file (default: stdin)")

    def specials(q):
        q.add_argument("--allowed-special", default="none", help="special tokens whose text becomes their id: "
                                                                 "'all', 'none' or a comma-separated list (default none)")
        q.add_argument("--disallowed-special", default="all", help="special-token text that is an error: 'all' "
                                                                   "(every one not allowed; default), 'none' (encode as text) or a list")
        q.add_argument("--bytes", action="store_true", help="encode the input's bytes exactly (no UTF-8 decoding, "
                                                            "special-token text as ordinary text)")

    e = sub.add_parser("encode", help="text -> token ids", description="Encode text (a file or stdin) to space-separated ids.")
    common(e, "text")
    e.add_argument("--text", help="encode this string instead of a file")
    specials(e)
    e.set_defaults(func=_cmd_encode)

    d = sub.add_parser("decode", help="token ids -> text", description="Decode whitespace-separated ids (a file or stdin) to text.")
    common(d, "ids")
    d.add_argument("--ids", help="decode these ids (a string) instead of a file")
    d.add_argument("--bytes", action="store_true", help="write the raw bytes (no U+FFFD for bytes that are not UTF-8)")
    d.set_defaults(func=_cmd_decode)

    s = sub.add_parser("show", help="show token boundaries in a text",
                       description="Print the text with token boundaries visible (colored on a terminal, separated by --sep otherwise).")
    common(s, "text")
    s.add_argument("--text", help="show this string instead of a file")
    s.add_argument("--sep", default="|", help="separator between tokens without color (default '|')")
    s.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    s.add_argument("--ids", action="store_true", help="also print the ids")
    specials(s)
    s.set_defaults(func=_cmd_show)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bpe", description="Byte-level BPE: train a tokenizer, encode, decode, show tokens.")
    sub = p.add_subparsers(dest="command", required=True)
    _add_train(sub, ", ".join(sorted(PATTERNS)))
    _add_codec(sub)
    return p


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    _warn(str(message))  # the message alone: no Python source line


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return args.func(args)
        except (ValueError, OSError, FolderBusy) as e:
            print(_printable(f"bpe {args.command}: error: {e}"), file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130


if __name__ == "__main__":
    sys.exit(main())
