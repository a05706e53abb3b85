"""Pieces the commands that read a trained run share: where the model comes from, and loading it."""
from __future__ import annotations

import argparse


def path_arg(text: str) -> str:
    """An argparse type for a file or folder: an empty one is refused (it would mean the
    current folder, or nothing at all)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def add_model_source(p: argparse.ArgumentParser) -> None:
    """--run DIR or --checkpoint FILE (one of them, required), and --device."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", type=path_arg, metavar="DIR", help="a run folder (its best, else latest, checkpoint)")
    src.add_argument("--checkpoint", type=path_arg, metavar="FILE", help="a checkpoint file")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")


def load_run_model(args: argparse.Namespace):
    """(model in eval mode, tokenizer or None, checkpoint meta) for --run/--checkpoint on --device;
    on the CPU it computes on the threads autograd.threads chooses (as `gpt train` does)."""
    from autograd import backend
    from autograd.threads import apply_threads
    from gpt.training.checkpoint import load_model
    from gpt.vision.train import is_vit_checkpoint

    try:  # a missing GPU is the user's to fix: one clear line, no traceback
        backend.module_for_device(args.device)
    except RuntimeError as exc:
        raise ValueError(f"--device {args.device}: {exc}") from None
    if args.device == "cpu":
        apply_threads()
    path = args.run or args.checkpoint
    if is_vit_checkpoint(path):  # an image classifier has no text to sample or study
        raise ValueError(f"{path} holds a ViT (an image classifier): use gpt vit predict or gpt eval")
    return load_model(path, device=args.device)
