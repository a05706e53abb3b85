"""`gpt vit`: a Vision Transformer on handwritten digits, trained on the CPU in minutes.

    gpt vit train   [--out runs/vit] [--patch 2|4] [--data digits|synthetic]   held-out accuracy
    gpt vit train   --resume runs/vit --steps 4000                              continues exactly
    gpt vit predict --run runs/vit [--show 8] [--png grid.png]   test images, labels, confusion matrix

`gpt eval --run runs/vit` gives a run's loss and accuracy on its test (or train) split and
`gpt plot runs/vit` its curves, as for a GPT.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import typing

# The flags of the model, by the ViTConfig field each sets (the image size, channels and classes
# come from the data).
MODEL_FLAGS = {"patch": ("patch_size", "patch size P (P x P pixels a token); must divide the image size, "
                                       "8 for both image sets: 1, 2, 4 or 8"),
               "d_model": ("d_model", "model width"), "nhead": ("nhead", "attention heads"),
               "layers": ("num_layers", "encoder layers"),
               "dim_feedforward": ("dim_feedforward", "feed-forward width"), "dropout": ("dropout", "dropout")}
SETTING_HELP = {
    "data": "image set: digits (scikit-learn's bundled 8x8 digits: the vision extra) or synthetic "
            "(procedural seven-segment digits, no dependency)",
    "seed": "seed of the split, the initialisation and the batches", "steps": "optimizer steps",
    "batch_size": "images per step", "lr": "peak learning rate (AdamW)", "min_lr": "learning rate at the end",
    "warmup": "linear warmup steps",
    "lr_decay_steps": "step where the cosine reaches --min-lr (default: --steps; a resumed run with more "
                      "--steps keeps its old end)", "weight_decay": "AdamW weight decay of the matrices",
    "label_smoothing": "share of each target spread over all classes",
    "shift": "move each training image by a random -1..1 pixels in each direction",
    "grad_clip": "clip the gradient norm at this", "eval_interval": "evaluate and checkpoint every N steps",
    "log_interval": "write a metrics line every N steps", "max_minutes": "stop after this many minutes of training"}


DEFAULT_OUT = "runs/vit"


def register(subparsers) -> None:
    from gpt.training.config import flag
    from gpt.vision.data import DATASETS
    from gpt.vision.model import ViTConfig
    from gpt.vision.train import VitSettings

    p = subparsers.add_parser(
        "vit", help="a Vision Transformer on handwritten digits (patches as tokens, nn.TransformerEncoder)",
        description="Train and use a ViT: an image cut into P x P patches, each a token, a class token and "
                    "learned positions, the project's nn.TransformerEncoder (pre-norm, GELU) and a linear "
                    "head. Data without a download: scikit-learn's digits (`pip install -e \".[vision]\"`) "
                    "or a procedural set, split 80/20 by --seed.")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    t = sub.add_parser("train", help="train a ViT into a run folder; print its held-out accuracy",
                       description="Train a ViT and write a run folder (config.json, metrics.jsonl, "
                                   "latest.safetensors, summary.json) as `gpt train` does. Ctrl-C stops after "
                                   "the step and saves; --resume RUN continues exactly.")
    t.add_argument("--out", help=f"run folder to write (default {DEFAULT_OUT})")
    t.add_argument("--resume", metavar="RUN", help="continue the run in this folder (or checkpoint file)")
    model_defaults = ViTConfig()
    for name, (fld, text) in MODEL_FLAGS.items():
        default = getattr(model_defaults, fld)
        t.add_argument(flag(name), type=type(default), default=None, help=f"{text} (default {default})")
    hints = typing.get_type_hints(VitSettings)
    for f in dataclasses.fields(VitSettings):
        kw = {"default": None, "help": f"{SETTING_HELP[f.name]} (default {f.default})"}
        if isinstance(f.default, bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _value_type(hints[f.name])
        if f.name == "data":
            kw["choices"] = DATASETS
        t.add_argument(flag(f.name), **kw)
    t.set_defaults(func=run_train)
    r = sub.add_parser("predict", help="a run's predictions on test images (as text or a PNG) and its confusion matrix")
    r.add_argument("--run", required=True, metavar="DIR", help="a folder written by `gpt vit train` (or a checkpoint)")
    r.add_argument("--show", type=int, default=8, metavar="N", help="test images to show (default 8)")
    r.add_argument("--png", metavar="FILE", help="also draw them as a PNG grid (needs matplotlib)")
    r.set_defaults(func=run_predict)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _value_type(hint) -> type:
    """The type a setting's flag parses: int for `int | None`, float for `float`."""
    return next((t for t in typing.get_args(hint) if t is not type(None)), hint)


def _given(args: argparse.Namespace):
    """(settings, the setting names given, model config, the model fields given) from the flags."""
    from gpt.vision.model import ViTConfig
    from gpt.vision.train import VitSettings

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(VitSettings)
             if getattr(args, f.name) is not None}
    model = {fld: getattr(args, flag) for flag, (fld, _) in MODEL_FLAGS.items() if getattr(args, flag) is not None}
    return VitSettings(**given), set(given), ViTConfig(**model), model


def run_train(args: argparse.Namespace) -> int:
    from autograd.threads import apply_threads
    from gpt.vision.train import train_vit

    settings, explicit, model_cfg, model_given = _given(args)
    if args.resume and args.out:
        raise ValueError(f"--out {args.out!r}: a resumed run keeps its own folder ({args.resume})")
    apply_threads()  # as `gpt train` chooses: the free cores (or GPT_THREADS), OpenBLAS on one
    s = train_vit(args.out or DEFAULT_OUT, model_cfg, settings, resume=args.resume, explicit=explicit,
                  model_explicit=model_given if args.resume else None)
    run = s["run_dir"]
    print(f"done: {s['steps']} steps in {s['train_seconds']:.0f} s ({s['stop_reason']}), {s['parameters']:,} "
          f"parameters; test accuracy {s['test_accuracy']:.2%} ({s['data']['test']} held-out {s['data']['name']} "
          f"images), test loss {s['test_loss']:.4f}; run folder {run}")
    if s["stop_reason"] != "max_steps":  # interrupted or out of --max-minutes: its --steps are not done
        print(f"continue with: gpt vit train --resume {run}")
    else:
        print(f"see it: gpt vit predict --run {run}; curves: gpt plot {run}; train on: gpt vit train "
              f"--resume {run} --steps {2 * s['steps']}")
    return 0


def _run_images(meta: dict):
    """The image set a ViT checkpoint trained on (its name and seed), checked by its fingerprint."""
    import warnings

    from gpt.vision.data import load_images
    from gpt.vision.train import data_fingerprint

    s = meta.get("train_args", {})
    images = load_images(s.get("data", "digits"), int(s.get("seed", 0)))
    if meta.get("data", {}).get("fingerprint") != data_fingerprint(images):
        warnings.warn(f"the {images.name} images here differ from those the run trained on "
                      "(another scikit-learn?): its test split may overlap its training images")
    return images


def eval_run(args: argparse.Namespace) -> int:
    """`gpt eval` on a ViT run: loss and accuracy over its test split (--split val) or train split."""
    from gpt.vision.train import evaluate, load_vit

    if args.data or args.max_tokens is not None:
        raise ValueError("--data and --max-tokens read token data; a ViT run is evaluated on its own images")
    model, meta = load_vit(args.run or args.checkpoint)
    images = _run_images(meta)
    x, y = (images.test_x, images.test_y) if args.split == "val" else (images.train_x, images.train_y)
    res = evaluate(model, x, y)
    split = "test" if args.split == "val" else "train"
    result = {"split": split, "loss": res["loss"], "accuracy": res["accuracy"], "images": len(y),
              "data": images.name, "checkpoint": meta.get("path")}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{split} loss {res['loss']:.4f}, accuracy {res['accuracy']:.2%} over {len(y):,} {images.name} images")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from gpt.plotting import figure_format
    from gpt.vision.show import confusion_table, image_rows, png_grid
    from gpt.vision.train import confusion_matrix, evaluate, load_vit

    if args.png:
        figure_format(args.png, "--png")  # refused now, not after the evaluation
    if args.show < 0:
        raise ValueError(f"--show must be >= 0, got {args.show}")
    model, meta = load_vit(args.run)
    images = _run_images(meta)
    res = evaluate(model, images.test_x, images.test_y)
    pred, n = res["predictions"], min(args.show, len(images.test_y))
    if n:
        print(image_rows(images.test_x[:n], images.test_y[:n], pred[:n]))
    print(f"test accuracy {res['accuracy']:.2%} ({int((pred == images.test_y).sum())} of {len(pred)}); "
          f"confusion matrix (rows: true label, columns: predicted):")
    print(confusion_table(confusion_matrix(images.test_y, pred, images.n_classes)))
    if args.png and n:
        print(png_grid(images.test_x[:n], images.test_y[:n], pred[:n], args.png))
    return 0
