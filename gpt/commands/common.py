"""Pieces the commands that read a trained run share: where the model comes from, and loading it."""
from __future__ import annotations

import argparse


def add_model_source(p: argparse.ArgumentParser) -> None:
    """--run DIR or --checkpoint FILE (one of them, required), and --device."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", metavar="DIR", help="a run folder (its best, else latest, checkpoint)")
    src.add_argument("--checkpoint", metavar="FILE", help="a checkpoint file")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")


def load_run_model(args: argparse.Namespace):
    """(model in eval mode, tokenizer or None, checkpoint meta) for --run/--checkpoint on --device."""
    from autograd import backend
    from gpt.training.checkpoint import load_model

    try:  # a missing GPU is the user's to fix: one clear line, no traceback
        backend.module_for_device(args.device)
    except RuntimeError as exc:
        raise ValueError(f"--device {args.device}: {exc}") from None
    return load_model(args.run or args.checkpoint, device=args.device)
