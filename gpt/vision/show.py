"""Images and predictions shown as text (a terminal) or as a PNG grid (with matplotlib)."""
from __future__ import annotations

import numpy as np

SHADES = " .:-=+*#%@"  # darkest to brightest; a pixel in [0, 1] picks one


def ascii_image(img: np.ndarray) -> list[str]:
    """img (C, H, W) in [0, 1] (channels averaged) -> H lines of 2W characters."""
    grey = np.clip(np.asarray(img, np.float64).mean(axis=0), 0.0, 1.0)          # (H, W)
    idx = np.minimum((grey * len(SHADES)).astype(int), len(SHADES) - 1)
    return ["".join(SHADES[i] * 2 for i in row) for row in idx]                  # 2 chars: square pixels


def image_rows(x: np.ndarray, y: np.ndarray, pred: np.ndarray, per_row: int = 8) -> str:
    """Images x (N, C, H, W) side by side, each captioned with its true and predicted label."""
    blocks = []
    for lo in range(0, len(x), per_row):
        pics = [ascii_image(img) for img in x[lo:lo + per_row]]
        width = len(pics[0][0])
        caps = [f"{int(t)}->{int(p)}{'' if t == p else '!'}".ljust(width)
                for t, p in zip(y[lo:lo + per_row], pred[lo:lo + per_row])]
        lines = ["  ".join(c for c in caps)]
        lines += ["  ".join(pic[r] for pic in pics) for r in range(len(pics[0]))]
        blocks.append("\n".join(lines))
    return "true->predicted (! = wrong)\n" + "\n\n".join(blocks)


def confusion_table(m: np.ndarray) -> str:
    """A (K, K) count matrix as a table: rows are true labels, columns predicted ones."""
    K = len(m)
    w = max(3, len(str(int(m.max()))) + 1)
    lines = ["true\\pred" + "".join(f"{k:>{w}}" for k in range(K))]
    lines += [f"{t:>9}" + "".join(f"{int(v):>{w}}" for v in m[t]) for t in range(K)]
    return "\n".join(lines)


def png_grid(x: np.ndarray, y: np.ndarray, pred: np.ndarray, path: str) -> str:
    """Draw x (N, C, H, W) in a grid titled 'true -> predicted' to the PNG `path`; what happened, in words."""
    from gpt.plotting import MISSING_MATPLOTLIB, pyplot, save_figure

    plt = pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    cols = min(8, len(x))
    rows = -(-len(x) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.3 * cols, 1.5 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, img, t, p in zip(axes.flat, x, y, pred):
        ax.imshow(np.asarray(img).mean(axis=0), cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(f"{int(t)} -> {int(p)}", color="black" if t == p else "red", fontsize=9)
    return f"wrote {save_figure(fig, path, plt)}"
