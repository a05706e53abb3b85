"""`gpt train`: train a GPT; with no arguments, on the Python standard library's own sources."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a GPT (no arguments: a small model on the standard library's sources)",
        description="Train a GPT and write a run folder (config.json, tokenizer.json, metrics.jsonl, "
                    "latest/best checkpoints, summary.json), then print samples. With no arguments: "
                    "a BPE tokenizer of 2048 ids and a small model trained for a few minutes on the CPU "
                    "on the Python standard library's own sources. Every setting is a flag and may also "
                    "sit in a --config file (TOML or JSON, same names); flags win over the file, and "
                    "the file over a resumed run's settings. Ctrl-C stops after the current step and "
                    "saves; --resume RUN continues exactly.")
    from gpt.train_config import add_arguments

    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt.train import train
    from gpt.train_config import resolve

    ns = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    cfg, explicit = resolve(ns)
    train(cfg, explicit)
    return 0
