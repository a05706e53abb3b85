"""`gpt export --run RUN --hf DIR | --gguf FILE`: a run's model for other tools.

--hf writes a folder that transformers' AutoModelForCausalLM / AutoTokenizer load (and
`gpt import` reads back); --gguf writes a GGUF v3 file for llama.cpp (gpt.pretrained.gguf). Either
is written as a unit under a lock (gpt.pretrained.output): a second export to the same place is
refused naming the first, a killed one leaves the old output or the new, and a folder then holds
only the files this export wrote.
"""
from __future__ import annotations

import argparse

from gpt.commands.common import add_model_source, load_run_model, path_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="a run's model as a Hugging Face folder or a GGUF file",
        description="Write a trained (or imported) run's model and tokenizer as a Hugging Face model "
                    "folder (GPT2LMHeadModel, LlamaForCausalLM or Qwen2ForCausalLM, whichever computes "
                    "the same) or as a GGUF v3 file (architectures gpt2, llama, qwen2).")
    add_model_source(p)
    dest = p.add_mutually_exclusive_group(required=True)
    dest.add_argument("--hf", type=path_arg, metavar="DIR", help="the Hugging Face folder to write")
    dest.add_argument("--gguf", type=path_arg, metavar="FILE", help="the GGUF file to write")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32",
                   help="stored weights: f32, bf16 (--hf) or f16 (--gguf) (default f32)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpt.pretrained import save_gguf, save_pretrained

    if args.dtype == "bf16" and args.gguf or args.dtype == "f16" and args.hf:
        raise ValueError(f"--dtype {args.dtype} is for {'--hf' if args.dtype == 'bf16' else '--gguf'} only")
    args.device = "cpu"
    model, tokenizer, _ = load_run_model(args)
    if args.hf is not None:
        folder = save_pretrained(model, args.hf, tokenizer=tokenizer, bf16=args.dtype == "bf16")
        written = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        print(f"wrote {args.hf} ({', '.join(written)})")
    else:
        save_gguf(model, args.gguf, tokenizer=tokenizer, dtype=args.dtype)
        print(f"wrote {args.gguf} (GGUF v3, {args.dtype})")
    return 0
