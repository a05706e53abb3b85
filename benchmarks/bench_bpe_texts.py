"""Benchmark corpora for bpe, built deterministically from files a plain Debian/Python install has.

- ``code``: the running Python's standard-library .py sources (``bpe.default_corpus_files``).
- ``prose``: English text: the licenses in /usr/share/common-licenses, the nanoGPT
  Shakespeare file when ``../shared/data/tinyshakespeare.txt`` exists, then English man pages
  (/usr/share/man/man*/, roff source).
- ``multilingual``: man pages in other languages (/usr/share/man/<lang>/, gzipped roff) and the
  translated strings (msgstr) of the translation catalogs under /usr/share/locale (*.mo),
  one document per file, the languages interleaved so that any prefix mixes scripts.

Each corpus is a list of documents whose UTF-8 bytes add up to the size asked for (wrapping
around when the files run out, cut in the last one); files are visited in sorted order.

    python3 benchmarks/bench_bpe_texts.py          # what each corpus holds here, by script
"""
from __future__ import annotations

import gettext
import gzip
import sys
import unicodedata
from collections import Counter
from itertools import zip_longest
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import default_corpus_files  # noqa: E402

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
MAN = Path("/usr/share/man")
LOCALE = Path("/usr/share/locale")


def _man_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return None


def _catalog_text(path: Path) -> str | None:
    """The translated strings of a .mo catalog, in msgid order, one per line."""
    try:
        with open(path, "rb") as f:
            cat = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 - the parsed table
    except Exception:
        return None
    items = sorted(((str(k), v) for k, v in cat.items() if k and isinstance(v, str)), key=lambda kv: kv[0])
    return "\n".join(v for _, v in items) + "\n" if items else None


def _code_docs() -> Iterator[str]:
    for f in default_corpus_files():
        yield f.read_bytes().decode("utf-8", errors="replace")


def _prose_docs() -> Iterator[str]:
    for f in sorted(Path("/usr/share/common-licenses").glob("*")):
        if f.is_file() and not f.is_symlink():
            t = _man_text(f)
            if t:
                yield t
    if SHAKESPEARE.is_file():
        yield SHAKESPEARE.read_text("utf-8")
    for f in sorted(MAN.glob("man*/*")):
        t = _man_text(f)
        if t:
            yield t


def _multilingual_docs() -> Iterator[str]:
    per_lang: dict[str, list[Path]] = {}
    for d in sorted(MAN.iterdir()) if MAN.is_dir() else []:
        if d.is_dir() and not d.name.startswith("man"):
            per_lang.setdefault(d.name.split("_")[0].split(".")[0], []).extend(sorted(d.glob("man*/*")))
    for d in sorted(LOCALE.iterdir()) if LOCALE.is_dir() else []:
        if d.is_dir():
            per_lang.setdefault(d.name.split("_")[0].split("@")[0], []).extend(sorted(d.glob("LC_MESSAGES/*.mo")))
    for group in zip_longest(*(per_lang[k] for k in sorted(per_lang))):  # languages interleaved
        for f in group:
            if f is not None:
                t = _catalog_text(f) if f.suffix == ".mo" else _man_text(f)
                if t:
                    yield t


CORPORA: dict[str, Callable[[], Iterator[str]]] = {
    "code": _code_docs, "prose": _prose_docs, "multilingual": _multilingual_docs,
}


def corpus_docs(kind: str, n_bytes: int) -> list[str]:
    """Documents of corpus ``kind`` whose UTF-8 bytes total ``n_bytes`` (wrapping around)."""
    docs: list[str] = []
    total = 0
    while total < n_bytes:
        before = total
        for t in CORPORA[kind]():
            b = t.encode("utf-8")
            if total + len(b) > n_bytes:
                t = b[: n_bytes - total].decode("utf-8", errors="ignore")
                b = t.encode("utf-8")
            docs.append(t)
            total += len(b)
            if total >= n_bytes:
                return docs
        if total == before:
            raise RuntimeError(f"no {kind} text found on this machine")
        if total + 3 >= n_bytes:  # a cut inside a character can leave up to 3 bytes short
            break
    return docs


def describe(docs: list[str]) -> str:
    """Share of the characters by script-ish class (ASCII, Latin, Cyrillic, CJK, ...)."""
    c: Counter[str] = Counter()
    for d in docs:
        for ch in d[:: max(1, len(d) // 2000)]:  # a sample of each document
            c["ascii" if ch.isascii() else unicodedata.name(ch, "? ?").split()[0]] += 1
    n = sum(c.values()) or 1
    return ", ".join(f"{k} {v / n:.0%}" for k, v in c.most_common(8))


if __name__ == "__main__":
    for kind in CORPORA:
        docs = corpus_docs(kind, 5_000_000)
        print(f"{kind}: {len(docs)} documents, {sum(map(len, docs)):,} characters; {describe(docs)}")
