"""Random (B, T) training windows from a flat token file, with a generator that checkpoints.

Like nanoGPT's get_batch: each row starts at a uniformly drawn offset i and holds
x = ids[i : i+T], y = ids[i+1 : i+T+1]. Unlike it, the draws come from a seeded
numpy Generator whose exact state is part of the checkpoint, so a resumed run sees the very
batches the uninterrupted run would have seen.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np


def _windows(tokens: np.ndarray, starts: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), each int64 (B, T), for the windows starting at `starts` (B,)."""
    idx = starts[:, None] + np.arange(T + 1)[None, :]        # (B, T+1)
    rows = np.asarray(tokens[idx], dtype=np.int64)           # one gather from the memmap
    return rows[:, :-1], rows[:, 1:]


class BatchLoader:
    """Draws (x, y) batches of int64 ids, shape (batch_size, block_size), from `tokens` (N,).

    tokens: a 1-D integer array (a np.memmap of train.bin is the usual case);
    seed: seeds the generator (numpy PCG64); device: where the batches go ('cpu', 'cuda[:N]');
    shard: (rank, world_size) for data-parallel training: every rank draws the same global batch
    of batch_size * world_size windows and keeps rows [rank * B, (rank + 1) * B), so the ranks
    together see what one loader of batch_size * world_size sees, and the generator's state
    is the same on every rank (a checkpoint from rank 0 resumes them all).
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, block_size: int, seed: int = 0,
                 device: str = "cpu", name: str = "train", shard: tuple[int, int] = (0, 1)):
        if tokens.ndim != 1:
            raise ValueError(f"{name} tokens must be a 1-D array, got shape {tokens.shape}")
        if batch_size < 1 or block_size < 1:
            raise ValueError(f"batch_size and block_size must be >= 1, got {batch_size}, {block_size}")
        if len(tokens) < block_size + 1:
            raise ValueError(
                f"{name} split has {len(tokens)} tokens, fewer than block_size + 1 = {block_size + 1}: "
                "use a smaller --block-size or more data")
        rank, world = shard
        if not 0 <= rank < world:
            raise ValueError(f"shard must be (rank, world_size) with 0 <= rank < world_size, got {shard}")
        self.rank, self.world_size = int(rank), int(world)
        self.tokens = tokens
        self.batch_size, self.block_size = int(batch_size), int(block_size)
        self.device = device
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.batches_drawn = 0
        self._to_gpu = None  # pinned staging buffers + async copies (autograd.cuda.transfer)

    def next_batch(self) -> tuple[Any, Any]:
        """The next (x, y): int64 arrays (B, T) on the loader's device."""
        starts = self.rng.integers(0, len(self.tokens) - self.block_size, size=self.batch_size * self.world_size)
        starts = starts[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]  # (B,)
        x, y = _windows(self.tokens, starts, self.block_size)
        self.batches_drawn += 1
        if self.device != "cpu":
            if self._to_gpu is None:
                from autograd.cuda.transfer import HostToDevice

                self._to_gpu = HostToDevice(self.device)
            x, y = self._to_gpu(x), self._to_gpu(y)
        return x, y

    __next__ = next_batch

    def __iter__(self):
        return self

    def state_dict(self) -> dict:
        """Plain JSON-able state: the generator's exact state and how many batches were drawn."""
        return {"seed": self.seed, "batches_drawn": self.batches_drawn,
                "rng": copy.deepcopy(self.rng.bit_generator.state)}

    def load_state_dict(self, state: dict) -> None:
        try:
            rng_state = state["rng"]
            if rng_state.get("bit_generator") != type(self.rng.bit_generator).__name__:
                raise ValueError(f"loader state is for bit generator {rng_state.get('bit_generator')!r}")
            self.rng.bit_generator.state = copy.deepcopy(rng_state)
            self.seed = int(state.get("seed", self.seed))
            self.batches_drawn = int(state.get("batches_drawn", 0))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed loader state in checkpoint: {exc!r}") from None


def fixed_batches(tokens: np.ndarray, n_batches: int, batch_size: int, block_size: int,
                  seed: int = 1234, device: str = "cpu", name: str = "val",
                  shard: tuple[int, int] = (0, 1)) -> list[tuple[Any, Any]]:
    """`n_batches` (x, y) batches drawn once with their own generator: the same windows at every
    evaluation, and drawing them never moves the training generator. shard: as BatchLoader's."""
    loader = BatchLoader(tokens, batch_size, block_size, seed=seed, device=device, name=name, shard=shard)
    return [loader.next_batch() for _ in range(n_batches)]
