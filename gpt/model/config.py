"""GPTConfig: every shape and variant of the model, its presets, and its exact parameter count.

The count is a formula over the config (`count_params`), so the 1.5B GPT-2 XL or the
LLaMA-7B shape can be counted without allocating a single weight; the tests check the
formula against `GPT(cfg).num_params()` for every variant on small shapes.

Variant semantics (what the model builds for each field):
- pos: "learned" (a table `transformer.wpe`, GPT-2), "sinusoidal" (the fixed 2017 table, no
  parameters), "rope" (rotary embedding of q and k inside attention, no parameters).
- norm: "layernorm" (gain, and a bias when `bias`), "rmsnorm" (gain only, LLaMA).
- mlp: "gelu" (c_fc d -> hidden -> c_proj, GPT-2), "relu2" (the same with relu(x)**2, the
  modded-nanoGPT speedrun's), "swiglu" (gate and up fused in c_fc),
  "moe" (`n_experts` GELU MLPs and a router picking `moe_top_k` per token; the router's
  load-balancing loss is added to the training loss times `moe_aux_coef`), "none" (no
  feed-forward sublayer and no ln_2: an attention-only model, as in the induction-head study).
- n_kv_head: heads of keys and values (grouped-query attention, Ainslie et al. 2023); each
  group of n_head / n_kv_head query heads shares one. None means n_head (multi-head), 1 is
  multi-query. c_attn then maps C -> C + 2 x n_kv_head x head_dim, and the KV cache holds
  n_kv_head heads.
- qkv_bias: a bias on c_attn alone (the fused q, k, v projection); None follows `bias`. Qwen2
  has qkv_bias=True with bias=False (no other linear layer has one).
- qk_norm: q and k RMS-normalised per head (a learned gain of head_dim each,
  `.attn.q_norm`, `.attn.k_norm`) before RoPE and the scores.
- prenorm=True: x = x + f(ln(x)) per sublayer and a final `transformer.ln_f` (GPT-2).
  prenorm=False: the 2017 post-norm x = ln(x + f(x)); the stream leaving the last block is
  already normalised, so there is no `ln_f` (as in the 2017 Transformer and BERT).
- residual=False drops the skip connection: x = f(ln(x)) (pre-norm) or x = ln(f(x)) (post-norm),
  which is what the gradient-flow study compares against.
- mlp_hidden=None means 4 * n_embd for "gelu" and "moe" (per expert), and for "swiglu"
  8 * n_embd / 3 rounded up to a multiple of 64 (the same parameter count as the GELU MLP;
  LLaMA rounds to 256, so the llama-7b preset gives its 11008 explicitly).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any

from autograd.ops.norm import LAYER_NORM_EPS
from nn.mlp import swiglu_hidden

POS_CHOICES = ("learned", "sinusoidal", "rope")
NORM_CHOICES = ("layernorm", "rmsnorm")
MLP_CHOICES = ("gelu", "swiglu", "moe", "relu2", "none")
_REQUIRED = ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")


def _setting(default: Any = dataclasses.MISSING, help: str = "", choices: tuple | None = None) -> Any:
    """A field that carries its help text and choice list, so the CLI and the training settings
    read them from here instead of restating them."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class Setting:
    """One GPTConfig field as a command line or a config file sees it."""

    name: str
    type: type          # int, float, str or bool (None allowed where the default is None)
    default: Any        # dataclasses.MISSING for the required shape fields
    help: str
    choices: tuple | None


@functools.lru_cache(maxsize=None)
def settings() -> tuple[Setting, ...]:
    """Every GPTConfig field, in declaration order, with its type, default, help and choices."""
    hints = typing.get_type_hints(GPTConfig)
    out = []
    for f in dataclasses.fields(GPTConfig):
        typ = hints[f.name]
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        out.append(Setting(f.name, args[0] if args else typ, f.default, f.metadata["help"],
                           f.metadata["choices"]))
    return tuple(out)


@dataclass
class GPTConfig:
    """The model's shape and variant. All fields are plain numbers/strings (JSON-friendly)."""

    vocab_size: int = _setting(help="vocabulary size V")
    block_size: int = _setting(help="context length T")
    n_layer: int = _setting(help="transformer blocks")
    n_head: int = _setting(help="attention heads")
    n_embd: int = _setting(help="embedding width C")
    n_kv_head: int | None = _setting(None, "key/value heads (grouped-query attention; default n_head)")
    dropout: float = _setting(0.0, "dropout probability")
    bias: bool = _setting(True, "biases in linear layers and norms")
    qkv_bias: bool | None = _setting(None, "a bias on the q, k, v projection (default: bias; Qwen2: on with bias off)")
    tie_weights: bool = _setting(True, "share the token embedding with the output layer")
    pos: str = _setting("learned", "positions", POS_CHOICES)
    norm: str = _setting("layernorm", "normalisation", NORM_CHOICES)
    mlp: str = _setting("gelu", "feed-forward kind", MLP_CHOICES)
    mlp_hidden: int | None = _setting(None, "feed-forward width (default 4 x n_embd; SwiGLU: 8/3 x n_embd)")
    n_experts: int = _setting(4, "experts of the MoE feed-forward")
    moe_top_k: int = _setting(2, "experts per token of the MoE feed-forward")
    moe_aux_coef: float = _setting(0.01, "weight of the MoE load-balancing loss")
    qk_norm: bool = _setting(False, "RMS-normalise q and k per head before the scores")
    prenorm: bool = _setting(True, "pre-norm blocks (GPT-2); off: the 2017 post-norm")
    residual: bool = _setting(True, "residual connections (off only for gradient studies)")
    norm_eps: float = _setting(LAYER_NORM_EPS, "epsilon of the norms")
    rope_base: float = _setting(10000.0, "base of the rotary frequencies")
    init_std: float = _setting(0.02, "standard deviation of the initial weights")

    def __post_init__(self) -> None:
        self._validate()

    # ---- validation --------------------------------------------------------------------
    def _validate(self) -> None:
        problems = []
        for name in _REQUIRED:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"{name} must be a positive int, got {value!r}")
        for s in settings():
            value = getattr(self, s.name)
            if s.choices and value not in s.choices:
                problems.append(f"{s.name} must be one of {', '.join(map(repr, s.choices))}, got {value!r}")
            if s.type is bool and not isinstance(value, bool) and not (value is None and s.default is None):
                problems.append(f"{s.name} must be True or False, got {value!r}")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.mlp_hidden is not None and (
            isinstance(self.mlp_hidden, bool) or not isinstance(self.mlp_hidden, int) or self.mlp_hidden <= 0
        ):
            problems.append(f"mlp_hidden must be a positive int or None, got {self.mlp_hidden!r}")
        if isinstance(self.n_embd, int) and isinstance(self.n_head, int) and self.n_head > 0:
            if self.n_embd % self.n_head:
                problems.append(
                    f"n_embd={self.n_embd} must be divisible by n_head={self.n_head} "
                    "(each head gets n_embd // n_head channels)"
                )
            elif self.n_kv_head is not None and (isinstance(self.n_kv_head, bool) or not isinstance(self.n_kv_head, int)
                                                 or self.n_kv_head < 1 or self.n_head % self.n_kv_head):
                problems.append(f"n_kv_head must be None or a positive divisor of n_head={self.n_head}, "
                                f"got {self.n_kv_head!r}")
            elif self.pos == "rope" and (self.n_embd // self.n_head) % 2:
                problems.append(
                    f"pos='rope' needs an even head size, got n_embd // n_head = {self.n_embd // self.n_head}"
                )
        if self.mlp == "moe":
            if not isinstance(self.n_experts, int) or self.n_experts < 1:
                problems.append(f"n_experts must be a positive int, got {self.n_experts!r}")
            elif not isinstance(self.moe_top_k, int) or not 1 <= self.moe_top_k <= self.n_experts:
                problems.append(f"moe_top_k must be in [1, n_experts={self.n_experts}], got {self.moe_top_k!r}")
        for name in ("norm_eps", "rope_base", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                problems.append(f"{name} must be a positive finite number, got {value!r}")
        if isinstance(self.moe_aux_coef, bool) or not isinstance(self.moe_aux_coef, (int, float)) \
                or not 0 <= self.moe_aux_coef < math.inf:
            problems.append(f"moe_aux_coef must be a finite number >= 0, got {self.moe_aux_coef!r}")
        if problems:
            raise ValueError("invalid GPTConfig: " + "; ".join(problems))

    # ---- derived shapes ----------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values: n_kv_head, or n_head when it is None."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def has_qkv_bias(self) -> bool:
        """Whether c_attn has a bias: qkv_bias, or bias when it is None."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def hidden(self) -> int:
        """The MLP's hidden width (per expert for "moe")."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.mlp == "swiglu":
            return swiglu_hidden(self.n_embd, multiple_of=64)
        return 4 * self.n_embd

    @property
    def has_ln_f(self) -> bool:
        """Pre-norm models end with a final norm; post-norm ones already end normalised."""
        return self.prenorm

    # ---- parameter count by formula ----------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of one norm layer: a gain, plus a bias for LayerNorm with bias=True."""
        if self.norm == "layernorm" and self.bias:
            return 2 * self.n_embd
        return self.n_embd

    def attn_params(self) -> int:
        """One attention sublayer: fused q, k, v projection (C -> C + 2 x kv_heads x head_dim),
        output projection, and the q and k gains of qk_norm."""
        C, b, bq = self.n_embd, int(self.bias), int(self.has_qkv_bias)
        qkv = C + 2 * self.kv_heads * self.head_dim
        return C * qkv + bq * qkv + C * C + b * C + 2 * self.head_dim * int(self.qk_norm)

    def mlp_params(self) -> int:
        """One feed-forward sublayer (all experts and the router for "moe")."""
        C, H, b = self.n_embd, self.hidden, int(self.bias)
        if self.mlp == "none":
            return 0
        if self.mlp == "swiglu":
            return C * 2 * H + b * 2 * H + H * C + b * C
        gelu = C * H + b * H + H * C + b * C
        if self.mlp == "moe":
            return self.n_experts * gelu + C * self.n_experts  # router C -> n_experts, no bias
        return gelu

    def breakdown(self) -> dict[str, int]:
        """Parameter counts by group: embeddings, attention, mlp, norms, output (lm_head).

        "output" is 0 when the lm_head is tied to the token embedding (counted once, there).
        """
        C, V, L = self.n_embd, self.vocab_size, self.n_layer
        return {
            "embeddings": V * C + (self.block_size * C if self.pos == "learned" else 0),
            "attention": L * self.attn_params(),
            "mlp": L * self.mlp_params(),
            "norms": ((1 + int(self.mlp != "none")) * L + int(self.has_ln_f)) * self.norm_params(),
            "output": 0 if self.tie_weights else V * C,
        }

    def count_params(self) -> int:
        """The exact number of parameters `GPT(self)` allocates (tied weights counted once)."""
        return sum(self.breakdown().values())

    def kv_cache_numbers_per_token(self) -> int:
        """Numbers of KV cache one token occupies: keys and values of kv_heads x head_dim
        (n_embd without grouped-query attention) per layer."""
        return 2 * self.n_layer * self.kv_heads * self.head_dim

    def kv_cache_bytes_per_token(self, dtype: Any = "float32") -> int:
        import numpy as np

        return self.kv_cache_numbers_per_token() * np.dtype(dtype).itemsize

    # ---- (de)serialisation ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GPTConfig":
        """Build a config from a dict such as `to_dict()` wrote; unknown or missing keys are errors."""
        if not isinstance(d, dict):
            raise TypeError(f"GPTConfig.from_dict expects a dict, got {type(d).__name__}")
        check_keys_known(cls, d)
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"GPTConfig is missing required key(s): {', '.join(missing)}")
        return cls(**d)

    def replace(self, **changes: Any) -> "GPTConfig":
        """A copy with some fields changed (validated like a new config)."""
        return GPTConfig.from_dict({**self.to_dict(), **changes})

    # ---- presets ----------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "GPTConfig":
        """A named configuration (see `PRESETS`), with any field overridden by keyword."""
        if name not in PRESETS:
            raise ValueError(f"unknown GPT preset {name!r}; available: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})


def check_keys_known(cls, d: dict[str, Any]) -> None:
    """Refuse the keys of `d` that are not fields of the dataclass `cls`, each with a hint."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        hints = ", ".join(f"{key!r}{did_you_mean(key, known)}" for key in unknown)
        raise ValueError(f"unknown {cls.__name__} key(s): {hints}; known keys: {', '.join(sorted(known))}")


class DictConfig:
    """to_dict / from_dict for a settings dataclass whose fields need no checks beyond its own."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        check_keys_known(cls, d)
        return cls(**d)


def did_you_mean(key: str, options) -> str:
    """' (did you mean 'x'?)' for the option closest to a mistyped `key`, or ''."""
    import difflib

    match = difflib.get_close_matches(key, sorted(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


_GPT2 = dict(vocab_size=50257, block_size=1024, bias=True, tie_weights=True)

# Shapes of the published models, plus small configurations for CPU work.
PRESETS: dict[str, dict[str, Any]] = {
    "gpt2": dict(_GPT2, n_layer=12, n_head=12, n_embd=768),           # 124,439,808 parameters
    "gpt2-medium": dict(_GPT2, n_layer=24, n_head=16, n_embd=1024),   # 354,823,168
    "gpt2-large": dict(_GPT2, n_layer=36, n_head=20, n_embd=1280),    # 774,030,080
    "gpt2-xl": dict(_GPT2, n_layer=48, n_head=25, n_embd=1600),       # 1,557,611,200
    "llama-7b": dict(                                                 # 6,738,415,616
        vocab_size=32000, block_size=2048, n_layer=32, n_head=32, n_embd=4096,
        pos="rope", norm="rmsnorm", mlp="swiglu", mlp_hidden=11008, bias=False,
        tie_weights=False, norm_eps=1e-6,
    ),
    # A few seconds per hundred steps on a laptop CPU: tests, smoke runs.
    "tiny": dict(vocab_size=256, block_size=64, n_layer=2, n_head=2, n_embd=64),
    # nanoGPT's CPU configuration for Tiny Shakespeare (bias=False as its train.py default).
    "small": dict(vocab_size=4096, block_size=64, n_layer=4, n_head=4, n_embd=128, bias=False),
    # nanoGPT's shakespeare-char shape: 6 layers, 6 heads, d=384, T=256 (~10M parameters + embeddings).
    "6x384": dict(vocab_size=4096, block_size=256, n_layer=6, n_head=6, n_embd=384, bias=False),
}
