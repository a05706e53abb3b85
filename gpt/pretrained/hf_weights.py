"""Hugging Face weight names and layouts <-> our state_dict, both ways.

A family's `weights(cfg)` (gpt.pretrained.families) says, for each of our parameters, which
Hugging Face tensors make it and how (a `Recipe`); reading applies it forwards, writing
backwards, so the two directions cannot drift apart.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpt.model.config import GPTConfig
from gpt.pretrained.families import Family, UnsupportedModel
from gpt.pretrained.families.family import Recipe

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")  # what a weight may be stored as
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


def _sizes(cfg: GPTConfig, family: Family) -> str:
    """config.json's size fields as the family names them: `hidden_size=32, ...`."""
    value = {"mlp_hidden": cfg.hidden, "n_kv_head": cfg.kv_heads}
    return ", ".join(f"{key}={value.get(ours, getattr(cfg, ours))}" for ours, key in family.keys.items())


def _check_layers(shapes: dict, cfg: GPTConfig, family: Family, where: str) -> None:
    """Refuse more layers than the files hold, building the table for at most as many layers as
    there are tensors (each layer has its own), so a claim of a million costs nothing."""
    n = max(1, min(cfg.n_layer, len(shapes)))
    layers: dict[int, list[str]] = {}
    for ours, r in family.weights(cfg if n == cfg.n_layer else cfg.replace(n_layer=n)).items():
        if ours.startswith("transformer.h."):
            layers.setdefault(int(ours.split(".")[2]), []).extend(r.names)
    for i in range(cfg.n_layer):
        gone = [name for name in layers.get(i, [f"of layer {i}"]) if name not in shapes]
        if gone:
            raise UnsupportedModel(f"{where}: config.json's field {family.keys['n_layer']!r} is {cfg.n_layer:,} but "
                                   f"the weights hold {i} complete layer(s) (no tensor {gone[0]!r})")


def _check_embedding(shapes: dict, name: str, cfg: GPTConfig, family: Family, where: str) -> None:
    """The token embedding (V, C) against vocab_size and the width."""
    shape = shapes[name][1]
    for axis, ours in enumerate(("vocab_size", "n_embd")):
        if len(shape) != 2 or shape[axis] != getattr(cfg, ours):
            raise UnsupportedModel(f"{where}: config.json's field {family.keys[ours]!r} is {getattr(cfg, ours):,} "
                                   f"but tensor {name!r} has shape {list(shape)}")


def _numbers(shapes: dict, table: dict[str, Recipe], cfg: GPTConfig, family: Family, where: str) -> int:
    """The numbers the tensors give the model (a position table longer than the context cropped)."""
    held = 0
    for r in table.values():
        for name in r.names:
            shape = shapes[name][1]
            if r.kind == "rows":
                if not shape or shape[0] < cfg.block_size:
                    raise UnsupportedModel(f"{where}: config.json's field {family.keys['block_size']!r} is "
                                           f"{cfg.block_size:,} but tensor {name!r} has shape {list(shape)}")
                shape = (cfg.block_size, *shape[1:])
            held += math.prod(shape)
    return held


def check_sizes(shapes: dict[str, tuple[str, tuple]], cfg: GPTConfig, family: Family, where: str) -> None:
    """Before any data is read: the tensors' (dtype code, shape), from the safetensors headers,
    against config.json's sizes, so that a tiny file claiming a huge model is refused at once,
    naming the field and the tensor (UnsupportedModel). Then a model built from `cfg` allocates
    at most twice the numbers the files hold (the load into it then compares every shape)."""
    if family.canonical is not None:
        shapes = family.canonical(shapes)
    _check_layers(shapes, cfg, family, where)
    table = family.weights(cfg)
    used = [n for r in table.values() for n in r.names]
    _check_names(shapes, set(used), cfg, family, where)
    for name in used:
        if shapes[name][0] not in FLOAT_DTYPES:
            raise UnsupportedModel(f"{where}: tensor {name!r} is {shapes[name][0]}; weights must be one of "
                                   f"{', '.join(FLOAT_DTYPES)}")
    _check_embedding(shapes, table["transformer.wte.weight"].names[0], cfg, family, where)
    held = _numbers(shapes, table, cfg, family, where)
    if cfg.count_params() > 2 * held:  # nearer counts reach the model's load, which names the tensor
        raise UnsupportedModel(f"{where}: the weights hold {held:,} numbers but config.json's sizes "
                               f"({_sizes(cfg, family)}) describe {cfg.count_params():,}")
    if cfg.pos == "rope" and cfg.block_size * cfg.head_dim > held:  # the rotary tables' size
        raise UnsupportedModel(f"{where}: config.json's field {family.keys['block_size']!r} is {cfg.block_size:,}: "
                               f"its rotary tables ({cfg.block_size * cfg.head_dim:,} numbers) would outweigh the "
                               f"weights ({held:,}); load with a shorter block_size (gpt import --block-size)")


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
        elif len({a.shape[1:] for a in arrays}) > 1 or any(a.ndim != (2 if kind == "catT" else 1) for a in arrays):
            raise UnsupportedModel(f"{where}: tensors {', '.join(names)} have shapes "
                                   f"{', '.join(str(list(a.shape)) for a in arrays)}, which do not fit together")
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
