"""Architecture variants of the gradient study: where the norm sits, which norm, residual or not.

A variant is written as dash-separated words, in any order, each word overriding one default
(pre-norm, layernorm, residual):

    pre | prenorm           norm before each sublayer, residual stream untouched (GPT-2)
    post | postnorm         norm after each residual addition (the 2017 Transformer)
    ln | layernorm          LayerNorm
    rms | rmsnorm           RMSNorm
    res | residual          x + F(x)
    nores | noresidual      F(x) alone: the residual additions removed
    mha                     one key/value head per query head (GPTConfig's default)
    kvN | gqaN              grouped-query attention with N key/value heads (GPTConfig.n_kv_head)
    mqa                     multi-query attention: one key/value head (kv1)

so "post-nores" is a post-norm LayerNorm stack without residual additions, and its canonical
name is "post-layernorm-nores"; "pre-kv2" is "pre-layernorm-kv2".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_WORDS = {
    "pre": ("prenorm", True), "prenorm": ("prenorm", True),
    "post": ("prenorm", False), "postnorm": ("prenorm", False),
    "ln": ("norm", "layernorm"), "layernorm": ("norm", "layernorm"),
    "rms": ("norm", "rmsnorm"), "rmsnorm": ("norm", "rmsnorm"),
    "res": ("residual", True), "residual": ("residual", True),
    "nores": ("residual", False), "noresidual": ("residual", False),
    "mha": ("n_kv_head", None), "mqa": ("n_kv_head", 1),
}
_KV_WORD = re.compile(r"(?:kv|gqa)(\d+)")


def _word(word: str, text: str) -> tuple:
    """(field, value) of one variant word; a clear error naming the word otherwise."""
    if word in _WORDS:
        return _WORDS[word]
    kv = _KV_WORD.fullmatch(word)
    if kv and int(kv.group(1)) >= 1:
        return "n_kv_head", int(kv.group(1))
    known = ", ".join(sorted(_WORDS) + ["kvN", "gqaN"])
    raise ValueError(f"unknown word {word!r} in variant {text!r}; known words: {known}")


@dataclass(frozen=True)
class Variant:
    """One point of the architecture grid; its fields are GPTConfig's names."""

    prenorm: bool = True
    residual: bool = True
    norm: str = "layernorm"
    n_kv_head: int | None = None  # None: as many key/value heads as query heads

    @property
    def name(self) -> str:
        kv = "" if self.n_kv_head is None else f"-kv{self.n_kv_head}"
        return f"{'pre' if self.prenorm else 'post'}-{self.norm}{'' if self.residual else '-nores'}{kv}"

    def config_overrides(self) -> dict:
        """The GPTConfig fields this variant sets."""
        out = {"prenorm": self.prenorm, "residual": self.residual, "norm": self.norm}
        return out if self.n_kv_head is None else {**out, "n_kv_head": self.n_kv_head}

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """'post-nores' -> Variant(prenorm=False, residual=False, norm='layernorm')."""
        fields: dict = {}
        words = [w for w in text.strip().lower().replace("_", "-").split("-") if w]
        if not words:
            raise ValueError("empty variant name: expected words like 'pre', 'post-nores', 'pre-rms'")
        for word in words:
            key, value = _word(word, text)
            if key in fields and fields[key] != value:
                raise ValueError(f"variant {text!r} sets {key} twice with different values")
            fields[key] = value
        return cls(**fields)


DEFAULT_VARIANTS = ("pre", "post", "pre-nores", "post-nores")


def parse_variants(text: str) -> list[Variant]:
    """A comma-separated list of variants, duplicates dropped, order kept."""
    out: list[Variant] = []
    for part in text.split(","):
        if part.strip():
            v = Variant.parse(part)
            if v not in out:
                out.append(v)
    if not out:
        raise ValueError(f"--variants {text!r} names no variant")
    return out


def parse_int_list(text: str, what: str) -> list[int]:
    """'2,4,8' -> [2, 4, 8], duplicates dropped, order kept (as parse_variants); a clear error
    naming `what` otherwise."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers like '2,4,8', got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} must be positive integers, got {text!r}")
    return list(dict.fromkeys(values))  # a repeated depth would count as another seed
