"""`gpt eval`: the loss of a trained run over a whole data split, every token predicted once.

    gpt eval --run runs/mine                          # the data folder it trained on, val split
    gpt eval --run runs/mine --data data/other --split train --max-tokens 1000000

Training evaluates a few fixed batches, so runs compared by that number differ by sampling
noise too. This reads the split in consecutive windows of the model's block size
(gpt.training.evaluate.evaluate_split), so two runs evaluated here differ only by their models.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

from gpt.commands.common import add_model_source, load_run_model


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "eval", help="loss of a trained run over every token of a data split",
        description="Mean cross-entropy of a run's model over every token of a data split (no "
                    "sampling noise), with its perplexity.",
        epilog="The data folder must hold ids of the run's own tokenizer; by default it is the "
               "folder the run trained on.")
    add_model_source(p)
    p.add_argument("--data", metavar="DIR", help="a data folder (default: the one the run trained on)")
    p.add_argument("--split", choices=("val", "train"), default="val", help="which split (default val)")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="only the first N tokens of the split (default: all)")
    p.add_argument("--batch-size", type=int, default=32, metavar="B", help="windows per forward (default 32)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a sentence")
    p.set_defaults(func=run)


_LOG_MAX = math.log(sys.float_info.max)  # the largest loss whose exp is a float


def perplexity(loss: float) -> float:
    """exp(loss); inf past a float's range (where math.exp raises OverflowError), nan for nan."""
    return math.inf if loss > _LOG_MAX else math.exp(loss)


def run(args: argparse.Namespace) -> int:
    from gpt.data import load_tokenizer, open_tokens, read_meta
    from gpt.data.folder import bits_per_byte, describe_tokenizer, same_ids, split_bytes
    from gpt.training.build import saved_data_dir
    from gpt.training.evaluate import evaluate_split

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_tokens is not None and args.max_tokens < 2:
        raise ValueError(f"--max-tokens must be >= 2, got {args.max_tokens}")
    from gpt.vision.train import is_vit_checkpoint

    if is_vit_checkpoint(args.run or args.checkpoint):  # an image classifier: its own images, accuracy
        from gpt.commands.vit import eval_run

        return eval_run(args)
    model, run_tok, meta = load_run_model(args)
    data_dir = args.data or saved_data_dir(meta)
    if not data_dir:
        raise ValueError(f"checkpoint {meta.get('path')!r} does not name its data folder: give --data DIR")
    data_meta = read_meta(data_dir)
    vocab = model.config.vocab_size
    if int(data_meta["vocab_size"]) > vocab:
        raise ValueError(f"data folder {data_dir!r} has a vocabulary of {data_meta['vocab_size']} ids, "
                         f"more than the model's {vocab}")
    path = data_meta.get("tokenizer_path")
    data_tok = load_tokenizer(path) if path else None
    if not same_ids(run_tok, data_tok):
        raise ValueError(f"data folder {data_dir!r} was written by another tokenizer than the run's: "
                         f"{describe_tokenizer(data_tok, path)}, the run's is {describe_tokenizer(run_tok)}")
    tokens = open_tokens(data_dir, args.split, data_meta)
    if args.max_tokens is not None:  # a prefix: its bytes are counted, not read from meta.json
        tokens = tokens[:args.max_tokens]
    t0 = time.perf_counter()
    loss = evaluate_split(model, tokens, model.config.block_size, batch_size=args.batch_size)
    n_bytes = split_bytes(data_meta if args.max_tokens is None else {"eot_id": data_meta.get("eot_id")},
                          args.split, tokens, data_tok or run_tok)
    result = {"split": args.split, "loss": loss, "perplexity": perplexity(loss),
              "bits_per_byte": bits_per_byte(loss, len(tokens), n_bytes), "tokens": len(tokens) - 1,
              "data": str(data_dir), "checkpoint": meta.get("path"), "seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(result))
    else:
        bpb = "" if result["bits_per_byte"] is None else f", {result['bits_per_byte']:.3f} bits per byte"
        print(f"{args.split} loss {loss:.4f} (perplexity {result['perplexity']:.2f}{bpb}) over "
              f"{result['tokens']:,} tokens of {data_dir} in {result['seconds']:.1f} s")
    return 0
