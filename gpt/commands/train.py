"""`gpt train`: train a GPT; with no arguments, on the Python standard library's own sources."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from gpt.training.config import MODEL_DEFAULTS, add_arguments

    p = subparsers.add_parser(
        "train", help="train a GPT (no arguments: a small model on the standard library's sources)",
        description="Train a GPT and write a run folder (config.json, tokenizer.json, metrics.jsonl, "
                    "latest/best checkpoints, summary.json), then print samples. With no arguments: "
                    f"a BPE tokenizer of {MODEL_DEFAULTS['vocab_size']} ids and a small model trained for a "
                    "few minutes on the CPU on the Python standard library's own sources (no tests, "
                    "generated tables or number-heavy files: gpt.data.corpus). Evaluations print the val "
                    "loss in nats per token and in bits per byte of text. Every setting is a flag and may also "
                    "sit in a --config file (TOML or JSON, same names); flags win over the file, and "
                    "the file over a resumed run's settings. Ctrl-C stops after the current step and "
                    "saves; --resume RUN continues exactly. Started as `mpiexec -n N gpt train ...` (the "
                    "`dist` extra: mpi4py and mpich) it trains data-parallel on N ranks: --batch-size is "
                    "per rank, only rank 0 writes, and --device cuda gives each rank its own GPU.")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt.training.dist import Distributed
    from gpt.training.trainer import train
    from gpt.training.config import resolve

    ns = {k: v for k, v in vars(args).items() if k not in ("func", "command")}
    dist = Distributed.from_environment()  # None unless started by mpiexec with more than one rank
    if dist is None:
        cfg, explicit = resolve(ns)
        train(cfg, explicit)
        return 0
    return _run_rank(dist, ns)


def _run_rank(dist, ns: dict) -> int:
    """One rank of `mpiexec -n N gpt train`. An error met by every rank alike is reported once by
    rank 0; one met by a single rank (or a second Ctrl-C) ends the whole job with MPI_Abort, so
    that no rank waits forever for it in a collective."""
    from gpt.training.trainer import train
    from gpt.training.config import resolve

    try:
        cfg, explicit = resolve(ns)
        if cfg.device == "cuda":  # one GPU per rank; cuda:N given explicitly is kept
            cfg.device = dist.cuda_device()
            explicit.add("device")
        train(cfg, explicit, dist=dist)
        return 0
    except BaseException as exc:  # noqa: BLE001 - every way out of a rank must end the job cleanly
        if getattr(exc, "every_rank", False):
            if dist.is_main:
                raise
            return _exit_code(exc)
        code = _exit_code(exc)
        if code == 1 and not isinstance(exc, SystemExit):  # not a user error: show where it came from
            import traceback

            traceback.print_exc()
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"error: {exc}"
        dist.abort(f"gpt train (rank {dist.rank} of {dist.world_size}): {what}; ending all ranks", code)
        raise


def _exit_code(exc: BaseException) -> int:
    """The status gpt.cli gives the same exception (1 diverged, 2 user error, 130 Ctrl-C)."""
    from bpe.files.lock import FolderBusy
    from gpt.training.checkpoint import CheckpointError
    from gpt.training.trainer import TrainingDiverged

    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, TrainingDiverged):
        return 1
    if isinstance(exc, (CheckpointError, FileNotFoundError, FileExistsError, ValueError, FolderBusy)):
        return 2
    return 1
