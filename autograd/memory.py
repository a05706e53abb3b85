"""Whether an allocation can succeed, asked before making it: a size that a flag or a file sets
(a batch of 10^9 rows, 10^12 new tokens) becomes one clear line instead of a MemoryError (or the
kernel's OOM killer) after the machine has swapped for minutes.

The bound is what the device could still give: on the host, MemAvailable plus free swap from
/proc/meminfo (the physical pages where that file is missing); on a GPU, CuPy's free device
memory. Callers pass a lower bound of what they will need, so a refusal means the work could
not have run, never that it might have been tight.
"""
from __future__ import annotations

import os

from autograd.backend import parse_device


class OutOfMemory(ValueError):
    """An allocation that cannot succeed on this machine, refused before it is attempted."""


def available_bytes(device: str = "cpu") -> int | None:
    """Bytes the device could still allocate (None when it cannot tell)."""
    kind, index = parse_device(device)
    if kind == "cuda":
        try:
            import cupy

            with cupy.cuda.Device(index):
                return int(cupy.cuda.runtime.memGetInfo()[0])
        except Exception:  # no CuPy or no device: the device's own error comes later
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.count(":") == 1}
        return fields["MemAvailable"] + fields.get("SwapFree", 0)
    except (OSError, KeyError, ValueError, IndexError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_fits(nbytes: float, what: str, hint: str, device: str = "cpu") -> None:
    """Raise OutOfMemory naming `what` and `hint` when at least `nbytes` cannot be allocated."""
    free = available_bytes(device)
    if free is not None and nbytes > free:
        where = "this machine" if parse_device(device)[0] == "cpu" else f"device {device}"
        raise OutOfMemory(f"{what} needs at least {_gib(nbytes)}, more than the {_gib(free)} {where} "
                          f"has free; {hint}")
