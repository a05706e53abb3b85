"""What one pretrained family is: the record each module of this package fills in.

A `Family` says everything the readers and writers need to know about one transformers class:
its names (HF class, model_type), how its config.json maps to GPTConfig both ways, which
GPTConfig shapes it computes exactly, how its tensors map to our parameters (a `Recipe` per
parameter), how llama.cpp names them (a `GGUFLayout`), and what its end-of-text token is called.
The machinery in gpt.pretrained (hf_config, hf_weights, gguf, folder) only reads these records.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from gpt.model.config import GPTConfig


# The block wiring of every family so far; a family with another (qk_norm, say) overrides it.
DECODER = dict(prenorm=True, residual=True, qk_norm=False)


class UnsupportedModel(ValueError):
    """A checkpoint whose architecture or settings this GPT cannot reproduce exactly."""


class Recipe(NamedTuple):
    """How one of our parameters is made from Hugging Face tensors.

    kind: "same" copies, "T" transposes ((out, in) <-> our (in, out)), "rows" takes the first
    block_size rows, "catT" concatenates the transposes along our output axis (axis 1), "cat"
    concatenates 1-D biases; `sizes` are the widths of the concatenated pieces (for writing back).
    """

    names: tuple[str, ...]
    kind: str
    sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class GGUFLayout:
    """llama.cpp's architecture name and tensor names for a family's Hugging Face tensors.

    blocks maps a per-layer HF sublayer name (after `layer_prefix` and the layer index, before
    `.weight`/`.bias`) to llama.cpp's; globals maps the other HF names. conv1d_blocks: the block
    matrices are stored (in, out) (GPT-2's Conv1D) and are transposed to llama.cpp's (out, in).
    rope_rows (q sublayer, k sublayer): rows permuted per head from the half-split RoPE layout
    to the interleaved pairs llama.cpp's `llama` rotates. biases: False refuses bias=True."""

    arch: str
    layer_prefix: str
    blocks: dict[str, str]
    globals: dict[str, str]
    conv1d_blocks: bool = False
    rope_rows: tuple[str, str] | tuple[()] = ()
    biases: bool = True


@dataclass(frozen=True)
class Family:
    """One pretrained family (see the module docstring).

    shape: GPTConfig fields the family fixes (pos, norm, mlp, prenorm, ...); `fits(cfg)` then
    says why a config of that shape still cannot be written (None: it can). read(hf, where)
    returns GPTConfig's fields from config.json; write(cfg) the family's own config.json fields.
    weights(cfg): our parameter name -> Recipe. schema: the types of the config.json fields
    `read` looks at (gpt.pretrained.families.fields), checked before it runs; keys: the
    config.json name of each GPTConfig size field (for errors that name the field).
    canonical(tensors): the names a file may spell otherwise, renamed to the ones `weights`
    uses. window_by_default: `sliding_window` applies unless `use_sliding_window` is false
    (Mistral, Phi-3)."""

    name: str
    hf_class: str
    model_type: str
    shape: dict[str, Any]
    fits: Callable[[GPTConfig], str | None]
    read: Callable[[dict, str], dict]
    write: Callable[[GPTConfig], dict]
    weights: Callable[[GPTConfig], dict[str, Recipe]]
    eot_names: tuple[str, ...]
    schema: dict
    keys: dict[str, str]
    gguf: GGUFLayout | None = None
    canonical: Callable[[dict], dict] | None = None
    window_by_default: bool = False

    def eot_id(self, tokenizer) -> int | None:
        """The id of `tokenizer`'s end-of-text token, found by this family's names, or None."""
        specials = getattr(tokenizer, "special_tokens", None) or {}
        return next((specials[n] for n in self.eot_names if n in specials), None)


def need(hf: dict, key: str, where: str) -> Any:
    """config.json's `key`, or UnsupportedModel naming it."""
    if key not in hf:
        raise UnsupportedModel(f"{where}: field {key!r} is missing")
    return hf[key]


def only(hf: dict, key: str, allowed: tuple, where: str, why: str) -> None:
    """Refuse a field whose value is not one of `allowed` (a missing field counts as allowed[0])."""
    value = hf.get(key, allowed[0])
    if value not in allowed:
        raise UnsupportedModel(f"{where}: field {key!r} is {value!r}, which is not implemented ({why}); "
                               f"supported: {', '.join(map(repr, allowed))}")
