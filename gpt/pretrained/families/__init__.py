"""The pretrained families, one record each (see family.py for what a record holds).

    gpt2      GPT2LMHeadModel      learned positions, LayerNorm, GELU, biases     GGUF gpt2
    llama     LlamaForCausalLM     RoPE, RMSNorm, SwiGLU, biases on all or none    GGUF llama
    qwen2     Qwen2ForCausalLM     LLaMA's, with biases on q, k, v alone           GGUF qwen2
    mistral   MistralForCausalLM   LLaMA's without biases                          GGUF llama
    phi3      Phi3ForCausalLM      LLaMA's without biases, qkv and gate_up fused   GGUF phi3

Adding a family: a module here that builds its `Family` (with the types of the config.json fields
its reader reads, a schema of gpt.pretrained.families.fields), listed in FAMILIES (plus whatever
model features it needs in gpt.model). Exporting picks the first family in FAMILIES that computes the
config exactly, unless one is named.
"""
from __future__ import annotations

from gpt.model.config import GPTConfig
from gpt.pretrained.families.family import Family, UnsupportedModel
from gpt.pretrained.families.gpt2 import GPT2
from gpt.pretrained.families.llama import LLAMA, MISTRAL, QWEN2
from gpt.pretrained.families.phi3 import PHI3

FAMILIES: tuple[Family, ...] = (GPT2, LLAMA, QWEN2, MISTRAL, PHI3)

__all__ = ["FAMILIES", "Family", "UnsupportedModel", "named", "by_hf_class", "by_model_type", "export_family"]

# A note for the settings whose name alone does not say what they are.
_NOTES = {"prenorm": " (post-norm)"}


def named(name: str) -> Family:
    """The family called `name` ("gpt2", "llama", ...) or its HF class name."""
    for f in FAMILIES:
        if name in (f.name, f.hf_class):
            return f
    raise ValueError(f"unknown pretrained family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")


def by_hf_class(name: str) -> Family | None:
    return next((f for f in FAMILIES if f.hf_class == name), None)


def by_model_type(model_type) -> Family | None:
    return next((f for f in FAMILIES if f.model_type == model_type), None)


def _unexpressed(cfg: GPTConfig, families: tuple[Family, ...]) -> list[str]:
    """The settings of `cfg` whose value no family in `families` has."""
    keys = dict.fromkeys(k for f in families for k in f.shape)
    return [f"{k}={getattr(cfg, k)!r}{_NOTES.get(k, '')}" for k in keys
            if all(f.shape.get(k, getattr(cfg, k)) != getattr(cfg, k) for f in families)]


def export_family(cfg: GPTConfig, name: str | None = None) -> Family:
    """The family that computes exactly what `cfg` does (the first of FAMILIES, or the one named),
    or UnsupportedModel naming the settings that none of them can express."""
    families = FAMILIES if name is None else (named(name),)
    problems = _unexpressed(cfg, families)
    if not problems:
        shaped = [f for f in families if all(getattr(cfg, k) == v for k, v in f.shape.items())]
        for f in shaped:
            why = f.fits(cfg)
            if why is None:
                return f
            problems.append(f"{f.hf_class}: {why}")
        if not shaped:
            kinds: dict[str, list[str]] = {}
            for f in families:
                kinds.setdefault("/".join(str(f.shape[k]) for k in ("pos", "norm", "mlp")), []).append(f.hf_class)
            problems.append(", ".join(f"{k}={getattr(cfg, k)!r}" for k in ("pos", "norm", "mlp")) + " ("
                            + "; ".join(f"{', '.join(names)}: {shape}" for shape, names in kinds.items()) + ")")
    what = "no Hugging Face transformers class" if name is None else f"no {families[0].hf_class}"
    raise UnsupportedModel(f"this model has {what} that computes the same: " + "; ".join(problems))
