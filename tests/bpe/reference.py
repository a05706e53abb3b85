"""A naive BPE trainer (minbpe-style: recount every pair after every merge), the oracle.

Same rules as the fast trainer: chunks from ``regex.findall`` per text; the next merge
is the pair with the highest count, ties to the smallest (left_id, right_id); within a
chunk, occurrences merge left to right without overlap.
"""
from __future__ import annotations

from collections import Counter

import regex


def merge(word: tuple[int, ...], pair: tuple[int, int], new: int) -> tuple[int, ...]:
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def naive_train(texts, n_merges: int, pattern: str, min_frequency: int = 1) -> list[tuple[int, int]]:
    chunks: Counter[str] = Counter()
    for t in texts:
        chunks.update(regex.findall(pattern, t))
    words: Counter[tuple[int, ...]] = Counter()
    for c, n in chunks.items():
        words[tuple(c.encode("utf-8"))] += n
    merges = []
    for k in range(n_merges):
        stats: Counter[tuple[int, int]] = Counter()
        for w, n in words.items():
            for p in zip(w, w[1:]):
                stats[p] += n
        if not stats:
            break
        best = min(stats, key=lambda p: (-stats[p], p))
        if stats[best] < min_frequency:
            break
        merges.append(best)
        new_words: Counter[tuple[int, ...]] = Counter()
        for w, n in words.items():
            new_words[merge(w, best, 256 + k)] += n
        words = new_words
    return merges
