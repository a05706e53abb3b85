"""How many processes bpe's parallel counting and encoding start by default."""
from __future__ import annotations

import os


def default_workers() -> int:
    """The cores this process may run on (all of the machine's where that cannot be asked)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
