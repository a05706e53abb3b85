"""`gpt plot`: the curves of one or more runs, train and val loss and the learning rate.

    gpt plot runs/a runs/b --out curves.png            # against steps
    gpt plot runs/a --x tokens --out curves.png         # or tokens seen, or wall-clock time

Reads each run folder's metrics.jsonl (and config.json for the tokens per step). Without
matplotlib it says so and prints the curves as a small text table instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

X_AXES = {"steps": "optimizer step", "tokens": "tokens seen", "time": "wall-clock seconds"}


def register(subparsers) -> None:
    p = subparsers.add_parser("plot", help="draw the loss and learning-rate curves of runs",
                              description="Train and val loss and the learning rate of one or more "
                                          "runs on one figure.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders (each holds metrics.jsonl)")
    p.add_argument("--out", default="curves.png", metavar="PNG",
                   help="the figure to write, .png, .svg or .pdf (default curves.png)")
    p.add_argument("--x", choices=tuple(X_AXES), default="steps", help="the horizontal axis (default steps)")
    p.set_defaults(func=run)


def read_curves(run_dir: str | Path, x: str = "steps") -> dict[str, list[tuple[float, float]]]:
    """{"train": [(x, loss)], "val": [(x, val loss)], "lr": [(x, lr)]} of one run folder."""
    from nn.checkpoint import parse_json

    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is not a run folder: it has no metrics.jsonl")
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = parse_json(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            records.append(rec)
    scale = _tokens_per_step(run_dir) if x == "tokens" else 1
    t0 = min((r["time"] for r in records if isinstance(r.get("time"), (int, float))), default=0.0)

    def at(r):
        return r.get("time", t0) - t0 if x == "time" else r["step"] * scale

    return {"train": [(at(r), r["loss"]) for r in records if r.get("kind") == "train" and "loss" in r],
            "val": [(at(r), r["val_loss"]) for r in records if r.get("kind") == "eval" and "val_loss" in r],
            "lr": [(at(r), r["lr"]) for r in records if r.get("kind") == "train" and "lr" in r]}


def _tokens_per_step(run_dir: Path) -> int:
    try:
        info = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
        if "tokens_per_step" in info:  # a run without token windows (a ViT: patches)
            return int(info["tokens_per_step"])
        train = info["train"]
        return int(train["batch_size"]) * int(train["block_size"]) * int(train.get("grad_accum", 1))
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{run_dir}/config.json does not give the tokens per step: use --x steps") from None


def text_table(curves: dict[str, dict], x: str, rows: int = 6) -> str:
    """A few evenly spaced evaluations of each run: x, val loss, and the train loss and lr of the
    last step logged at or before it ('-' before the first, as at step 0)."""
    lines = [f"{'run':<24} {x:>12} {'train loss':>10} {'val loss':>9} {'lr':>9}"]
    for name, c in curves.items():
        val = c["val"]
        for i in sorted({round(k * (len(val) - 1) / max(rows - 1, 1)) for k in range(rows)} if val else ()):
            at, loss = val[i]
            train, lr = _last_at(c["train"], at), _last_at(c["lr"], at)
            lines.append(f"{name[:24]:<24} {at:>12.6g} {'-' if train is None else f'{train:.4f}':>10} "
                         f"{loss:>9.4f} {'-' if lr is None else f'{lr:.2e}':>9}")
    return "\n".join(lines)


def _last_at(points: list[tuple[float, float]], at: float) -> float | None:
    """The value of the last point at or before `at`, or None."""
    before = [v for x, v in points if x <= at]
    return before[-1] if before else None


def run_labels(runs: list[str]) -> list[str]:
    """A distinct label per run folder: its name, with parent folders added while two share one
    (runs/a/exp and runs/b/exp -> a/exp, b/exp); a folder given twice is numbered."""
    parts = [Path(os.path.abspath(r)).parts for r in runs]
    depth = [1] * len(runs)
    while True:
        labels = [Path(*p[-d:]).as_posix() for p, d in zip(parts, depth)]
        clashing = [i for i, label in enumerate(labels) if labels.count(label) > 1 and depth[i] < len(parts[i])]
        if not clashing:
            break
        for i in clashing:
            depth[i] += 1
    return [label if labels.count(label) == 1 else f"{label} ({labels[:i].count(label) + 1})"
            for i, label in enumerate(labels)]


def _line_style(points: list) -> dict:
    """A marker for a curve of one point, which a line alone would not show."""
    return {"marker": "."} if len(points) == 1 else {}


def run(args: argparse.Namespace) -> int:
    from gpt.plotting import MISSING_MATPLOTLIB, figure_format, pyplot, save_figure

    figure_format(args.out)  # refused now, not after the curves are read
    labels = run_labels(args.runs)
    curves = {label: read_curves(r, args.x) for r, label in zip(args.runs, labels)}
    for r, label in zip(args.runs, labels):
        if not any(curves[label].values()):
            print(f"gpt plot: warning: {r} has no loss lines of a `gpt train` or `gpt vit train` run "
                  "(a translate run prints its own, in metrics.jsonl)", file=sys.stderr)
    plt = pyplot()
    if plt is None:
        print(MISSING_MATPLOTLIB)
        print(text_table(curves, args.x))
        return 0
    fig, (ax_loss, ax_lr) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, height_ratios=(3, 1))
    for i, (name, c) in enumerate(curves.items()):
        color = f"C{i % 10}"
        for key, style in (("train", {"alpha": 0.5, "linewidth": 1, **_line_style(c["train"])}),
                           ("val", {"marker": "o", "markersize": 3})):
            if c[key]:
                ax_loss.plot(*zip(*c[key]), color=color, label=f"{name} {key}", **style)
        if c["lr"]:
            ax_lr.plot(*zip(*c["lr"]), color=color, **_line_style(c["lr"]))
    ax_loss.set_ylabel("loss")
    ax_loss.legend(fontsize="small")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel(X_AXES[args.x])
    fig.tight_layout()
    print(f"wrote {save_figure(fig, args.out, plt)}")
    return 0
