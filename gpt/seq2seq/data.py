"""Built-in generated data: numbers 0..999,999 in digits ("342,017") and in English words
("three hundred forty two thousand seventeen"), for the translator and the encoder-only model.

Tokens are whole words and single characters of one shared vocabulary (`VOCAB`): the specials,
the digits and the comma, and the 30 number words. A number is held out (never trained on) when
a hash of it falls in 1 of `HELD_OUT_EVERY` buckets, so held-out accuracy measures translation of
numbers the model has not seen; 0 never is, since it is the only number with the word "zero"
(every word of the vocabulary is trained on). Inputs are whole numbers 0..999,999, in digits
(342017, or 342,017 with every comma a thousands separator) or in the words this module writes.

Translation examples carry their direction as the first source token (as multilingual systems
tag the target language): <to_words> 3 4 2 , 0 1 7  ->  three hundred forty two thousand seventeen
<to_digits> three hundred ... -> 3 4 2 , 0 1 7. Targets end with <eos>; the decoder input starts
with <bos>.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

SPECIALS = ("<pad>", "<bos>", "<eos>", "<to_words>", "<to_digits>", "<mask>", "<cls>", "<sep>")
UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
VOCAB = SPECIALS + tuple("0123456789,") + tuple(UNITS) + tuple(TENS) + ("hundred", "thousand")
ID = {tok: i for i, tok in enumerate(VOCAB)}
PAD, BOS, EOS, TO_WORDS, TO_DIGITS, MASK, CLS, SEP = (ID[s] for s in SPECIALS)
IGNORE = -100  # a target the loss skips (autograd.cross_entropy's default ignore_index)
MAX_NUMBER = 999_999
HELD_OUT_EVERY = 20
DIRECTIONS = ("to_words", "to_digits")
INPUT_RULE = (f"a whole number 0..{MAX_NUMBER:,} in digits (342017 or 342,017) or in English words "
              "as the translator writes them (three hundred forty two thousand seventeen)")
_DIGITS = re.compile(r"\d+|\d{1,3}(,\d{3})+")


def _below_thousand(n: int) -> list[str]:
    words = []
    if n >= 100:
        words += [UNITS[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10 - 2])
        n %= 10
        if n:
            words.append(UNITS[n])
    elif n or not words:
        words.append(UNITS[n])
    return words


def number_to_words(n: int) -> list[str]:
    """0 <= n <= 999,999 -> its English words (American style, no "and"): 1017 -> one thousand seventeen."""
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"numbers must be in 0..{MAX_NUMBER:,}, got {n}")
    if n < 1000:
        return _below_thousand(n)
    words = _below_thousand(n // 1000) + ["thousand"]
    return words + (_below_thousand(n % 1000) if n % 1000 else [])


def number_to_digits(n: int) -> list[str]:
    """342017 -> ['3', '4', '2', ',', '0', '1', '7'] (thousands separated by a comma)."""
    return list(f"{n:,}")


def encode(tokens: list[str]) -> list[int]:
    try:
        return [ID[t] for t in tokens]
    except KeyError as exc:
        raise ValueError(f"unknown token {exc.args[0]!r}: the vocabulary is digits, ',' and the number words "
                         f"({' '.join(UNITS + TENS)} hundred thousand)") from None


def decode(ids) -> str:
    """Ids -> text: words joined by spaces, digits and commas run together; specials dropped."""
    out = []
    for i in ids:
        tok = VOCAB[int(i)]
        if tok in SPECIALS:
            continue
        glue = out and tok in "0123456789," and out[-1][-1] in "0123456789,"
        out[-1:] = [out[-1] + tok] if glue else out[-1:] + [tok]
    return " ".join(out)


def parse_source(text: str) -> tuple[str, list[int]]:
    """A user's input -> (direction, source ids): '342017' or '342,017' -> to_words; 'three hundred'
    (or 'Forty-two') -> to_digits. Anything else (empty, negative, '1,2,3', 'thousand', a number
    past MAX_NUMBER) is a ValueError that states INPUT_RULE."""
    s = text.strip().lower()
    if _DIGITS.fullmatch(s):
        n = int(s.replace(",", ""))
        if n > MAX_NUMBER:
            raise ValueError(f"{text!r} is past {MAX_NUMBER:,}: give {INPUT_RULE}")
        return "to_words", [TO_WORDS] + encode(number_to_digits(n))
    words = s.replace("-", " ").split()
    unknown = [w for w in words if w not in UNITS + TENS + ["hundred", "thousand"]]
    if unknown:
        raise ValueError(f"{text!r}: unknown token {unknown[0]!r}: give {INPUT_RULE}")
    if words and words_to_number(words) is not None:
        return "to_digits", [TO_DIGITS] + encode(words)
    raise ValueError(f"{text!r} is not a number the translator reads: give {INPUT_RULE}")


def words_to_number(words: list[str]) -> int | None:
    """The number whose words (number_to_words) are exactly `words`, or None."""
    total, group = 0, 0
    for w in words:
        if w == "thousand":
            total, group = group * 1000, 0
        elif w == "hundred":
            group *= 100
        else:
            group += UNITS.index(w) if w in UNITS else 20 + 10 * TENS.index(w)
    n = total + group
    return n if n <= MAX_NUMBER and number_to_words(n) == words else None


def held_out(n: np.ndarray | int) -> np.ndarray | bool:
    """Whether number n belongs to the held-out split (a fixed hash, the same on every machine)."""
    n = np.asarray(n, dtype=np.uint64)
    h = (n * np.uint64(2654435761)) % np.uint64(2 ** 32)
    return ((h >> np.uint64(7)) % np.uint64(HELD_OUT_EVERY) == 0) & (n != 0)  # 0: the only "zero"


def split_size(split: str) -> int:
    """How many numbers 0..MAX_NUMBER the split holds."""
    if split not in ("train", "held_out"):
        raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
    held = _held_out_count()
    return held if split == "held_out" else MAX_NUMBER + 1 - held


@functools.cache
def _held_out_count() -> int:
    return int(held_out(np.arange(MAX_NUMBER + 1)).sum())  # a million hashes: once


def sample_numbers(rng: np.random.Generator, count: int, split: str = "train", unique: bool = False) -> np.ndarray:
    """`count` numbers of the split: the number of digits (1..6) uniform, then the number uniform;
    `unique`: no number twice (for evaluation sets: at most ``split_size(split)``)."""
    if unique and count > split_size(split):
        raise ValueError(f"{count:,} different numbers asked of the {split} split, which holds "
                         f"{split_size(split):,}")
    out = []
    while len(out) < count:
        digits = rng.integers(1, 7, size=2 * count + 16)
        lo = np.where(digits == 1, 0, 10 ** (digits - 1))
        n = rng.integers(lo, 10 ** digits)
        keep = held_out(n) if split == "held_out" else ~held_out(n)
        out.extend(n[keep].tolist())
        if unique:
            out = list(dict.fromkeys(out))
    return np.asarray(out[:count], dtype=np.int64)


def translation_pair(n: int, direction: str) -> tuple[list[int], list[int]]:
    """(source ids with the direction tag, target ids without <bos>/<eos>) of number n."""
    digits, words = encode(number_to_digits(n)), encode(number_to_words(n))
    if direction == "to_words":
        return [TO_WORDS] + digits, words
    if direction == "to_digits":
        return [TO_DIGITS] + words, digits
    raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")


def pad_rows(rows: list[list[int]], value: int = PAD) -> np.ndarray:
    """Ragged id lists -> (B, max length) int64, right-padded with `value`."""
    out = np.full((len(rows), max(len(r) for r in rows)), value, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


@dataclass
class TranslationBatch:
    src: np.ndarray      # (B, S) int64, PAD-padded
    tgt_in: np.ndarray   # (B, T): <bos> + target, PAD-padded
    targets: np.ndarray  # (B, T): target + <eos>, IGNORE where padded


def translation_batch(rng: np.random.Generator, batch_size: int, split: str = "train") -> TranslationBatch:
    """A random batch, half of each direction on average."""
    numbers = sample_numbers(rng, batch_size, split)
    pairs = [translation_pair(int(n), DIRECTIONS[int(d)]) for n, d in zip(numbers, rng.integers(0, 2, batch_size))]
    src = pad_rows([s for s, _ in pairs])
    tgt_in = pad_rows([[BOS] + t for _, t in pairs])
    targets = pad_rows([t + [EOS] for _, t in pairs], value=IGNORE)
    return TranslationBatch(src, tgt_in, targets)


# ---- the encoder-only task -------------------------------------------------------------------
def pair_sequence(digits_of: int, words_of: int) -> list[int]:
    """<cls> digits of one number <sep> words of another (the same number for a true pair)."""
    return [CLS] + encode(number_to_digits(digits_of)) + [SEP] + encode(number_to_words(words_of))


def perturb(n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each number with one of its decimal digits changed (so its words differ in one place)."""
    out = n.copy()
    for i, v in enumerate(n):
        d = len(str(int(v)))
        pos = int(rng.integers(0, d))
        digit = (int(v) // 10 ** pos) % 10
        choices = [c for c in range(10) if c != digit and not (c == 0 and pos == d - 1 and d > 1)]
        out[i] = int(v) + (int(rng.choice(choices)) - digit) * 10 ** pos
    return out


def mlm_batch(rng: np.random.Generator, batch_size: int, split: str = "train", mask_rate: float = 0.15,
              unique: bool = False):
    """(ids (B, L) with masked tokens, targets (B, L): the original id where masked, else -100).

    True pairs only, so a masked token can be read off the other side of the <sep>. Every row
    gets at least one masked token; specials are never masked."""
    rows = [pair_sequence(int(n), int(n)) for n in sample_numbers(rng, batch_size, split, unique)]
    ids = pad_rows(rows)
    maskable = ids >= len(SPECIALS)
    chosen = maskable & (rng.random(ids.shape) < mask_rate)
    for b in np.flatnonzero(~chosen.any(axis=1)):
        chosen[b, rng.choice(np.flatnonzero(maskable[b]))] = True
    targets = np.where(chosen, ids, IGNORE)
    return np.where(chosen, MASK, ids), targets


def pair_batch(rng: np.random.Generator, batch_size: int, split: str = "train", unique: bool = False):
    """(ids (B, L), labels (B,)): label 1 when the words are the digits' number, 0 when one digit
    differs (half of the rows on average)."""
    n = sample_numbers(rng, batch_size, split, unique)
    labels = (rng.random(batch_size) < 0.5).astype(np.int64)
    other = np.where(labels == 1, n, perturb(n, rng))
    return pad_rows([pair_sequence(int(a), int(b)) for a, b in zip(n, other)]), labels
