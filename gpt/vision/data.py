"""Image sets for the ViT, with no download, and the batches a run draws from them.

    digits      scikit-learn's bundled handwritten digits (1,797 grey 8x8 images, 10 classes;
                `load_digits` reads a file inside the package: the `vision` extra)
    synthetic   procedural seven-segment digits in NumPy (2,000 grey 8x8 images, 10 classes):
                brightness, a 1-pixel jitter and the noise vary; the tests use it

Both are an ImageSet: float32 images (N, C, H, W) in [0, 1], int64 labels (N,), split 80/20 into
train and test, stratified (each class in proportion) by a seeded permutation, so the same seed
gives the same split on every machine. ImageBatches draws shuffled training batches whose state
(epoch, position) is two integers, which makes a resumed run draw the batches of the
uninterrupted one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

DATASETS = ("digits", "synthetic")
TEST_FRACTION = 0.2
MISSING_SKLEARN = ("the digits data comes with scikit-learn, which is not installed: "
                   "`pip install -e \".[vision]\"` (or `pip install scikit-learn`), or use --data synthetic")


def check_images(x: Any, what: str = "images") -> np.ndarray:
    """x as float images (N, C, H, W) (float arrays keep their dtype, others become float32): a
    real-valued array of that rank with finite values and no empty axis; (N, H, W) is taken as
    one grey channel. Anything else is refused, naming it."""
    if not isinstance(x, np.ndarray) and not hasattr(x, "__array__"):
        raise ValueError(f"{what}: expected an array of images (N, C, H, W), got {type(x).__name__}")
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{what}: expected numbers (N, C, H, W), got an array of dtype {arr.dtype}")
    if arr.ndim == 3:
        arr = arr[:, None]                                   # (N, 1, H, W)
    if arr.ndim != 4 or 0 in arr.shape:
        raise ValueError(f"{what}: expected images of shape (N, C, H, W) or (N, H, W) with no empty "
                         f"axis, got shape {np.shape(x)}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{what}: {int((~np.isfinite(arr)).sum())} values are NaN or infinite")
    return arr if arr.dtype.kind == "f" else arr.astype(np.float32)


def check_labels(y: Any, n: int, n_classes: int, what: str = "labels") -> np.ndarray:
    """y as int64 labels (n,) in [0, n_classes)."""
    arr = np.asarray(y)
    if arr.dtype.kind not in "iu" or arr.shape != (n,):
        raise ValueError(f"{what}: expected {n} integer labels (one per image), got {arr.dtype} {arr.shape}")
    if n and (arr.min() < 0 or arr.max() >= n_classes):
        raise ValueError(f"{what}: labels must lie in [0, {n_classes}), got {int(arr.min())}..{int(arr.max())}")
    return arr.astype(np.int64, copy=False)


@dataclass
class ImageSet:
    """A labelled image set split into train and test: x (N, C, H, W) float32, y (N,) int64."""

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    n_classes: int

    @classmethod
    def split(cls, name: str, x: Any, y: Any, n_classes: int, seed: int) -> "ImageSet":
        """A stratified TEST_FRACTION test split of (x, y), fixed by `seed`."""
        x = check_images(x, f"{name} images").astype(np.float32, copy=False)
        y = check_labels(y, len(x), n_classes, f"{name} labels")
        rng = np.random.default_rng(seed)
        test = np.zeros(len(y), bool)
        for k in range(n_classes):
            members = rng.permutation(np.flatnonzero(y == k))
            test[members[:int(round(TEST_FRACTION * len(members)))]] = True
        if not test.any():  # a fifth of each class rounds to no image: nothing to evaluate on
            raise ValueError(f"{name}: {len(y)} images over {n_classes} classes leave the test split empty "
                             f"({TEST_FRACTION:.0%} of each class rounds to 0); give more images per class")
        return cls(name, x[~test], y[~test], x[test], y[test], n_classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])

    def describe(self) -> str:
        C, H, W = self.image_shape
        return (f"{self.name}: {len(self.train_y):,} train + {len(self.test_y):,} test images of "
                f"{C}x{H}x{W}, {self.n_classes} classes")


def digits(seed: int = 0) -> ImageSet:
    """scikit-learn's 8x8 digits (pixel values 0..16 scaled to [0, 1]), split by `seed`."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ValueError(MISSING_SKLEARN) from None
    d = load_digits()
    return ImageSet.split("digits", d.images / 16.0, d.target, 10, seed)


# Segments a..g of a seven-segment display on an 8x8 grid: (rows, columns) each lights.
_SEGMENTS = {"a": (slice(1, 2), slice(2, 6)), "b": (slice(1, 4), slice(5, 6)), "c": (slice(4, 7), slice(5, 6)),
             "d": (slice(6, 7), slice(2, 6)), "e": (slice(4, 7), slice(2, 3)), "f": (slice(1, 4), slice(2, 3)),
             "g": (slice(3, 5), slice(2, 6))}
_DIGIT_SEGMENTS = ("abcdef", "bc", "abdeg", "abcdg", "bcfg", "acdfg", "acdefg", "abc", "abcdefg", "abcdfg")


def _glyph(digit: int) -> np.ndarray:
    g = np.zeros((8, 8), np.float32)
    for s in _DIGIT_SEGMENTS[digit]:
        rows, cols = _SEGMENTS[s]
        g[rows, cols] = 1.0
    return g


def synthetic(seed: int = 0, n: int = 2000, noise: float = 0.1) -> ImageSet:
    """n noisy seven-segment digits (8x8 grey, 10 classes), made from `seed`, split as digits are."""
    if n < 10:
        raise ValueError(f"the synthetic set needs at least 10 images (one per class), got n={n}")
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    glyphs = np.stack([_glyph(d) for d in range(10)])[y]                 # (n, 8, 8)
    glyphs *= rng.uniform(0.6, 1.0, (n, 1, 1)).astype(np.float32)       # brightness
    x = shift_images(glyphs[:, None], rng.integers(-1, 2, n), rng.integers(-1, 2, n))
    x = x + noise * rng.standard_normal(x.shape).astype(np.float32)
    return ImageSet.split("synthetic", np.clip(x, 0.0, 1.0), y, 10, seed)


def load_images(name: str, seed: int = 0) -> ImageSet:
    """The image set called `name` (one of DATASETS), split by `seed`."""
    if name not in DATASETS:
        raise ValueError(f"unknown image set {name!r}: expected one of {', '.join(DATASETS)}")
    return digits(seed) if name == "digits" else synthetic(seed)


def shift_images(x: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """x (N, C, H, W) with image i moved by (dy[i], dx[i]) pixels in -1..1, zeros coming in."""
    N, C, H, W = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))                # (N, C, H+2, W+2)
    rows = (1 - np.asarray(dy))[:, None] + np.arange(H)                  # (N, H)
    cols = (1 - np.asarray(dx))[:, None] + np.arange(W)                  # (N, W)
    n = np.arange(N)[:, None, None, None]
    c = np.arange(C)[None, :, None, None]
    return padded[n, c, rows[:, None, :, None], cols[:, None, None, :]]  # (N, C, H, W)


class ImageBatches:
    """Shuffled batches of (x (B, C, H, W) float32, y (B,) int64) from train_x, train_y: each epoch
    a permutation made from (seed, epoch), the last incomplete batch dropped; with `shift`, every
    image moved by a random -1..1 pixels in each direction (drawn from (seed, epoch, position))."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batch_size: int, seed: int = 0, shift: bool = False):
        if not 1 <= batch_size <= len(y):
            raise ValueError(f"batch size must be in 1..{len(y)} (the training images), got {batch_size}")
        self.x, self.y, self.batch_size, self.seed, self.shift = x, y, int(batch_size), int(seed), bool(shift)
        self.epoch, self.pos = 0, 0

    def next_batch(self) -> tuple[np.ndarray, np.ndarray]:
        if self.pos + self.batch_size > len(self.y):
            self.epoch, self.pos = self.epoch + 1, 0
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.y))
        idx = order[self.pos:self.pos + self.batch_size]
        x = self.x[idx]
        if self.shift:
            rng = np.random.default_rng([self.seed, self.epoch, self.pos, 1])
            x = shift_images(x, rng.integers(-1, 2, len(idx)), rng.integers(-1, 2, len(idx)))
        self.pos += self.batch_size
        return x, self.y[idx]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
