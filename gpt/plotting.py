"""matplotlib, when it is installed (the `plot` extra), and figures saved atomically.

Every plotting command works without it: `pyplot()` returns None and the command prints what it
would have drawn as text, with MISSING_MATPLOTLIB saying how to get the figure."""
from __future__ import annotations

import os
from pathlib import Path

from bpe.files.atomic import atomic_write

MISSING_MATPLOTLIB = ("matplotlib is not installed, so no plot was written (everything else is); "
                      "install the optional extra with `pip install -e \".[plot]\"` or `pip install matplotlib`")


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (never needs a display), or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: str | os.PathLike, plt) -> Path:
    """Write `fig` as a PNG to `path` atomically and close it."""
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=72, format="png", pil_kwargs={"optimize": True}))
    finally:
        plt.close(fig)
