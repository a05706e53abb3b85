"""Hugging Face `config.json` <-> GPTConfig, through the family records of gpt.pretrained.families.

Reading (`config_from_hf`): every field read is first checked for its type (the family's schema,
gpt.pretrained.families.fields); the family named by `architectures` (else `model_type`) maps every
field that would change the computation, or checks it against the one value we implement;
anything else (a `rope_scaling` kind, a sliding window shorter than the context, an activation
we do not have) is refused with its name, never loaded as a silently different model. Fields
that only matter to training or generation defaults (dropouts, token ids, `torch_dtype`, ...)
are ignored.

Writing (`config_to_hf`): the first family that computes exactly what the config does (or the
one asked for); a variant none of them can express is refused, naming the setting.
"""
from __future__ import annotations

from gpt.model.config import GPTConfig
from gpt.pretrained.families import FAMILIES, Family, UnsupportedModel, by_hf_class, by_model_type, export_family
from gpt.pretrained.families.fields import COMMON, checked

__all__ = ["architecture", "config_from_hf", "config_to_hf"]


def architecture(hf: dict, where: str) -> Family:
    """The one family named by config.json (its `architectures`, else its `model_type`), once the
    fields every family reads have their types."""
    archs = checked(hf, COMMON, where).get("architectures") or []
    supported = ", ".join(f.hf_class for f in FAMILIES)
    if not archs:
        family = by_model_type(hf.get("model_type"))
        if family is None:
            raise UnsupportedModel(f"{where}: names no 'architectures' and model_type {hf.get('model_type')!r}; "
                                   f"supported: {supported}")
        return family
    family = by_hf_class(archs[0]) if len(archs) == 1 else None
    if family is None:
        raise UnsupportedModel(f"{where}: field 'architectures' is {archs}; supported: {supported}")
    return family


def config_from_hf(hf: dict, where: str = "config.json", block_size: int | None = None) -> GPTConfig:
    """The GPTConfig of a Hugging Face config.json dict. block_size: use a shorter context than
    the checkpoint's (a learned position table is cropped to it; a sliding window must cover it)."""
    family = architecture(hf, where)
    cfg = family.read(checked(hf, family.schema, where), where)
    if block_size is not None:
        if not 0 < block_size <= cfg["block_size"]:
            raise ValueError(f"block_size={block_size} must be in 1..{cfg['block_size']} (the checkpoint's "
                             "max_position_embeddings / n_positions)")
        cfg["block_size"] = int(block_size)
    window = hf.get("sliding_window")
    if hf.get("use_sliding_window", family.window_by_default) and window is not None and window < cfg["block_size"]:
        raise UnsupportedModel(
            f"{where}: field 'sliding_window' is {window}, shorter than the context of {cfg['block_size']} "
            "positions, and sliding-window attention is not implemented; load with block_size <= "
            f"{window} (GPT.from_pretrained(path, block_size={window}))")
    try:
        return GPTConfig(**cfg)
    except ValueError as exc:
        raise UnsupportedModel(f"{where}: {exc}") from None


def config_to_hf(cfg: GPTConfig, extra: dict | None = None, family: str | None = None) -> dict:
    """config.json for `cfg` as the family named (default: the first that computes the same, see
    `export_family`); `extra` adds fields (token ids)."""
    family = export_family(cfg, family)
    d = {"architectures": [family.hf_class], "model_type": family.model_type, "vocab_size": cfg.vocab_size,
         "tie_word_embeddings": cfg.tie_weights, "torch_dtype": "float32", "use_cache": True}
    d.update(family.write(cfg))
    d.update(extra or {})
    return d
