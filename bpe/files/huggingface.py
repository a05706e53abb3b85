"""GPT-2's ``encoder.json`` + ``vocab.bpe`` and Hugging Face's ``tokenizer.json``.

Both store tokens as printable strings through GPT-2's byte-to-unicode table
(``bytes_to_unicode``): the 188 printable Latin-1 bytes stand for themselves, the
other 68 bytes map to U+0100 onwards (space is ``Ġ``).

- ``load_gpt2_files``: ids as in encoder.json; entries that are neither a single byte
  nor made by a merge line (``<|endoftext|>``) become special tokens.
- ``save_gpt2_files``: the same pair of files, which Hugging Face's ``BPE.from_file``
  also reads.
- ``save_huggingface``: a ``tokenizer.json`` (model BPE, byte-level). tiktoken merges
  any adjacent pair whose concatenation is a token, lowest rank first, and takes a
  piece that is itself a token whole; the export lists, for each token in rank order,
  every split of it into two tokens, and sets ``ignore_merges``, so Hugging Face's
  pair-merge loop does the same. (A piece where two different splits of one token
  overlap could tie differently; trained vocabularies do not produce them.)
"""
from __future__ import annotations

import json
import os
import re
from functools import lru_cache

from ..split.patterns import GPT2_PATTERN, PATTERNS, resolve_pattern
from .atomic import atomic_write_text
from .jsonio import read_json, read_text, write_json
from .schema import at, dot, expect, id_limit, member, shown, token_id


@lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


@lru_cache(maxsize=None)
def unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def token_to_str(b: bytes) -> str:
    """A token's bytes as GPT-2's printable string (space is ``Ġ``), as vocab files store them."""
    enc = bytes_to_unicode()
    return "".join(enc[x] for x in b)


def _to_bytes(s: str, where: str) -> bytes:
    dec = unicode_to_bytes()
    try:
        return bytes(dec[c] for c in s)
    except KeyError as e:
        raise ValueError(f"{where}: character {e.args[0]!r} is not in GPT-2's byte-to-unicode table") from None


def load_gpt2_files(cls, encoder_json, vocab_bpe, pattern=None):
    encoder = read_json(encoder_json, "encoder.json")
    if not isinstance(encoder, dict):
        raise ValueError(f"{encoder_json}: expected a JSON object mapping token strings to ids")
    lines = read_text(vocab_bpe, "vocab.bpe").splitlines()
    mergeable: set[str] = {c for c in bytes_to_unicode().values()}
    for n, line in enumerate(lines, 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"{vocab_bpe}, line {n}: expected two tokens separated by one space, got {line[:80]!r}")
        for p in parts:
            if p not in mergeable:
                raise ValueError(f"{vocab_bpe}, line {n}: {p!r} is used before a merge makes it")
        mergeable.add(parts[0] + parts[1])
    ranks: dict[bytes, int] = {}
    specials: dict[str, int] = {}
    limit = id_limit(len(encoder))
    for s, i in encoder.items():
        token_id(i, f"{encoder_json}: field {shown(s)}", limit)
        if s in mergeable:
            ranks[_to_bytes(s, f"{encoder_json}: field {s!r}")] = i
        else:
            specials[s] = i
    missing = mergeable - set(encoder)
    if missing:
        raise ValueError(f"{encoder_json}: {len(missing)} tokens made by {vocab_bpe} have no id "
                         f"(e.g. {sorted(missing)[0]!r}); do the two files belong together?")
    try:
        return cls(ranks, resolve_pattern(pattern or GPT2_PATTERN), specials)
    except ValueError as e:
        raise ValueError(f"{encoder_json}: {e}") from None


def save_gpt2_files(tok, encoder_json, vocab_bpe) -> None:
    """Write ``encoder.json`` and ``vocab.bpe`` (needs a trained tokenizer's merges)."""
    if tok.merges is None:
        raise ValueError("only a tokenizer with merges (a trained one) can be written as vocab.bpe")
    vocab = {token_to_str(b): i for b, i in sorted(tok.mergeable_ranks.items(), key=lambda x: x[1])}
    vocab.update(tok.special_tokens)
    lines = ["#version: 0.2"]
    for a, b in tok.merges:
        lines.append(f"{token_to_str(tok.token_bytes(a))} {token_to_str(tok.token_bytes(b))}")
    atomic_write_text(encoder_json, json.dumps(vocab, ensure_ascii=False))
    atomic_write_text(vocab_bpe, "\n".join(lines) + "\n")


def onig_pattern(pattern: str) -> str:
    """The split pattern as Hugging Face's Oniguruma reads it the same way.

    Oniguruma reads ``X{1,3}+`` as ``(X{1,3})+`` (a repeat of a repeat), not as a
    possessive bounded repeat. Where the possessive form ends an alternative, as in
    cl100k's ``\\p{N}{1,3}+``, the greedy ``X{1,3}`` matches the same text.
    """
    return re.sub(r"(\{\d+(?:,\d*)?\})\+", r"\1", pattern)


def huggingface_dict(tok) -> dict:
    ranks = tok.mergeable_ranks
    by_rank = sorted(ranks.items(), key=lambda x: x[1])
    merges: list[str] = []
    first = {}
    if tok.merges is not None:  # the training merge first among a token's splits
        for a, b in tok.merges:
            first[tok.token_bytes(a) + tok.token_bytes(b)] = (tok.token_bytes(a), tok.token_bytes(b))
    for t, _ in by_rank:
        if len(t) < 2:
            continue
        splits = [(t[:k], t[k:]) for k in range(1, len(t)) if t[:k] in ranks and t[k:] in ranks]
        f = first.get(t)
        if f is not None and f in splits:
            splits.remove(f)
            splits.insert(0, f)
        merges.extend(f"{token_to_str(x)} {token_to_str(y)}" for x, y in splits)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    if tok.pattern == GPT2_PATTERN:
        pre = dict(byte_level, use_regex=True)  # the same regex, built in
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": onig_pattern(tok.pattern)}, "behavior": "Isolated", "invert": False},
            byte_level]}
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s, i in sorted(tok.special_tokens.items(), key=lambda x: x[1])]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": _vocab_with_specials(by_rank, tok.special_tokens),
            "merges": merges,
        },
    }


def _vocab_with_specials(by_rank: list[tuple[bytes, int]], specials: dict[str, int]) -> dict[str, int]:
    """model.vocab: the mergeable tokens, then the special ones with their ids, as GPT-2's file
    has them. An added token outside model.vocab is numbered after it by `tokenizers`, whatever
    id added_tokens gives it; one whose text a mergeable token has stays out (one id per text)."""
    vocab = {token_to_str(t): i for t, i in by_rank}
    for s, i in sorted(specials.items(), key=lambda x: x[1]):
        vocab.setdefault(s, i)
    return vocab


def save_huggingface(tok, path: str | os.PathLike) -> None:
    write_json(path, huggingface_dict(tok))


# ---- reading tokenizer.json: its shape, checked field by field (``schema``) ---------------------
_NULL = type(None)
_PRE = "pre_tokenizer"


def _byte_level(step: dict, field: str, use_regex: bool, path) -> None:
    if member(step, "add_prefix_space", (bool, _NULL), path, field, default=False):
        raise ValueError(f"{path}: {field} ByteLevel has add_prefix_space=true, which is not implemented")
    if member(step, "use_regex", bool, path, field, default=True) != use_regex:
        raise ValueError(f"{path}: {field} ByteLevel with use_regex={not use_regex} "
                         f"{'after a Split' if not use_regex else 'alone'} is not implemented")


def _hf_pattern(d: dict, path) -> str:
    """The one split pattern of a byte-level pre-tokenizer: ByteLevel with its built-in regex
    (GPT-2), or a Sequence of one Split regex and a ByteLevel without regex (LLaMA-3, Qwen2)."""
    pre = member(d, _PRE, (dict, _NULL), path, default=None)
    kind = member(pre, "type", str, path, _PRE) if pre is not None else None
    if kind == "ByteLevel":
        _byte_level(pre, _PRE, True, path)
        return GPT2_PATTERN
    steps = member(pre, "pretokenizers", list, path, _PRE) if kind == "Sequence" else None
    fields = [at(dot(_PRE, "pretokenizers"), k) for k in range(len(steps or []))]
    kinds = [member(expect(s, dict, path, f), "type", str, path, f) for s, f in zip(steps or [], fields)]
    if kinds != ["Split", "ByteLevel"]:
        raise ValueError(f"{path}: {_PRE} {kind!r} {kinds or ''} is not implemented; supported: "
                         "ByteLevel (GPT-2) or Sequence[Split regex, ByteLevel] (LLaMA-3, Qwen2)")
    (split, level), field = steps, fields[0]
    spec = member(split, "pattern", dict, path, field)
    if "Regex" not in spec:
        raise ValueError(f"{path}: field '{dot(field, 'pattern')}' holds {sorted(spec)[:3]}; only a Split with "
                         "a 'Regex' pattern is implemented")
    regex = member(spec, "Regex", str, path, dot(field, "pattern"))
    if member(split, "behavior", str, path, field) != "Isolated" or member(split, "invert", bool, path, field,
                                                                            default=False):
        raise ValueError(f"{path}: {field} Split must have behavior 'Isolated' and invert false, got "
                         f"{json.dumps(split)[:120]}")
    _byte_level(level, fields[1], False, path)
    for pattern in PATTERNS.values():  # our own export writes the Oniguruma spelling of these
        if onig_pattern(pattern) == regex:
            return pattern
    return resolve_pattern(regex, f"{path}: field '{dot(field, 'pattern.Regex')}'")


def _hf_merges(merges: list, vocab: dict, path) -> list[tuple[str, str]]:
    """The merges as pairs; each side and the token it makes must be in the vocabulary, as the
    `tokenizers` package requires."""
    out = []
    for k, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            raise ValueError(f"{path}: field 'model.merges[{k}]' must be \"a b\" or [a, b], got {str(m)[:40]!r}")
        a, b = pair
        if a not in vocab or b not in vocab or a + b not in vocab:
            t = next(t for t in (a, b, a + b) if t not in vocab)
            raise ValueError(f"{path}: field 'model.merges[{k}]' uses or makes {t[:40]!r}, which is not in "
                             "model.vocab")
        out.append((a, b))
    return out


def _hf_model(d: dict, path) -> dict:
    model = member(d, "model", dict, path)
    kind = member(model, "type", (str, _NULL), path, "model", default=None)
    if kind != "BPE":
        raise ValueError(f"{path}: field 'model.type' is {str(kind)[:40]!r}; only BPE is implemented")
    if (member(model, "byte_fallback", (bool, _NULL), path, "model", default=False)
            or member(model, "continuing_subword_prefix", (str, _NULL), path, "model", default=None)
            or member(model, "end_of_word_suffix", (str, _NULL), path, "model", default=None)):
        raise ValueError(f"{path}: a SentencePiece-style BPE (byte_fallback, subword prefix/suffix) is not "
                         "implemented; only byte-level BPE (GPT-2, LLaMA-3, Qwen2)")
    return model


def _hf_normalizer(d: dict, path) -> None:
    norm = member(d, "normalizer", (dict, _NULL), path, default=None)
    if norm is None:
        return
    kind = member(norm, "type", str, path, "normalizer")
    if kind != "NFC":
        raise ValueError(f"{path}: normalizer {kind[:40]!r} is not implemented")
    _not_applied(f"{path}: the NFC normalizer is not applied; text already in NFC encodes the same")


def _not_applied(message: str) -> None:
    """A part of tokenizer.json that loading leaves out: said once, where the user loads the file."""
    import warnings

    warnings.warn(message, stacklevel=5)


def _hf_left_out(d: dict, model: dict, added_rows: list, path) -> None:
    """Warn of what `tokenizers` applies and we do not: BPE dropout, a post-processor that adds
    tokens, and added tokens' whitespace and word-boundary options."""
    dropout = member(model, "dropout", (int, float, _NULL), path, "model", default=None)
    if dropout:
        _not_applied(f"{path}: model.dropout {dropout} is not applied; every merge is taken, as `tokenizers` "
                     "does without dropout")
    post = member(d, "post_processor", (dict, _NULL), path, default=None)
    if post is not None and member(post, "type", str, path, "post_processor") != "ByteLevel":
        _not_applied(f"{path}: post_processor {post['type'][:40]!r} is not applied; ids match `tokenizers`' "
                     "encode(text, add_special_tokens=False)")
    flagged = [(r["content"], f) for r in added_rows for f in ("lstrip", "rstrip", "single_word") if r.get(f)]
    if flagged:
        shown = ", ".join(f"{c[:20]!r} {f}" for c, f in flagged[:4]) + (", ..." if len(flagged) > 4 else "")
        _not_applied(f"{path}: added tokens' options are not applied ({shown}): such a token is matched "
                     "wherever its text is, and the spaces beside it are encoded as text")


def _hf_ids(vocab: dict, added_rows: list, path) -> tuple[dict[str, int], dict[str, int]]:
    """(vocab, added tokens) as text -> id, each id checked and bounded by the vocabulary's size."""
    limit = id_limit(len(vocab) + len(added_rows))
    added = {}
    for k, t in enumerate(added_rows):
        field = at("added_tokens", k)
        content = member(expect(t, dict, path, field), "content", str, path, field)
        added[content] = token_id(member(t, "id", int, path, field), f"{path}: field '{dot(field, 'id')}'", limit)
    owner: dict[int, str] = {}
    for s, i in vocab.items():
        token_id(i, f"{path}: field '{at('model.vocab', s)}'", limit)
        if i in owner and s not in added:
            raise ValueError(f"{path}: field '{at('model.vocab', s)}' has id {i}, which "
                             f"{owner[i][:40]!r} has too")
        owner.setdefault(i, s)
    return vocab, added


def huggingface_parts(d: dict, path) -> tuple[dict[bytes, int], str, dict[str, int]]:
    """(ranks, pattern, special tokens) of a parsed byte-level BPE tokenizer.json.

    Ids are the file's. Our encoder merges by id (tiktoken's rule), so the merge-made tokens must
    be numbered in merge order, as GPT-2's, LLaMA-3's and Qwen2's are; every added token (special
    or not: the `tokenizers` package matches both in the text) becomes a special token."""
    expect(d, dict, path, "(top level)")
    model = _hf_model(d, path)
    _hf_normalizer(d, path)
    pattern = _hf_pattern(d, path)
    vocab, added = _hf_ids(member(model, "vocab", dict, path, "model"),
                           member(d, "added_tokens", (list, _NULL), path, default=None) or [], path)
    _hf_left_out(d, model, d.get("added_tokens") or [], path)  # its rows checked by _hf_ids
    merges = _hf_merges(member(model, "merges", (list, _NULL), path, "model", default=None) or [], vocab, path)
    singles = set(bytes_to_unicode().values())
    made = {a + b: k for k, (a, b) in enumerate(merges)}
    ranks: dict[bytes, int] = {}
    last = None
    for s, i in sorted(((s, i) for s, i in vocab.items() if s not in added), key=lambda x: made.get(x[0], -1)):
        if s not in singles and s not in made:
            raise ValueError(f"{path}: token {s[:40]!r} (id {i}) is neither a byte, made by a merge, nor an added token")
        if s in made:
            if last is not None and i <= last[1]:
                raise ValueError(f"{path}: token {s[:40]!r} (id {i}, merge {made[s]}) is numbered before "
                                 f"{last[0][:40]!r} (id {last[1]}), made by an earlier merge; ids out of merge "
                                 "order are not implemented (we merge by id, as tiktoken does)")
            last = (s, i)
        ranks[_to_bytes(s, f"{path}: token {s[:40]!r}")] = i
    return ranks, pattern, added


def load_huggingface(cls, path: str | os.PathLike):
    """A Tokenizer from a Hugging Face byte-level BPE ``tokenizer.json``; ids are the file's."""
    ranks, pattern, specials = huggingface_parts(read_json(path, "tokenizer.json"), path)
    try:
        return cls(ranks, pattern, specials)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
