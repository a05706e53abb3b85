"""`gpt gradflow`: measure how gradients flow through residual paths, across depths and variants.

    gpt gradflow --depths 2,4,8 --variants pre,post,pre-nores --seeds 3 --steps 0 \
                 --json out.json --plot out.png
    gpt gradflow --family seq2seq --variants pre,post --depths 2,6     # the 2017 encoder-decoder
    gpt gradflow --run runs/shakespeare --text input.txt               # a trained model on a text

prints a table (mean ± std over seeds per variant and depth), a table of Jacobian spectra,
and writes JSON and PNG plots when asked (the plot needs matplotlib; without it a message
says so and everything else is still produced).
"""
from __future__ import annotations

import argparse
import math
import sys

from gpt.gradflow.families import FAMILIES
from gpt.model.config import MLP_CHOICES, POS_CHOICES

NAME = "gradflow"
HELP = "study gradient norms and Jacobians through residual paths (depth x variant x seed)"

EPILOG = """\
variants: comma-separated, each a dash-joined set of words overriding the defaults
  (pre-norm, layernorm, residual): pre | post, ln | rms, res | nores.
  e.g. "pre,post,pre-nores,post-nores,pre-rms"; kvN / mqa set the key/value heads
  (grouped-query / multi-query attention), e.g. "pre,pre-kv2,pre-mqa".

families: gpt (default); seq2seq, the 2017 encoder-decoder on generated number translation
  (rows per stack: encoder, decoder; depth L = L + L layers); encoder, the encoder-only model
  on masked tokens; vit, the Vision Transformer on procedural 8x8 digits (patch 2, 16 patches +
  a class token). They take only pre / post (their layers always have residuals, LayerNorm).

--run DIR (or --checkpoint FILE) with --text FILE measures that trained or imported GPT once on
  the text, encoded by the run's tokenizer (--batch-size windows of --block-size tokens).

columns: |dL/dx_0| gradient norm at the bottom block's input; |dL/dx_L| at the top of the
  stack; in/out their ratio; per-block the fitted per-block gain going down; id-share the mean
  fraction of the gradient arriving through the identity path (docs/gradflow.md defines it);
  rms x_L the RMS of the residual stream at the top.
"""
# The tables' columns are defined and read in the repository's docs/gradflow.md.
READING = ("\nwhat each column measures and how to read these tables: docs/gradflow.md "
           "(and gpt gradflow --help)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep")
    g.add_argument("--depths", default="2,4,8,16", help="comma-separated numbers of blocks (default 2,4,8,16)")
    g.add_argument("--variants", default=None,
                   help="comma-separated variants (default pre,post,pre-nores,post-nores; pre,post for a "
                        "--family other than gpt, which has no block without its residual)")
    g.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per point (default 3)")
    g.add_argument("--steps", type=int, default=0,
                   help="AdamW steps on the corpus before measuring (default 0: at initialisation)")
    g.add_argument("--lr", type=float, default=1e-3, help="learning rate for --steps (default 1e-3)")
    m = p.add_argument_group("model (GPT vocabulary: the 256 byte values)")
    m.add_argument("--family", default="gpt", choices=FAMILIES,
                   help="gpt, seq2seq (2017 encoder-decoder), encoder (encoder-only) or vit (Vision "
                        "Transformer) (default gpt)")
    m.add_argument("--n-embd", type=int, default=64, help="width C (default 64)")
    m.add_argument("--n-head", type=int, default=4, help="attention heads (default 4)")
    m.add_argument("--block-size", type=int, default=32, help="tokens per sequence T (default 32)")
    m.add_argument("--batch-size", type=int, default=8, help="sequences per batch B (default 8)")
    m.add_argument("--pos", default="learned", choices=POS_CHOICES)
    m.add_argument("--mlp", default="gelu", choices=MLP_CHOICES)
    m.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    m.add_argument("--corpus", nargs="+", default=[], metavar="PATH",
                   help="text files/folders/globs read as bytes (default: the Python stdlib sources)")
    t = p.add_argument_group("a trained model instead of a sweep")
    src = t.add_mutually_exclusive_group()
    src.add_argument("--run", metavar="DIR", help="a run folder (from gpt train or gpt import)")
    src.add_argument("--checkpoint", metavar="FILE", help="a checkpoint file")
    t.add_argument("--text", metavar="FILE", help="UTF-8 text to measure the model on (with --run)")
    j = p.add_argument_group("Jacobians")
    j.add_argument("--no-jacobian", action="store_true", help="skip the Jacobian spectra")
    j.add_argument("--jacobian-depth", type=int, default=12, help="blocks in the Jacobian study (default 12)")
    j.add_argument("--jacobian-width", type=int, default=16, help="width of the Jacobian study (default 16)")
    j.add_argument("--jacobian-tokens", type=int, default=4, help="tokens of the GPT Jacobian (default 4)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write every number as JSON")
    o.add_argument("--plot", metavar="PATH",
                   help="write a PNG of gradient norms (and PATH-spectra.png of the Jacobians)")
    o.add_argument("--layers", action="store_true", help="also print per-block tables (deepest depth, first seed)")
    o.add_argument("--quiet", action="store_true", help="no progress lines")


def build_parser(prog: str = "gpt gradflow") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=HELP, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return p


def register(subparsers) -> argparse.ArgumentParser:
    """Register `gradflow` on an argparse subparsers object; the handler is in `func`."""
    p = subparsers.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _spec(args):
    from gpt.gradflow.sweep import SweepSpec, check_jacobian
    from gpt.gradflow.variants import parse_int_list, parse_variants

    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {args.seeds}")
    for name in ("n_embd", "n_head", "block_size", "batch_size") + (
            () if args.no_jacobian else ("jacobian_depth", "jacobian_width", "jacobian_tokens")):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.steps < 0 or not 0 < args.lr < math.inf:
        raise ValueError(f"--steps must be >= 0 and --lr a finite number > 0, got {args.steps} and {args.lr}")
    variants = args.variants or ("pre,post,pre-nores,post-nores" if args.family == "gpt" else "pre,post")
    spec = SweepSpec(depths=parse_int_list(args.depths, "--depths"), variants=parse_variants(variants),
                     seeds=list(range(args.seeds)), steps=args.steps, lr=args.lr, n_embd=args.n_embd,
                     n_head=args.n_head, block_size=args.block_size, batch_size=args.batch_size,
                     pos=args.pos, mlp=args.mlp, device=args.device, corpus=list(args.corpus),
                     family=args.family)
    if not args.no_jacobian:  # refused now, not after minutes of sweep
        check_jacobian(spec, args.jacobian_width, args.jacobian_tokens)
    return spec


def _fail(message) -> int:
    print(f"gpt gradflow: error: {message}", file=sys.stderr)
    return 2


def _check_outputs(args) -> str | None:
    """Why --json / --plot cannot be written (a missing folder, a folder in the way), before minutes
    of work; or None."""
    from pathlib import Path

    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            folder = Path(path).parent
            if str(folder) and not folder.is_dir():
                return f"folder {folder} for {path} does not exist"
            if Path(path).is_dir():
                return f"{option} {path} is a folder: give a file name"
    if args.plot:
        from gpt.plotting import figure_format

        try:
            figure_format(args.plot, "--plot")
        except ValueError as e:
            return str(e)
    return None


def run(args) -> int:
    from gpt.gradflow import report
    from gpt.gradflow.sweep import run_sweep

    if args.run or args.checkpoint:
        return run_trained(args)
    if args.text:
        return _fail("--text measures a trained model: give --run DIR (or --checkpoint FILE) too")
    try:
        spec = _spec(args)
        spec.check()
        from autograd.backend import module_for_device

        module_for_device(spec.device)  # an unusable --device fails now, not after the first model
    except (ValueError, RuntimeError) as exc:
        return _fail(exc)
    if spec.device == "cpu":  # threaded BLAS on a busy core made each step many times slower
        from autograd.threads import apply_threads

        apply_threads()
    if _check_outputs(args):
        return _fail(_check_outputs(args))
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        result = run_sweep(spec, progress=progress)
    except (OSError, ValueError) as exc:  # a missing corpus file, a corpus too short, ...
        return _fail(exc)
    what = "at initialisation" if spec.steps == 0 else f"after {spec.steps} AdamW steps"
    shape = (f"GPT C={spec.n_embd} heads={spec.n_head} T={spec.block_size}" if spec.family == "gpt" else
             f"{spec.family} d_model={spec.n_embd} heads={spec.n_head} "
             f"({'procedural digit images' if spec.family == 'vit' else 'generated number data'})")
    result["title"] = f"{shape} B={spec.batch_size}, {what}, {len(spec.seeds)} seeds"
    print(f"\ngradient flow, {result['title']}")
    print(report.sweep_table(result["summary"]))
    if args.layers:
        deepest = max(spec.depths)
        for run_ in result["runs"]:
            if run_["depth"] == deepest and run_["seed"] == spec.seeds[0] and run_["layers"]:
                print(f"\n{report.label(run_)}, depth {deepest}, seed {run_['seed']}")
                print(report.layer_table(run_))
    if not args.no_jacobian:
        if args.json:  # the sweep's numbers are kept if the Jacobian study fails or is interrupted
            report.write_json(args.json, result)
        _jacobians(args, spec, result)
    _write(args, result)
    print(READING)
    return 0


def _jacobians(args, spec, result: dict) -> None:
    """The Jacobian spectra: toy blocks and a small GPT, or the family's stacks; printed and kept."""
    from gpt.gradflow import report
    from gpt.gradflow.jacobian import jacobian_study
    from gpt.gradflow.sweep import gpt_jacobian_study, stack_jacobian_study

    depth, width, tokens = args.jacobian_depth, args.jacobian_width, args.jacobian_tokens
    state = "at init" if spec.steps == 0 else f"after {spec.steps} steps"
    if spec.family == "gpt":
        result["jacobian"] = jacobian_study(variants=spec.variants, depth=depth, width=width, seeds=spec.seeds[:1])
        result["jacobian"] += gpt_jacobian_study(spec, depth=depth, width=width, tokens=tokens)
        what = f"toy blocks: gain 1/sqrt(depth); gpt: {'GPT-2 init' if spec.steps == 0 else state}"
    else:
        result["jacobian"] = stack_jacobian_study(spec, depth=depth, width=width, tokens=tokens)
        fixed = "memory and masks fixed" if spec.family == "seq2seq" else "masks fixed"
        what = f"{spec.family}: each layer with respect to its stream, {fixed}, {state}"
    print(f"\nJacobian spectra, depth {depth}, width {width} ({what}, {tokens} tokens; seed {spec.seeds[0]})")
    print(report.spectra_table(result["jacobian"]))


def _write(args, result: dict) -> None:
    from gpt.gradflow import report

    if args.json:
        report.write_json(args.json, result)
        print(f"\nwrote {args.json}")
    if args.plot:
        said = report.plot_gradients(result, args.plot)
        print(said)
        if result.get("jacobian") and said != report.MISSING_MATPLOTLIB:
            print(report.plot_spectra(result["jacobian"], report.spectra_path(args.plot)))


def run_trained(args) -> int:
    """--run/--checkpoint with --text: one measurement of that model on the text (gradflow/trained.py)."""
    from gpt.commands.common import load_run_model
    from gpt.gradflow import report
    from gpt.gradflow.trained import measure_text, read_text
    from gpt.training.checkpoint import CheckpointError

    if not args.text:
        return _fail("--run measures the model on a text: give --text FILE")
    if args.family != "gpt":
        return _fail(f"--run reads a GPT run folder; --family {args.family} models are not loaded from runs here")
    if _check_outputs(args):
        return _fail(_check_outputs(args))
    try:
        text = read_text(args.text)
        model, tok, meta = load_run_model(args)
        result = measure_text(model, tok, text, args.batch_size, args.block_size, name=args.run or args.checkpoint)
    except (OSError, ValueError, CheckpointError) as exc:
        return _fail(exc)
    run_ = result["runs"][0]
    B, T = run_["batch"]
    result["title"] = f"{result['spec']['run']} on {args.text}: B={B} T={T} ({result['spec']['text_tokens']:,} tokens)"
    cfg = model.config
    print(f"\ngradient flow, {result['title']}")
    print(f"GPT n_layer={cfg.n_layer} n_head={cfg.n_head} n_kv_head={cfg.kv_heads} n_embd={cfg.n_embd} "
          f"pos={cfg.pos} norm={cfg.norm} mlp={cfg.mlp} prenorm={cfg.prenorm}")
    print(report.sweep_table(result["summary"]))
    print(f"\nper block, {run_['variant']}")
    print(report.layer_table(run_))
    _write(args, result)
    print(READING)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
