"""The `gpt` command: one subcommand per module in gpt/commands (each has `register`).

Adding a command is one line here: its module name in COMMANDS. A command module exposes
`register(subparsers)`, which adds its parser and sets `func=run(args) -> int`.
Errors a user can fix (a missing file, a bad setting, a corrupt checkpoint) print one clear
line and exit with status 2 (1 for a run that diverged), without a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

COMMANDS = ("prepare", "train", "sample", "eval", "plot", "gradflow", "inspect", "translate", "vit", "importer", "export")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpt",
        description="Train a GPT from first principles (NumPy or CuPy): prepare data, train, sample, evaluate.",
        epilog="`gpt train` with no arguments trains a tokenizer and a small model on the Python "
               "standard library's own sources and prints samples. `gpt COMMAND --help` for each.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"gpt.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from bpe.files.lock import FolderBusy
    from gpt.training.checkpoint import CheckpointError
    from gpt.training.trainer import TrainingDiverged

    def one_line(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"gpt {args.command}: warning: {message}", file=sys.stderr)  # no Python source line

    try:
        with warnings.catch_warnings():
            warnings.showwarning = one_line
            return int(args.func(args) or 0)
    except TrainingDiverged as exc:
        print(f"gpt {args.command}: {exc}", file=sys.stderr)
        return 1
    except (CheckpointError, FileNotFoundError, FileExistsError, ValueError, FolderBusy) as exc:
        print(f"gpt {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a folder we may not write: the system's words, one line
        print(f"gpt {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError as exc:  # what no check foresaw (autograd.memory refuses most beforehand)
        print(f"gpt {args.command}: error: out of memory{': ' + str(exc) if str(exc) else ''}; try a smaller "
              "batch, model or sample", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"gpt {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
