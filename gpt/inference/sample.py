"""Sampling strategies on logits arrays: what picks the next token, and when to stop.

Everything here works on host NumPy arrays of the last position's logits, shape (B, V), so it
is independent of the model and of the device the model ran on (the generation loop copies the
(B, V) row block to the host once per step). Filters return new float64 arrays in which the
tokens they remove hold -inf; probabilities are computed in float64 so that top-p's cumulative
mass is exact to ~1e-15.

Order of application (the same as Hugging Face's and llama.cpp's defaults):
    repetition penalty -> temperature -> top-k -> top-p -> sample
Temperature 0 means greedy: the argmax of the penalised logits (top-k / top-p do not change it).
Ties are broken towards the lowest token id everywhere (argmax, top-k), so top-k=1 is greedy.
`SamplingConfig` holds these options as one value, checked once when it is made.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from gpt.model.config import Setting

NEG_INF = -np.inf


def _as_logits2d(logits: Any) -> np.ndarray:
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"expected logits of shape (B, V) or (V,), got {arr.shape}")
    return arr


def whole_number(value, name: str, least: int) -> int:
    """`value` as an int, refused by `name` unless it is a whole number >= least (5.0 is 5: a
    count read from a config file)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or int(value) != value or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


# ---- logit processors ----------------------------------------------------------------------
def apply_repetition_penalty(logits: np.ndarray, context: Sequence[Sequence[int]] | np.ndarray,
                             penalty: float) -> np.ndarray:
    """CTRL's repetition penalty: every token already present in a row's context has its logit
    divided by `penalty` when positive and multiplied by it when negative (so it always becomes
    less likely for penalty > 1).

    logits: (B, V) float; context: B sequences of token ids (ragged allowed; ids < 0 are padding
    and ignored). Returns a new (B, V) float64 array, where a row whose penalised logits overflow
    to +inf keeps only those (``infinite_wins``).
    """
    if penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
    out = _as_logits2d(logits).copy()
    if penalty == 1.0:
        return out
    if len(context) != out.shape[0]:
        raise ValueError(f"repetition penalty: {len(context)} context rows for {out.shape[0]} logit rows")
    for b, ctx in enumerate(context):
        ids = np.unique(np.asarray(ctx, dtype=np.int64))
        ids = ids[(ids >= 0) & (ids < out.shape[1])]
        vals = out[b, ids]
        with np.errstate(over="ignore"):  # past float64's range: +-inf, which infinite_wins resolves
            out[b, ids] = np.where(vals > 0, vals / penalty, vals * penalty)
    return infinite_wins(out)


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """(logits - the row's max) / temperature as float64 (B, V); temperature must be > 0 (0 is
    greedy, handled by the caller). The shift changes no probability and keeps the max at 0: a
    temperature near 0 then sends the others to -inf (the greedy limit), never the max to +inf."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 here (0 means greedy), got {temperature}")
    x = _as_logits2d(logits)
    m = x.max(axis=1, keepdims=True)
    with np.errstate(over="ignore"):  # overflow to -inf is the limit wanted
        return (x - np.where(np.isfinite(m), m, 0.0)) / float(temperature)


def infinite_wins(logits: np.ndarray) -> np.ndarray:
    """Rows holding +inf (a logit past float64's range, after a penalty) keep only those entries,
    as equals, the rest -inf: the limit of their distribution, where inf - inf would make every
    probability NaN. Other rows are returned as they are."""
    inf = np.isposinf(logits)
    rows = inf.any(axis=1)
    if not rows.any():
        return logits
    out = logits.copy()
    out[rows] = np.where(inf[rows], 0.0, NEG_INF)
    return out


def top_k_filter(logits: np.ndarray, k: int | None) -> np.ndarray:
    """Keep exactly the k largest logits of each row (ties -> lower id first), the rest -inf.

    logits: (B, V). k=None or k >= V keeps everything.
    """
    out = _as_logits2d(logits).copy()
    if k is None or k >= out.shape[1]:
        return out
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    # Ranked as a stable sort on -logits would (equal logits by id, np.argmax's first-max rule),
    # without the O(V log V) sort of every step: the k-th largest value by partition, every
    # logit above it, then of those equal to it the lowest ids up to k in all.
    kth = -np.partition(-out, k - 1, axis=1)[:, k - 1:k]               # (B, 1)
    if np.isnan(kth).any():   # fewer than k numbers in a row: the sort's order, NaNs last by id
        order = np.argsort(-out, axis=1, kind="stable")
        np.put_along_axis(out, order[:, k:], NEG_INF, axis=1)
        return out
    above, at = out > kth, out == kth
    room = k - above.sum(axis=1, keepdims=True)                          # ties to keep, >= 1
    keep = above | (at & (np.cumsum(at, axis=1) <= room))
    out[~keep] = NEG_INF
    return out


def top_p_filter(logits: np.ndarray, p: float | None, tol: float = 1e-9) -> np.ndarray:
    """Nucleus filtering: keep the smallest set of most-likely tokens whose probability mass
    reaches p; the rest become -inf.

    A token is kept iff the mass of the tokens ranked strictly above it is below p (minus `tol`,
    so that a mass that reaches p up to rounding counts as reaching it). The top token is always
    kept. logits: (B, V); p=None or p >= 1 keeps everything.
    """
    out = _as_logits2d(logits).copy()
    if p is None or p >= 1.0:
        return out
    if p <= 0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    probs = softmax(out)
    order = np.argsort(-probs, axis=1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=1)
    mass_before = np.cumsum(sorted_p, axis=1) - sorted_p
    drop_sorted = mass_before >= p - tol
    drop_sorted[:, 0] = False
    drop = np.zeros_like(drop_sorted)
    np.put_along_axis(drop, order, drop_sorted, axis=1)
    out[drop] = NEG_INF
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row softmax in float64; rows of (B, V). -inf entries get probability 0."""
    x = _as_logits2d(logits)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row log-softmax in float64; rows of (B, V)."""
    x = _as_logits2d(logits)
    m = x.max(axis=1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def check_finite(logits: np.ndarray, what: str = "logits") -> None:
    """Refuse NaN or +inf (a model whose weights hold them): every pick from them would be
    token 0 or an arbitrary one, silently. -inf stays allowed (a filtered-out token)."""
    if not (np.asarray(logits) < np.inf).all():
        raise ValueError(f"the model produced {what} that are NaN or +inf: its weights (or a "
                         "checkpoint's) hold non-finite numbers")


def greedy(logits: np.ndarray) -> np.ndarray:
    """argmax per row (first maximum on ties) -> (B,) int64. Works on the logits' own dtype:
    widening float32 to float64 is exact, so the argmax is the same without the copy."""
    arr = np.asarray(logits)
    if arr.ndim not in (1, 2):
        raise ValueError(f"expected logits of shape (B, V) or (V,), got {arr.shape}")
    return np.argmax(arr.reshape(-1, arr.shape[-1]), axis=1).astype(np.int64)


def sample_from_logits(logits: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """Draw one token per row from softmax(logits) by inverse CDF with one uniform per row.

    One draw of `generator.random(B)` per call, so a seeded generator gives the same tokens on
    every machine and backend. Tokens with -inf logits are never chosen. -> (B,) int64.
    """
    probs = softmax(logits)
    cdf = np.cumsum(probs, axis=1)
    u = generator.random(probs.shape[0]) * cdf[:, -1]
    # first index whose cdf exceeds u: zero-probability tokens repeat the previous cdf value
    # and so can never be the first to exceed it
    idx = (cdf <= u[:, None]).sum(axis=1)
    return np.minimum(idx, probs.shape[1] - 1).astype(np.int64)


def _option(off: Any, help: str) -> Any:
    """A field whose default leaves the logits as they are, with the help text the commands show."""
    return field(default=off, metadata={"help": help})


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen from the logits; checked once, when it is made.

    temperature: 0 = greedy (the argmax of the penalised logits; top-k / top-p do not change
    it), else logits / temperature. top_k: None or an integer >= 1. top_p: None or in (0, 1].
    repetition_penalty: > 0, 1.0 = off (CTRL's, applied to every token of the context).
    Each default is "off": SamplingConfig() samples from the model's own distribution.
    """

    temperature: float = _option(1.0, "sampling temperature; 0 = greedy")
    top_k: int | None = _option(None, "keep the TOP_K most likely tokens; 0 = off")
    top_p: float | None = _option(None, "keep the smallest set of tokens whose probability reaches TOP_P; 0 = off")
    repetition_penalty: float = _option(1.0, "CTRL's penalty on tokens already in the context; 1.0 = off")

    def __post_init__(self) -> None:
        t, k, p, r = self.temperature, self.top_k, self.top_p, self.repetition_penalty
        if t is None or not np.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t}")
        if k is not None:  # 2.0 from a config file becomes 2: np.partition needs an int
            object.__setattr__(self, "top_k", whole_number(k, "top_k", 1))
        if p is not None and not (0 < p <= 1):
            raise ValueError(f"top_p must be None or in (0, 1], got {p}")
        if r is None or not (0 < r < np.inf):
            raise ValueError(f"repetition_penalty must be a finite number > 0 (1.0 = off), got {r}")

    @classmethod
    def of(cls, sampling: "SamplingConfig | None" = None, **options: Any) -> "SamplingConfig":
        """`sampling` itself, or a config from keyword options (temperature=..., top_k=...);
        giving both, or an option that is not a field, is an error."""
        if sampling is not None:
            if options:
                raise TypeError(f"give either sampling= or {', '.join(sorted(options))}, not both")
            if not isinstance(sampling, cls):
                raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
            return sampling
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown sampling option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**options)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def needs_context(self) -> bool:
        """Whether next_token needs the context ids (for the repetition penalty)."""
        return self.repetition_penalty != 1.0

    def process(self, logits: np.ndarray, context=None) -> np.ndarray:
        """Repetition penalty, temperature, top-k and top-p in that order -> (B, V) float64.
        With temperature 0 only the repetition penalty is applied."""
        out = _as_logits2d(logits)
        if self.needs_context:
            if context is None:
                raise ValueError("repetition_penalty needs the context token ids")
            out = apply_repetition_penalty(out, context, self.repetition_penalty)
        if self.greedy:
            return out
        out = apply_temperature(out, self.temperature)
        out = top_k_filter(out, self.top_k)
        return top_p_filter(out, self.top_p)

    def next_token(self, logits: np.ndarray, generator: np.random.Generator | None,
                   context=None) -> np.ndarray:
        """The next token of each row: greedy when temperature == 0, else a sample.
        logits: (B, V) (any float dtype); context: B id sequences for the repetition penalty.
        -> (B,) int64."""
        check_finite(logits)
        if self.greedy:
            return greedy(self.process(logits, context) if self.needs_context else logits)
        if generator is None:
            raise ValueError("sampling with temperature > 0 needs a numpy Generator")
        return sample_from_logits(self.process(logits, context), generator)


# What `gpt sample` and a training run's closing samples use unless told otherwise.
TEXT_SAMPLING = SamplingConfig(temperature=0.8, top_k=50)


def options() -> tuple[Setting, ...]:
    """SamplingConfig's fields as command-line options, with TEXT_SAMPLING's values as defaults."""
    hints = typing.get_type_hints(SamplingConfig)
    out = []
    for f in fields(SamplingConfig):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        typ = args[0] if args else hints[f.name]
        out.append(Setting(f.name, typ, getattr(TEXT_SAMPLING, f.name), f.metadata["help"], None))
    return tuple(out)


def from_options(values: dict) -> SamplingConfig:
    """A SamplingConfig from command-line values, where 0 turns off an option whose off value is None."""
    off = {f.name: f.default for f in fields(SamplingConfig)}
    return SamplingConfig(**{k: (None if off[k] is None and v == 0 else v) for k, v in values.items()})


def make_generator(seed: int | None) -> np.random.Generator:
    """A numpy Generator: reproducible for an int seed (>= 0), fresh OS entropy for None."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be None or an int >= 0, got {seed!r}")
    return np.random.default_rng(seed)


# ---- stopping ------------------------------------------------------------------------------
def split_stop(stop: int | str | Iterable[int | str] | None) -> tuple[frozenset, tuple]:
    """Normalise a `stop` argument into (stop token ids, stop strings)."""
    if stop is None:
        return frozenset(), ()
    if isinstance(stop, (int, np.integer, str)):
        stop = [stop]
    ids, strings = set(), []
    for s in stop:
        if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            ids.add(int(s))
        elif isinstance(s, str):
            if s == "":
                raise ValueError("stop strings must not be empty")
            strings.append(s)
        else:
            raise TypeError(f"stop entries must be token ids (int) or strings, got {s!r}")
    return frozenset(ids), tuple(strings)


@dataclass
class StopState:
    """Stop tracking for one row of generation.

    Stop ids end generation on the token itself. Stop strings are matched on the decoded text
    of the generated tokens only (never the prompt), so a string that spans several tokens is
    found on the token that completes it, and a token whose text merely begins a stop string
    does not end anything. `text_end` is where the row's visible text ends: the start of the
    stop string, or None while running / when a stop id ended it.
    """

    ids: frozenset
    strings: tuple
    decode: Callable[[list], str] | None
    tokens: list = field(default_factory=list)
    done: bool = False
    text_end: int | None = None
    _text: str = ""

    def push(self, token: int) -> bool:
        """Record one generated token; return True when the row has just stopped."""
        if self.done:
            return True
        self.tokens.append(int(token))
        if token in self.ids:
            self.done = True
            return True
        if self.strings:
            before = len(self._text)
            self._text = self.decode(self.tokens)
            # search only where a new match can be: the tail that overlaps the new text
            longest = max(len(s) for s in self.strings)
            start = max(0, min(before, len(self._text)) - longest - 3)  # -3: a completed UTF-8 char
            hits = [i for i in (self._text.find(s, start) for s in self.strings) if i >= 0]
            if hits:
                self.done = True
                self.text_end = min(hits)
                return True
        return False

    @property
    def text(self) -> str:
        """The decoded generated text, cut before the stop string when one matched."""
        if self.decode is None:
            raise ValueError("text needs a tokenizer")
        text = self._text if self.strings else self.decode(self.tokens)
        return text if self.text_end is None else text[: self.text_end]

    @property
    def visible_text(self) -> str:
        """What a user is shown: `text`, without the stop id that ended the row."""
        if self.done and self.text_end is None and self.tokens and self.tokens[-1] in self.ids:
            return self.decode(self.tokens[:-1])
        return self.text


def make_stop_state(stop, tokenizer=None) -> StopState:
    """A StopState for `stop` (ids and/or strings); strings need a tokenizer with .decode."""
    ids, strings = split_stop(stop)
    if strings and tokenizer is None:
        raise ValueError(f"stop strings {list(strings)} need a tokenizer= to decode generated text")
    decode = tokenizer.decode if tokenizer is not None else None
    return StopState(ids, strings, decode)


def holdback(text: str, strings: Sequence[str]) -> int:
    """How many characters at the end of `text` may still become the start of a stop string
    (or are an incomplete UTF-8 character shown as U+FFFD); a streamer must not print them yet."""
    n = 0
    for s in strings:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                n = max(n, k)
                break
    if text.endswith("\ufffd"):
        n = max(n, 1)
    return n
