"""Host allocator tuning for training loops: keep freed memory in the process instead of returning
it to the OS.

A training step allocates and frees the same large temporaries every step (activations,
gradients, logits). glibc's malloc serves blocks of more than ~128 KiB-32 MiB with a fresh
mmap and unmaps them on free, so every step would page-fault all of that memory in again, a
large share of a step's time. ``keep_freed_memory`` (``bpe.heap``, which tokenizer training uses
too) raises the mmap and trim thresholds so that the next step reuses the freed blocks (0 faults).
The cost: the process keeps its peak heap after a step, which a training loop reaches again on its
next step anyway.
"""
from __future__ import annotations

from bpe.heap import freed_memory_kept, keep_freed_memory  # noqa: F401
