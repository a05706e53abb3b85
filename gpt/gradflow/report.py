"""Output of the gradient study: a terminal table, a JSON file for scripts, PNG plots.

Plots need matplotlib (the optional extra `plot`); without it `plot_*` return a message saying
so and nothing else changes. Every file is written atomically (temp file, fsync, rename), so an
interrupted run never leaves a half-written JSON or PNG behind.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Callable

MISSING_MATPLOTLIB = (
    "matplotlib is not installed, so no plot was written (the table and JSON are complete); "
    "install the optional extra with `pip install -e \".[plot]\"` or `pip install matplotlib`"
)

# (key in a summary row, column title, format) for the sweep table
SWEEP_COLUMNS = (
    ("loss", "loss", "{:.3f}"),
    ("grad_in", "|dL/dx_0|", "{:.3g}"),
    ("grad_out", "|dL/dx_L|", "{:.3g}"),
    ("ratio", "in/out", "{:.3g}"),
    ("factor", "per-block", "{:.3f}"),
    ("id_share", "id-share", "{:.3f}"),
    ("stream_out", "rms x_L", "{:.3g}"),
)


def _atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call write(tmp_path) then move tmp_path onto `path` (same folder, fsynced)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_json(path: str | os.PathLike, result: dict) -> Path:
    """The whole result as indented JSON (NaN/inf written as null so any JSON reader takes it)."""
    text = json.dumps(_finite(result), indent=1)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")

    return _atomic_write(path, write)


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _cell(row: dict, key: str, fmt: str) -> str:
    mean, std = row.get(f"{key}_mean"), row.get(f"{key}_std")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    text = fmt.format(mean)
    if std and row.get("n_seeds", 1) > 1:
        text += " ±" + fmt.format(std)
    return text


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain aligned columns: first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def sweep_table(summary: list[dict]) -> str:
    """One line per (variant, depth): mean ± std over seeds of the summary numbers."""
    headers = ["variant", "depth", "seeds"] + [title for _, title, _ in SWEEP_COLUMNS]
    rows = [[s["variant"], str(s["depth"]), str(s["n_seeds"])] + [_cell(s, k, f) for k, _, f in SWEEP_COLUMNS]
            for s in summary]
    return format_table(headers, rows)


def layer_table(run: dict) -> str:
    """Per-block numbers of one run: stream rms, |dL/dx|, branch rms and identity share per sublayer."""
    subs = [s["name"] for s in run["layers"][0]["sublayers"]] if run["layers"] else []
    headers = ["block", "rms x", "|dL/dx|", "|grad params|"]
    for name in subs:
        headers += [f"rms {name}", f"id {name}"]
    rows = []
    for i, layer in enumerate(run["layers"]):
        row = [str(i), f"{layer['x_rms']:.3g}", f"{layer['grad_norm']:.3g}", f"{layer['param_grad_norm']:.3g}"]
        for s in layer["sublayers"]:
            share = "-" if s["id_share"] is None else f"{s['id_share']:.3f}"
            row += [f"{s['branch_rms']:.3g}", share]
        rows.append(row)
    return format_table(headers, rows)


def spectra_table(rows: list[dict]) -> str:
    """Largest and smallest singular value of one block's Jacobian and of the product across depth."""
    headers = ["kind", "variant", "seed", "depth", "width", "block smax", "block smin",
               "prod smax", "prod smin", "prod cond"]
    out = []
    for r in rows:
        bmax = max(s[0] for s in r["per_block"])
        bmin = min(s[-1] for s in r["per_block"])
        pmax, pmin = r["product_max"][-1], r["product_min"][-1]
        cond = pmax / pmin if pmin > 0 else float("inf")
        out.append([r["kind"], r["variant"], str(r["seed"]), str(r["depth"]), str(r["width"]),
                    f"{bmax:.3g}", f"{bmin:.3g}", f"{pmax:.3g}", f"{pmin:.3g}", f"{cond:.3g}"])
    return format_table(headers, out)


# ---- plots -------------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(fig, path, plt) -> Path:
    try:
        return _atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=90, format="png"))
    finally:
        plt.close(fig)


def plot_gradients(result: dict, path: str | os.PathLike) -> str:
    """Left: |dL/dx_0| against depth per variant (log scale, band = ±1 std over seeds).
    Right: |dL/dx_l| against block index l at the deepest depth, one line per variant.
    Returns a line saying what was written, or why nothing was."""
    plt = _pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    summary, runs = result["summary"], result["runs"]
    variants = list(dict.fromkeys(s["variant"] for s in summary))
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    for v in variants:
        rows = sorted((s for s in summary if s["variant"] == v), key=lambda s: s["depth"])
        d = [s["depth"] for s in rows]
        m = [s["grad_in_mean"] for s in rows]
        sd = [s["grad_in_std"] or 0.0 for s in rows]
        line, = ax0.plot(d, m, marker="o", label=v)
        lo = [max(a - b, a * 1e-3) for a, b in zip(m, sd)]
        ax0.fill_between(d, lo, [a + b for a, b in zip(m, sd)], color=line.get_color(), alpha=0.2)
        deepest = max(d)
        for run in runs:
            if run["variant"] == v and run["depth"] == deepest and run["seed"] == runs[0]["seed"]:
                g = [layer["grad_norm"] for layer in run["layers"]]
                ax1.plot(range(len(g)), g, color=line.get_color(), label=f"{v} (L={deepest})")
    ax0.set(xscale="log", yscale="log", xlabel="depth (blocks)", ylabel="|dL/dx| at block 0 input",
            title="input gradient vs depth")
    ax0.set_xticks(sorted({s["depth"] for s in summary}))
    ax0.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax1.set(yscale="log", xlabel="block index l (0 = bottom)", ylabel="|dL/dx_l|",
            title="gradient along the stack")
    for ax in (ax0, ax1):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(result.get("title", "gradient flow"), fontsize=9)
    fig.tight_layout()
    _save(fig, path, plt)
    return f"wrote {path}"


def plot_spectra(rows: list[dict], path: str | os.PathLike) -> str:
    """Left: largest/smallest singular value of the product J_l...J_1 against l (log scale).
    Right: the full spectrum of the product at the top of the stack, sorted."""
    plt = _pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    first_seed = min(r["seed"] for r in rows)
    for r in rows:
        if r["seed"] != first_seed:
            continue
        label = f"{r['kind']} {r['variant']}"
        ls = "-" if r["kind"] == "mlp" else "--"
        depth = range(1, len(r["product_max"]) + 1)
        line, = ax0.plot(depth, r["product_max"], ls, label=label)
        ax0.plot(depth, r["product_min"], ls, color=line.get_color(), alpha=0.5)
        ax1.plot(range(1, len(r["product"][-1]) + 1), r["product"][-1], ls, color=line.get_color(), label=label)
    ax0.set(yscale="log", xlabel="blocks multiplied (l)", ylabel="singular value",
            title="largest / smallest sv of J_l...J_1")
    ax1.set(yscale="log", xlabel="index (sorted)", ylabel="singular value",
            title="spectrum of the full product")
    for ax in (ax0, ax1):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path, plt)
    return f"wrote {path}"


def spectra_path(plot_path: str | os.PathLike) -> Path:
    """out.png -> out-spectra.png: where the Jacobian figure goes next to the gradient one."""
    p = Path(plot_path)
    return p.with_name(p.stem + "-spectra" + (p.suffix or ".png"))
