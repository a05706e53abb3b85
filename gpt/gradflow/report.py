"""Output of the gradient study: a terminal table, a JSON file for scripts, PNG plots.

Plots need matplotlib (the optional extra `plot`); without it `plot_*` return a message saying
so and nothing else changes. Every file is written atomically (temp file, fsync, rename), so an
interrupted run never leaves a half-written JSON or PNG behind.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from bpe.files.atomic import atomic_write
from gpt.files import json_safe
from gpt.plotting import MISSING_MATPLOTLIB, pyplot, save_figure

GEOMETRIC = ("ratio", "factor")  # summarised by geometric mean and a multiplicative spread

# (key in a summary row, column title, format) for the sweep table
SWEEP_COLUMNS = (
    ("loss", "loss", "{:.3f}"),
    ("grad_in", "|dL/dx_0|", "{:.3g}"),
    ("grad_out", "|dL/dx_L|", "{:.3g}"),
    ("ratio", "in/out", "{:.3g}"),
    ("factor", "per-block", "{:.3g}"),
    ("id_share", "id-share", "{:.3f}"),
    ("stream_out", "rms x_L", "{:.3g}"),
)


def write_json(path: str | os.PathLike, result: dict) -> Path:
    """The whole result as indented JSON (NaN/inf written as null so any JSON reader takes it)."""
    text = json.dumps(json_safe(result), indent=1)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")

    return atomic_write(path, write)




def _cell(row: dict, key: str, fmt: str) -> str:
    mean, std = row.get(f"{key}_mean"), row.get(f"{key}_std")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    text = fmt.format(mean)
    if std is not None and row.get("n_seeds", 1) > 1:
        # ratio/factor: geometric mean, spread as a factor (see sweep.summarize)
        text += f" x/{std:.3g}" if key in GEOMETRIC else " ±" + fmt.format(std)
    return text


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain aligned columns: first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    def line(cells):
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def sweep_table(summary: list[dict]) -> str:
    """One line per (variant, depth): mean ± std over seeds of the summary numbers."""
    stacked = any("stack" in s for s in summary)  # encoder-decoder rows: one per stack
    headers = ["variant"] + (["stack"] if stacked else []) + ["depth", "seeds"] + [t for _, t, _ in SWEEP_COLUMNS]
    rows = [[s["variant"]] + ([s.get("stack", "")] if stacked else []) + [str(s["depth"]), str(s["n_seeds"])]
            + [_cell(s, k, f) for k, _, f in SWEEP_COLUMNS] for s in summary]
    return format_table(headers, rows)


def label(row: dict) -> str:
    """A run's or summary row's name in plots and titles: its variant, and its stack if any."""
    return f"{row['variant']} {row['stack']}" if row.get("stack") else row["variant"]


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
    """Singular values of one block's Jacobian (the largest over blocks, and the median of the
    block medians) and of the product across depth (largest, median, smallest).

    Norms have exact zero singular values (LayerNorm removes the mean and radial directions of
    every token), so the smallest value is ~1e-17 for any normed stack and the median is the
    number that says whether the bulk of the spectrum survives depth.
    """
    headers = ["kind", "variant", "seed", "depth", "width", "block max", "block med",
               "prod max", "prod med", "prod min"]
    out = []
    for r in rows:
        bmax = max(s[0] for s in r["per_block"])
        bmed = float(np.median([np.median(s) for s in r["per_block"]]))
        top = r["product"][-1]
        out.append([r["kind"], r["variant"], str(r["seed"]), str(r["depth"]), str(r["width"]),
                    f"{bmax:.3g}", f"{bmed:.3g}", f"{top[0]:.3g}", f"{float(np.median(top)):.3g}", f"{top[-1]:.3g}"])
    return format_table(headers, out)


# ---- plots -------------------------------------------------------------------------------------
def _style(variant: str, palette: dict) -> dict:
    """One colour per variant (ignoring the norm), dashed for RMSNorm, so ln/rms pairs overlay visibly."""
    base = variant.replace("-rmsnorm", "").replace("-layernorm", "")
    if base not in palette:
        palette[base] = f"C{len(palette) % 10}"
    return {"color": palette[base], "linestyle": "--" if "rmsnorm" in variant else "-"}


def plot_gradients(result: dict, path: str | os.PathLike) -> str:
    """Left: |dL/dx_0| against depth per variant (log-log, band = ±1 std over seeds).
    Right: |dL/dx_l| against block index l at the deepest depth (first seed), one line per variant.
    Returns a line saying what was written, or why nothing was."""
    plt = pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    summary, runs = result["summary"], result["runs"]
    variants = list(dict.fromkeys(label(s) for s in summary))
    depths = sorted({s["depth"] for s in summary})
    first_seed = min(r["seed"] for r in runs)
    palette: dict = {}
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
    for v in variants:
        style = _style(v, palette)
        rows = [s for s in sorted(summary, key=lambda s: s["depth"]) if label(s) == v and s["grad_in_mean"]]
        d = [s["depth"] for s in rows]
        m = [s["grad_in_mean"] for s in rows]
        sd = [s["grad_in_std"] or 0.0 for s in rows]
        ax0.plot(d, m, marker="o", ms=3, label=v, **style)
        ax0.fill_between(d, [max(a - b, a * 1e-2) for a, b in zip(m, sd)], [a + b for a, b in zip(m, sd)],
                         color=style["color"], alpha=0.15)
        for run in runs:
            if label(run) == v and run["depth"] == depths[-1] and run["seed"] == first_seed and run["layers"]:
                g = [layer["grad_norm"] for layer in run["layers"]] + [run["grad_out"]]
                ax1.plot(range(len(g)), g, label=v, **style)
    ax0.set(xscale="log", yscale="log", xlabel="depth L (blocks)", ylabel="|dL/dx_0| (bottom block input)",
            title="gradient reaching the bottom vs depth")
    ax0.set_xticks(depths)
    ax0.xaxis.set_major_formatter(ScalarFormatter())
    ax0.xaxis.set_minor_formatter(NullFormatter())
    ax1.set(yscale="log", xlabel=f"block l (0 = bottom, {depths[-1]} = top of the stack)", ylabel="|dL/dx_l|",
            title=f"gradient along a stack of {depths[-1]} blocks")
    for ax in (ax0, ax1):
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(result.get("title", "gradient flow"), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, plt)
    return f"wrote {path}"


def plot_spectra(rows: list[dict], path: str | os.PathLike) -> str:
    """One column per block kind (linear, mlp, gpt). Top: largest (solid) and median (dotted)
    singular value of the product J_l...J_1 against l. Bottom: the sorted spectrum of the
    product at the top of the stack. Values below 1e-20 (exact zeros of the norms) are clipped."""
    plt = pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    first_seed = min(r["seed"] for r in rows)
    fig, axes = plt.subplots(2, len(kinds), figsize=(4 * len(kinds), 6.5), squeeze=False)
    floor = 1e-20
    palette: dict = {}
    for col, kind in enumerate(kinds):
        top, bottom = axes[0][col], axes[1][col]
        for r in rows:
            if r["kind"] != kind or r["seed"] != first_seed:
                continue
            style = _style(r["variant"], palette)
            depth = range(1, len(r["product"]) + 1)
            top.plot(depth, [max(s[0], floor) for s in r["product"]], label=r["variant"], **style)
            top.plot(depth, [max(float(np.median(s)), floor) for s in r["product"]], color=style["color"],
                     linestyle=":")
            spec = [max(v, floor) for v in r["product"][-1]]
            bottom.plot(range(1, len(spec) + 1), spec, label=r["variant"], **style)
        top.set(yscale="log", xlabel="blocks multiplied l", title=f"{kind}: max (solid), median (dotted)")
        bottom.set(yscale="log", xlabel="singular value index", title=f"{kind}: spectrum of the full product")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=6)
    axes[0][0].set_ylabel("singular value of J_l...J_1")
    axes[1][0].set_ylabel("singular value")
    fig.tight_layout()
    save_figure(fig, path, plt)
    return f"wrote {path}"


def spectra_path(plot_path: str | os.PathLike) -> Path:
    """out.png -> out-spectra.png: where the Jacobian figure goes next to the gradient one."""
    p = Path(plot_path)
    return p.with_name(p.stem + "-spectra" + (p.suffix or ".png"))
