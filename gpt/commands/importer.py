"""`gpt import --hf DIR --out RUN`: a Hugging Face model folder as a run folder of ours.

The run folder holds latest.safetensors (the weights, step 0, no optimizer state), config.json
and tokenizer.json (our format), so `gpt sample`, `gpt eval`, `gpt gradflow --run` and
`gpt train --init-from RUN` (fine-tuning) take it like any run. Import makes every check that
loading the run makes (the weights into the model, the written tokenizer read back by the same
loader), so a folder it writes always samples. (The module cannot be named `import`, a Python
keyword.)
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpt.commands.common import path_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import", help="a Hugging Face model folder (GPT-2, LLaMA, Mistral, Qwen2) as a run folder",
        description="Read a local Hugging Face model folder (config.json, model.safetensors or shards, "
                    "tokenizer.json) and write a run folder that gpt sample / eval / gradflow and "
                    "gpt train --init-from accept. Nothing is downloaded.")
    p.add_argument("--hf", required=True, type=path_arg, metavar="DIR", help="the Hugging Face model folder")
    p.add_argument("--out", required=True, type=path_arg, metavar="RUN", help="the run folder to write")
    p.add_argument("--block-size", type=int, default=None, metavar="T",
                   help="a shorter context than the checkpoint's (default: its max_position_embeddings)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt.data import load_tokenizer as load_ours
    from gpt.pretrained import build
    from gpt.pretrained.folder import load, load_tokenizer
    from gpt.training.checkpoint import LATEST
    from gpt.training.run_folder import RunFolder

    t0 = time.perf_counter()
    cfg, state = load(args.hf, args.block_size)
    tokenizer = load_tokenizer(args.hf, cfg.vocab_size)
    state = build(cfg, state, where=args.hf).state_dict()  # every check `gpt sample` makes of the weights
    folder = RunFolder(args.out)
    if (folder / LATEST).exists():
        raise FileExistsError(f"{args.out} already holds a checkpoint; choose another --out")
    folder.open()
    try:
        source = str(Path(args.hf).resolve())
        # config.json first: a folder holding a run's other files without it is refused (RunFolder)
        folder.write_config({"model": cfg.to_dict(), "imported_from": source})
        text = None
        if tokenizer is not None:
            path = folder / "tokenizer.json"
            tokenizer.save(path)
            try:  # read back by the loader `gpt sample` uses, so a folder we write always samples
                load_ours(path)
            except (ValueError, KeyError, TypeError):
                path.unlink()
                raise
            text = path.read_text(encoding="utf-8")
        meta = {"step": 0, "config": cfg.to_dict(), "tokenizer": text, "vocab_size": cfg.vocab_size,
                "data_dir": None, "imported_from": source}
        folder.save_checkpoint(LATEST, state, None, meta)
    finally:
        folder.close()
    print(f"imported {args.hf} ({cfg.count_params():,} parameters, {cfg.n_layer} layers, d={cfg.n_embd}, "
          f"T={cfg.block_size}, vocab {cfg.vocab_size}{', no tokenizer' if tokenizer is None else ''}) "
          f"into {args.out} in {time.perf_counter() - t0:.1f}s")
    if tokenizer is None:
        print(f"{args.hf} holds no tokenizer (tokenizer.json, or vocab.json + merges.txt), so prompts and "
              f"samples cannot be text: copy the model's tokenizer.json into {args.hf} and import again")
    return 0
