"""Subcommands of `gpt`: each module exposes `register(subparsers)` (listed in gpt/cli.py)."""
