"""Architecture variants of the gradient study: where the norm sits, which norm, residual or not.

A variant is written as dash-separated words, in any order, each word overriding one default
(pre-norm, layernorm, residual):

    pre | prenorm           norm before each sublayer, residual stream untouched (GPT-2)
    post | postnorm         norm after each residual addition (the 2017 Transformer)
    ln | layernorm          LayerNorm
    rms | rmsnorm           RMSNorm
    res | residual          x + F(x)
    nores | noresidual      F(x) alone: the residual additions removed

so "post-nores" is a post-norm LayerNorm stack without residual additions, and its canonical
name is "post-layernorm-nores".
"""
from __future__ import annotations

from dataclasses import dataclass

_WORDS = {
    "pre": ("prenorm", True), "prenorm": ("prenorm", True),
    "post": ("prenorm", False), "postnorm": ("prenorm", False),
    "ln": ("norm", "layernorm"), "layernorm": ("norm", "layernorm"),
    "rms": ("norm", "rmsnorm"), "rmsnorm": ("norm", "rmsnorm"),
    "res": ("residual", True), "residual": ("residual", True),
    "nores": ("residual", False), "noresidual": ("residual", False),
}


@dataclass(frozen=True)
class Variant:
    """One point of the architecture grid; its fields are GPTConfig's names."""

    prenorm: bool = True
    residual: bool = True
    norm: str = "layernorm"

    @property
    def name(self) -> str:
        return f"{'pre' if self.prenorm else 'post'}-{self.norm}{'' if self.residual else '-nores'}"

    def config_overrides(self) -> dict:
        """The GPTConfig fields this variant sets."""
        return {"prenorm": self.prenorm, "residual": self.residual, "norm": self.norm}

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """'post-nores' -> Variant(prenorm=False, residual=False, norm='layernorm')."""
        fields: dict = {}
        words = [w for w in text.strip().lower().replace("_", "-").split("-") if w]
        if not words:
            raise ValueError("empty variant name: expected words like 'pre', 'post-nores', 'pre-rms'")
        for word in words:
            if word not in _WORDS:
                known = ", ".join(sorted(_WORDS))
                raise ValueError(f"unknown word {word!r} in variant {text!r}; known words: {known}")
            key, value = _WORDS[word]
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
    """'2,4,8' -> [2, 4, 8]; a clear error naming `what` otherwise."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers like '2,4,8', got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} must be positive integers, got {text!r}")
    return values
