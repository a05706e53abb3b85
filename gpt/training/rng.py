"""Saving and restoring autograd's global generator (dropout draws from it) in checkpoints.

On the CPU the generator is NumPy's PCG64, whose state is a small dict of integers: saved as
JSON, restored exactly, which is what makes a resumed CPU run equal the uninterrupted one.
CuPy's generators expose no portable state, so a GPU run saves only the CPU state: resumed
GPU dropout masks are fresh draws, not the ones the uninterrupted run would have drawn.
"""
from __future__ import annotations

import copy
from typing import Any


def get_rng_state(device: str = "cpu") -> dict[str, Any]:
    """JSON-able state of the global CPU generator."""
    from autograd.random import default_generator

    gen = default_generator("cpu")
    return {"cpu": copy.deepcopy(gen.bit_generator.state), "device": device}


def set_rng_state(state: dict[str, Any] | None) -> None:
    """Put the global CPU generator back in `state` (from `get_rng_state`); None: no-op."""
    if not state:
        return
    from autograd.random import default_generator

    cpu = state.get("cpu")
    if cpu is None:
        return
    if not isinstance(cpu, dict):
        raise ValueError(f"generator state 'cpu' should be an object (a NumPy bit generator's state), "
                         f"got {type(cpu).__name__}")
    gen = default_generator("cpu")
    if cpu.get("bit_generator") != type(gen.bit_generator).__name__:
        raise ValueError(f"checkpoint's generator state is for {cpu.get('bit_generator')!r}, "
                         f"this autograd uses {type(gen.bit_generator).__name__!r}")
    try:  # NumPy checks the numbers: a missing key, a wrong type or a value out of range
        gen.bit_generator.state = copy.deepcopy(cpu)
    except (KeyError, TypeError, OverflowError) as exc:
        raise ValueError(f"generator state 'cpu' is malformed: {type(exc).__name__}: {exc}") from None
