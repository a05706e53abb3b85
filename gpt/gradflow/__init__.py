"""gpt.gradflow: how gradients flow through residual paths, pre-norm and post-norm, and depth.

    measure.py    per-layer numbers of one forward/backward of a GPT (hooks on the stream)
    sweep.py      depth x variant x seed sweeps, at initialisation or after training steps
    jacobian.py   block Jacobians (analytic and by reverse mode) and their singular values
    report.py     terminal tables, JSON, PNG plots (matplotlib optional)
    variants.py   the variant names ("pre", "post-nores", "pre-rms", "pre-kv2", ...)
    stacks.py     the same numbers for nn.Transformer stacks (encoder, decoder layers), recorded from outside
    families.py   the encoder-decoder and encoder-only models, their data and losses, for sweeps
    trained.py    one trained GPT from a run folder, measured on a given text

The command line is `gpt gradflow` (gpt/commands/gradflow.py); docs/gradflow.md is the study.
"""
from gpt.gradflow.jacobian import jacobian_study, stack_spectra  # noqa: F401
from gpt.gradflow.measure import measure, summarize_run, traced_backward  # noqa: F401
from gpt.gradflow.sweep import SweepSpec, run_sweep  # noqa: F401
from gpt.gradflow.variants import Variant, parse_variants  # noqa: F401
