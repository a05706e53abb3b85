"""Hugging Face weight names and layouts <-> our state_dict, both ways.

A family's `weights(cfg)` (gpt.pretrained.families) says, for each of our parameters, which
Hugging Face tensors make it and how (a `Recipe`); reading applies it forwards, writing
backwards, so the two directions cannot drift apart.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gpt.model.config import GPTConfig
from gpt.pretrained.families import Family, UnsupportedModel

# Hugging Face buffers that are not weights: causal masks, cached rotary frequencies.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")


def _check_names(tensors: dict[str, Any], used: set[str], cfg: GPTConfig, family: Family, where: str) -> None:
    """UnsupportedModel listing the missing tensors and those the family does not have."""
    ignorable = {"lm_head.weight"} if cfg.tie_weights else set()  # a tied head saved anyway
    missing = sorted(n for n in used if n not in tensors)
    unknown = sorted(n for n in tensors if n not in used and n not in ignorable and not n.endswith(IGNORED_SUFFIXES))
    if missing or unknown:
        parts = [f"missing {len(missing)} tensor(s): {_listed(missing)}"] if missing else []
        if unknown:
            parts.append(f"{len(unknown)} tensor(s) this architecture does not have (not implemented): "
                         f"{_listed(unknown)}")
        raise UnsupportedModel(f"{where}: the weights do not match {family.hf_class} with this config.json: "
                               + "; ".join(parts))


def from_hf(tensors: dict[str, Any], cfg: GPTConfig, family: Family, where: str) -> dict[str, np.ndarray]:
    """Our state_dict from a folder's tensors (name -> float array); every tensor is used or
    known to be ignorable, else UnsupportedModel lists the missing and the unknown ones."""
    if family.canonical is not None:
        tensors = family.canonical(tensors)
    table = family.weights(cfg)
    _check_names(tensors, {n for r in table.values() for n in r.names}, cfg, family, where)
    state = {}
    for ours, (names, kind, _) in table.items():
        arrays = [tensors[n] for n in names]
        if kind == "same":
            state[ours] = arrays[0]
        elif kind == "rows":
            state[ours] = arrays[0][:cfg.block_size]
        elif kind == "T":
            state[ours] = np.ascontiguousarray(arrays[0].T)
        elif kind == "catT":
            state[ours] = np.concatenate([a.T for a in arrays], axis=1)   # (in, sum of outs)
        else:
            state[ours] = np.concatenate(arrays, axis=0)
    return state


def to_hf(state: dict[str, np.ndarray], cfg: GPTConfig, family: Family) -> dict[str, np.ndarray]:
    """Hugging Face's tensors (name -> host array) from our state_dict: `from_hf` inverted."""
    out: dict[str, np.ndarray] = {}
    for ours, (names, kind, sizes) in family.weights(cfg).items():
        arr = np.asarray(state[ours])
        if kind in ("same", "rows"):
            out[names[0]] = arr
        elif kind == "T":
            out[names[0]] = np.ascontiguousarray(arr.T)
        else:
            axis = 1 if kind == "catT" else 0
            pieces = np.split(arr, np.cumsum(sizes)[:-1], axis=axis)
            for name, piece in zip(names, pieces):
                out[name] = np.ascontiguousarray(piece.T if kind == "catT" else piece)
    return out
