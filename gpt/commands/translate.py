"""`gpt translate`: the 2017 encoder-decoder and an encoder-only model on generated number data.

    gpt translate train   [--out runs/translate]   digits <-> English words; held-out exact match
    gpt translate sample  --run runs/translate 342017 "forty two thousand"   [--beams 4]
    gpt translate encoder [--out runs/encoder]     masked tokens + true/false pairs; held-out accuracy
    gpt translate report  [--run runs/translate]   parameters by group, cross-attention and KV caches
"""
from __future__ import annotations

import argparse
from pathlib import Path


def _add_training_flags(p: argparse.ArgumentParser, out: str, steps: int, lr: float) -> None:
    p.add_argument("--out", default=out, help=f"run folder to write (default {out})")
    p.add_argument("--steps", type=int, default=steps, help=f"optimizer steps (default {steps})")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    p.add_argument("--lr", type=float, default=lr, help=f"peak learning rate (default {lr:g})")
    p.add_argument("--max-minutes", type=float, default=None, help="stop training after this many minutes")
    _add_model_flags(p)
    p.add_argument("--eval-examples", type=int, default=500, help="held-out numbers per direction (default 500)")
    p.add_argument("--seed", type=int, default=0)


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--d-model", type=int, default=64, help="model width (default 64)")
    p.add_argument("--nhead", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="encoder (and decoder) layers (default 2)")
    p.add_argument("--dim-feedforward", type=int, default=256, help="feed-forward width (default 256)")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout (default 0.1, the paper's)")
    p.add_argument("--activation", choices=("relu", "gelu"), default="relu", help="default relu (the paper's)")
    p.add_argument("--norm-first", action="store_true", help="pre-norm instead of the paper's post-norm")
    p.add_argument("--separate-embeddings", action="store_true", help="no shared source/target embedding")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "translate", help="the 2017 encoder-decoder (and an encoder-only model) on generated number data",
        description="Train and use the encoder-decoder Transformer of 'Attention Is All You Need' "
                    "(nn.Transformer, post-norm, ReLU, sinusoidal positions, shared embeddings tied to the "
                    "output layer) on numbers written in digits and in English words, in both directions, "
                    "and an encoder-only (BERT-shaped) model on the same data. No download: the data is "
                    "generated; numbers of the held-out split are never trained on.")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    t = sub.add_parser("train", help="train the translator; print held-out exact-match accuracy and examples")
    _add_training_flags(t, "runs/translate", 3000, 2e-3)
    t.set_defaults(func=run_train, task="translate")
    e = sub.add_parser("encoder", help="train the encoder-only model (masked tokens + pair classification)")
    _add_training_flags(e, "runs/encoder", 3000, 2e-3)
    e.set_defaults(func=run_train, task="encoder")
    s = sub.add_parser("sample", help="translate numbers with a trained run (digits -> words, words -> digits)")
    s.add_argument("--run", required=True, metavar="DIR", help="a folder written by `gpt translate train`")
    s.add_argument("inputs", nargs="*", help="numbers ('342017', '342,017') or words ('forty two'); "
                                             "none: a few held-out numbers both ways")
    s.add_argument("--beams", type=int, default=1, help="beam search width (default 1: greedy; deterministic)")
    s.add_argument("--temperature", type=float, default=0.0,
                   help="> 0 samples instead of greedy (not with --beams > 1)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=run_sample)
    r = sub.add_parser("report", help="parameters by group and the decoding caches (cross-attention k, v; "
                                      "self-attention KV) of a run, or of the model the flags describe")
    r.add_argument("--run", metavar="DIR", help="a folder written by `gpt translate train` or `encoder`")
    r.add_argument("--task", choices=("translate", "encoder"), default="translate",
                   help="without --run: the translator or the encoder-only model (default translate)")
    _add_model_flags(r)
    r.set_defaults(func=run_report)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _model_config(args):
    from gpt.seq2seq import data as D
    from gpt.seq2seq.model import Seq2SeqConfig

    return Seq2SeqConfig(vocab_size=len(D.VOCAB), d_model=args.d_model, nhead=args.nhead,
                         num_encoder_layers=args.layers, num_decoder_layers=args.layers,
                         dim_feedforward=args.dim_feedforward, dropout=args.dropout, activation=args.activation,
                         norm_first=args.norm_first, share_embeddings=not args.separate_embeddings,
                         pad_id=D.PAD)


def run_train(args: argparse.Namespace) -> int:
    from autograd.threads import apply_threads
    from gpt.seq2seq.train import TrainSettings, train_task

    if args.steps < 1 or args.batch_size < 1:
        raise ValueError(f"--steps and --batch-size must be >= 1, got {args.steps} and {args.batch_size}")
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                             warmup=min(200, max(1, args.steps // 10)), eval_examples=args.eval_examples,
                             max_minutes=args.max_minutes)
    apply_threads()  # as `gpt train` chooses: the free cores (or GPT_THREADS), OpenBLAS on one
    _, summary = train_task(args.task, _model_config(args), settings, Path(args.out))
    print(f"trained {summary['steps']} steps in {summary['train_seconds']:.0f} s, "
          f"{summary['parameters']:,} parameters; run folder {args.out}")
    if args.task == "translate":
        print(f"held-out exact match: digits->words {summary['to_words']:.1%}, "
              f"words->digits {summary['to_digits']:.1%} ({args.eval_examples} numbers each)")
        for src, got, ok in summary["examples"]:
            print(f"  {src:<48} -> {got}{'' if ok else '   (wrong)'}")
    else:
        print(f"held-out accuracy: masked tokens {summary['masked_token_accuracy']:.1%}, "
              f"true/false pairs {summary['pair_accuracy']:.1%}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from gpt.seq2seq.model import report
    from gpt.seq2seq.train import TASKS, load_run

    model = load_run(args.run) if args.run else TASKS[args.task](_model_config(args))
    print(report(model))
    return 0


def _check_decoding(args: argparse.Namespace) -> None:
    """--beams and --temperature, refused by name before the model loads (as `gpt sample` does)."""
    if args.beams < 1:
        raise ValueError(f"--beams must be >= 1, got {args.beams}")
    if args.beams > 1 and args.temperature > 0:  # beam search never samples: the temperature would do nothing
        raise ValueError(f"--temperature {args.temperature:g} samples, --beams {args.beams} searches "
                         "deterministically: give one of them")


def run_sample(args: argparse.Namespace) -> int:
    import numpy as np

    from gpt.inference.sample import SamplingConfig
    from gpt.seq2seq import data as D
    from gpt.seq2seq.decode import translate_ids
    from autograd.threads import apply_threads
    from gpt.seq2seq.train import load_run

    _check_decoding(args)
    model = load_run(args.run, task="translate")
    apply_threads()
    if args.inputs:
        sources = [D.parse_source(text)[1] for text in args.inputs]
    else:
        numbers = D.sample_numbers(np.random.default_rng(args.seed), 4, "held_out")
        sources = [D.translation_pair(int(n), d)[0] for d in D.DIRECTIONS for n in numbers]
    got = translate_ids(model, sources, 16, sampling=SamplingConfig(temperature=args.temperature),
                        seed=args.seed, num_beams=args.beams)
    for src, ids in zip(sources, got):
        print(f"{D.decode(src):<48} -> {D.decode(ids)}")
    return 0
