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


FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_format(path: str | os.PathLike, flag: str = "--out") -> str:
    """The format a figure is written in, from `path`'s suffix (one of FIGURE_FORMATS; PNG without
    one); a ValueError naming `flag` otherwise, to be raised before any work."""
    fmt = Path(path).suffix.lower().lstrip(".") or "png"
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"{flag} {str(path)!r}: a figure is written as " + ", ".join(f".{f}" for f in FIGURE_FORMATS)
                         + "; give a file name ending in one of them")
    return fmt


def save_figure(fig, path: str | os.PathLike, plt) -> Path:
    """Write `fig` to `path` atomically, in the format its suffix names (figure_format), and close it."""
    fmt = figure_format(path, "figure")
    extra = {"pil_kwargs": {"optimize": True}} if fmt == "png" else {}
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=72, format=fmt, **extra))
    finally:
        plt.close(fig)
