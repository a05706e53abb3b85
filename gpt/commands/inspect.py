"""`gpt inspect`: look inside a model, or run the induction-head study.

    gpt inspect --run runs/default --prompt "def main(" --out page.html [--png heads.png]
    gpt inspect --hf gpt2_folder --prompt "When Mary and John went" --out page.html
    gpt inspect --run runs/vit --image 3 --out page.html          (a ViT run: test image 3)
    gpt inspect induction [--steps 1000] [--json out.json]

The page is one self-contained HTML file (gpt/inspect/page.py): attention heat maps of every
layer and head over the prompt's tokens, the logit lens, the top direct-attribution heads. A ViT
run's page holds the heat maps over one test image's tokens (cls, p0, p1, ...) and its prediction.
`induction` trains a 2-layer attention-only model on repeated random tokens on the CPU and prints
the losses of both halves and the best previous-token and induction scores as it goes
(gpt/inspect/induction.py, docs/inspect.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

NAME = "inspect"
HELP = "look inside a model (attention, logit lens, attribution) as an HTML page; or the induction study"


def register(subparsers) -> argparse.ArgumentParser:
    from gpt.inspect.induction import InductionSpec
    from gpt.training.config import flag

    p = subparsers.add_parser(NAME, help=HELP, description=HELP,
                              epilog="`gpt inspect induction` needs no model: it trains its own.")
    p.add_argument("study", nargs="?", choices=["induction"], help="run the induction-head study instead of a page")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--run", metavar="DIR", help="a run folder (from gpt train or gpt import)")
    src.add_argument("--checkpoint", metavar="FILE", help="a checkpoint file")
    src.add_argument("--hf", metavar="FOLDER", help="a Hugging Face folder (GPT-2, LLaMA, Mistral, Qwen2, Phi-3)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", help="the text to inspect (encoded by the model's tokenizer)")
    prompt.add_argument("--ids", metavar="I,J,...", help="token ids instead of a prompt (a folder without a tokenizer)")
    p.add_argument("--image", metavar="K", type=int,
                   help="a ViT run: the test image to inspect (default 0)")
    p.add_argument("--out", metavar="PAGE.html",
                   help="where to write the page (the study: its model's, on a repeated row)")
    p.add_argument("--png", metavar="FILE.png", help="also every head's pattern as a PNG (needs matplotlib)")
    s = p.add_argument_group("the induction study")
    for f in dataclasses.fields(InductionSpec):
        s.add_argument(flag(f.name), type=type(f.default), default=f.default,
                       help=f"{f.metadata['help']} (default {f.default})")
    s.add_argument("--json", metavar="PATH", help="write the study's rows as JSON")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    if args.study == "induction":
        return run_induction(args)
    return run_page(args)


def run_induction(args) -> int:
    import numpy as np

    from gpt.inspect.analysis import induction_scores
    from gpt.inspect.induction import InductionSpec, ablations, run_study, table

    spec = InductionSpec(**{f.name: getattr(args, f.name) for f in dataclasses.fields(InductionSpec)})
    if spec.steps < 1 or spec.length < 2 or spec.eval_every < 1 or spec.batch_size < 1:
        raise ValueError("--steps, --eval-every and --batch-size must be positive and --length at least 2")
    print(f"2-layer attention-only GPT: n_embd={spec.n_embd} n_head={spec.n_head} pos={spec.pos} "
          f"vocab={spec.vocab_size}; rows of 2 x {spec.length} tokens, batch {spec.batch_size}, lr {spec.lr}",
          flush=True)
    model, rows = run_study(spec, progress=lambda r: print(
        f"step {r['step']:>5}  {r['seconds']:>6.1f}s  repeated-half loss {r['loss_second']:.3f}  "
        f"induction {r['induction']:.3f}", file=sys.stderr, flush=True))
    print(table(rows))
    scores = induction_scores(model, spec.length, batch=16, seed=10_000 + spec.seed)
    lost = ablations(model, spec)
    print(f"\nper head (held-out rows)   {'previous-token':>14} {'induction':>9} {'copying':>8} "
          f"{'repeated-half loss, head zeroed':>31}")
    for i in range(2):
        for h in range(spec.n_head):
            print(f"L{i}H{h}{'':<21} {scores['previous_token'][i, h]:>14.3f} {scores['induction'][i, h]:>9.3f} "
                  f"{scores['copying'][i, h]:>8.3f} {lost[f'L{i}H{h}']:>31.3f}")
    print(f"no head zeroed{'':<45}{lost['none']:>31.3f}")
    if args.out:
        from bpe.files.atomic import atomic_write_text
        from gpt.inspect.analysis import repeated_tokens
        from gpt.inspect.page import inspect_page

        ids = repeated_tokens(spec.vocab_size, spec.length, 1, seed=30_000 + spec.seed)
        atomic_write_text(args.out, inspect_page(model, ids, [str(i) for i in ids[0]], "the induction study's model"))
        print(f"wrote {args.out}")
    if args.json:
        from bpe.files.atomic import atomic_write_text

        heads = {k: v.tolist() for k, v in scores.items() if isinstance(v, np.ndarray)}
        atomic_write_text(args.json, json.dumps({"spec": dataclasses.asdict(spec), "rows": rows, "heads": heads,
                                                 "ablations": lost}, indent=1))
        print(f"wrote {args.json}")
    return 0


def _load(args):
    """(model in eval mode, tokenizer or None) from --run / --checkpoint / --hf."""
    if args.hf:
        from gpt.model.gpt import GPT
        from gpt.pretrained import load_tokenizer

        model = GPT.from_pretrained(args.hf, device=args.device)
        return model, load_tokenizer(args.hf, model.config.vocab_size)
    if not (args.run or args.checkpoint):
        raise ValueError("give a model: --run DIR, --checkpoint FILE or --hf FOLDER "
                         "(or the study: gpt inspect induction)")
    from gpt.commands.common import load_run_model

    model, tok, _ = load_run_model(args)
    return model, tok


def _ids(args, model, tok) -> list[int]:
    if args.ids:
        try:
            ids = [int(x) for x in args.ids.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--ids takes comma-separated integers, got {args.ids!r}") from None
    elif args.prompt is not None:
        if tok is None:
            raise ValueError("the model has no tokenizer to encode --prompt: give --ids instead")
        ids = tok.encode(args.prompt, allowed_special="all")
    else:
        raise ValueError("give --prompt TEXT (or --ids I,J,...)")
    if not 0 < len(ids) <= model.config.block_size:
        raise ValueError(f"the prompt has {len(ids)} tokens; the model takes 1 to {model.config.block_size}")
    bad = [i for i in ids if not 0 <= i < model.config.vocab_size]
    if bad:
        raise ValueError(f"--ids: {bad[0]} is not a token id of this model (0..{model.config.vocab_size - 1})")
    return ids


def run_page(args) -> int:
    import numpy as np

    from bpe.files.atomic import atomic_write_text
    from gpt.inspect.page import attention_png, inspect_page

    if not args.out:
        raise ValueError("give --out PAGE.html (where to write the page)")
    for path in (args.out, args.png):
        if path and not Path(path).resolve().parent.is_dir():
            raise ValueError(f"folder {Path(path).parent} for {path} does not exist")
    if args.png:
        from gpt.plotting import figure_format

        figure_format(args.png, "--png")  # refused now, not after the page is written
    if (args.run or args.checkpoint) and _is_vit(args.run or args.checkpoint):
        return run_vit_page(args)
    if args.image is not None:
        raise ValueError("--image picks a ViT run's test image; give --prompt or --ids for a GPT")
    model, tok = _load(args)
    model.eval()
    ids = _ids(args, model, tok)
    token_of = (lambda i: tok.decode([i])) if tok is not None else str
    tokens = [token_of(i) for i in ids]
    title = f"gpt inspect: {args.hf or args.run or args.checkpoint}"
    page = inspect_page(model, np.array([ids]), tokens, title, token_of)
    atomic_write_text(args.out, page)
    print(f"wrote {args.out} ({len(page):,} bytes: {model.config.n_layer} layers x {model.config.n_head} heads "
          f"over {len(ids)} tokens)")
    if args.png:
        print(attention_png(model, np.array([ids]), args.png, tokens))
    return 0


def _is_vit(path: str) -> bool:
    from gpt.vision.train import is_vit_checkpoint

    return is_vit_checkpoint(path)


def run_vit_page(args) -> int:
    """The page of one of a ViT run's test images (--image K)."""
    from bpe.files.atomic import atomic_write_text
    from gpt.commands.vit import _run_images
    from gpt.inspect.page import attention_png, vit_page, vit_tokens
    from gpt.vision.train import load_vit

    if args.prompt is not None or args.ids:
        raise ValueError("a ViT run reads images, not text: give --image K (a test image) instead of --prompt/--ids")
    model, meta = load_vit(args.run or args.checkpoint)
    if args.device != "cpu":
        model.to(args.device)
    images = _run_images(meta)
    k = 0 if args.image is None else args.image
    if not 0 <= k < len(images.test_y):
        raise ValueError(f"--image {k}: the run's test split holds images 0 to {len(images.test_y) - 1}")
    image, label = images.test_x[k], int(images.test_y[k])
    title = f"gpt inspect: {args.run or args.checkpoint}, test image {k}"
    page = vit_page(model, image, title, label)
    atomic_write_text(args.out, page)
    cfg = model.config
    print(f"wrote {args.out} ({len(page):,} bytes: {cfg.num_layers} layers x {cfg.nhead} heads "
          f"over {1 + cfg.num_patches} tokens, the class token and {cfg.num_patches} patches)")
    if args.png:
        print(attention_png(model, image[None], args.png, vit_tokens(cfg)))
    return 0
