"""`gpt sample`: text from a trained run, streamed to the terminal as it is generated.

    gpt sample --run runs/default --prompt "def main(" -n 3 --max-new-tokens 200 \
               --top-p 0.95 --seed 0     # sampling flags: SamplingConfig's fields

The tokenizer is the one saved in the run's checkpoint. Generation of a sample ends at the
end-of-text token (when the tokenizer has one), at a --stop string, or after --max-new-tokens.
"""
from __future__ import annotations

import argparse
import sys
import time

from gpt.commands.common import add_model_source, load_run_model
from gpt.inference.sample import from_options, options as sampling_settings
from gpt.training.config import flag


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sample", help="generate text from a trained run (streams to the terminal)",
        description="Generate text from a run folder or checkpoint with a KV-cached sampler: "
                    "temperature, top-k, top-p, repetition penalty, stop strings, beam search.",
        epilog="Temperature 0 is greedy. Samples are separated by a line of dashes. "
               "Timing and KV-cache memory go to stderr with --stats.")
    add_model_source(p)
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", default=None,
                        help="text to continue (default: the end-of-text token, else a newline)")
    prompt.add_argument("--prompt-file", metavar="FILE", help="read the prompt from a file (UTF-8)")
    p.add_argument("-n", "--num-samples", type=int, default=1, metavar="N", help="samples to draw (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=200, metavar="N", help="tokens per sample (default 200)")
    for s in sampling_settings():  # SamplingConfig's fields, with TEXT_SAMPLING's defaults
        shown = "" if s.default is None else f" (default {s.default})"
        p.add_argument(flag(s.name), type=s.type, default=s.default,
                       metavar=s.name.upper(), help=s.help + shown)
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end a sample at this string (repeatable; the string is not printed)")
    p.add_argument("--no-eot-stop", action="store_true", help="do not stop at the end-of-text token")
    p.add_argument("--beams", type=int, default=1, metavar="K",
                   help="beam search with K beams (deterministic; printed when complete)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: fresh entropy)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole context every step (slow)")
    p.add_argument("--stats", action="store_true", help="print tokens/s and KV-cache memory to stderr")
    p.set_defaults(func=run)


def _prompt_text(args, tok) -> str:
    from gpt.data.folder import EOT, eot_id

    if args.prompt_file:
        from gpt.files import read_text_file

        return read_text_file(args.prompt_file, "--prompt-file")
    if args.prompt is not None:
        return args.prompt
    return EOT if eot_id(tok) is not None else "\n"


def _check(args):
    """The sampling options as one checked value; a clear error for any bad argument."""
    if args.num_samples < 1:
        raise ValueError(f"-n/--num-samples must be >= 1, got {args.num_samples}")
    if args.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if args.beams < 1:
        raise ValueError(f"--beams must be >= 1, got {args.beams}")
    if args.beams > 1 and args.num_samples > args.beams:
        raise ValueError(f"-n {args.num_samples} exceeds --beams {args.beams} (beam search returns its best beams)")
    return from_options({s.name: getattr(args, s.name) for s in sampling_settings()})


def run(args: argparse.Namespace) -> int:
    from gpt.data.folder import EOT, eot_id
    from gpt.inference import sample as S
    from gpt.inference.generate import generate, stream_text

    sampling = _check(args)
    model, tok, meta = load_run_model(args)
    if tok is None:
        raise ValueError(f"checkpoint {meta.get('path')!r} holds no tokenizer, so its ids cannot be shown as text")
    text = _prompt_text(args, tok)
    ids = tok.encode(text, allowed_special="all")
    if not ids:
        raise ValueError("the prompt encodes to no tokens: give at least one character")
    stop: list = list(args.stop)
    eot = eot_id(tok)
    if eot is not None and not args.no_eot_stop:
        stop.append(eot)
    out = sys.stdout
    shown_prompt = "" if text == EOT else text
    t0, n_tokens, cache_nbytes = time.perf_counter(), 0, 0
    if args.beams > 1:
        rows = generate(model, [ids], args.max_new_tokens, sampling=sampling, stop=stop,
                        use_cache=not args.no_cache, num_samples=args.num_samples, num_beams=args.beams,
                        tokenizer=tok)
        for i, row in enumerate(rows):
            new = [t for t in row[len(ids):].tolist() if t >= 0]
            n_tokens += len(new)
            state = S.make_stop_state(stop, tok)
            for t in new:
                if state.push(t):
                    break
            shown = state.visible_text
            out.write(("" if i == 0 else "\n" + "-" * 40 + "\n") + shown_prompt + shown + "\n")
    else:
        gen = S.make_generator(args.seed)
        stats: dict = {}
        for i in range(args.num_samples):
            if i:
                out.write("\n" + "-" * 40 + "\n")
            pieces = stream_text(model, tok, ids, args.max_new_tokens, stop=stop, generator=gen,
                                 sampling=sampling, use_cache=not args.no_cache, stats=stats)
            # the first piece before the prompt: a refusal (memory, a stop string) is then a line of its own
            out.write(shown_prompt + next(pieces, ""))
            out.flush()
            for piece in pieces:
                out.write(piece)
                out.flush()
            n_tokens += stats.pop("tokens", 0)
            cache_nbytes = max(cache_nbytes, stats.get("cache_nbytes", 0))
        out.write("\n")
    out.flush()
    if args.stats:
        dt = time.perf_counter() - t0
        cfg = model.config
        per_token = cfg.kv_cache_numbers_per_token()
        print(f"{n_tokens} tokens in {dt:.2f} s ({n_tokens / max(dt, 1e-9):.1f} tokens/s); KV cache "
              f"{per_token:,} numbers per token (2 x {cfg.n_layer} layers x {cfg.kv_heads} kv heads x "
              f"{cfg.head_dim}), "
              f"{cache_nbytes / 2**20:.2f} MiB preallocated (block_size={cfg.block_size})",
              file=sys.stderr)
    return 0
