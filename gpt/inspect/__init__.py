"""Look inside a GPT: named hook points with a cache (hooks.py), analyses over a cache
(analysis.py), the induction-head study (induction.py) and a self-contained HTML page (page.py)."""
from gpt.inspect.hooks import hook_names, run_with_cache, run_with_hooks

__all__ = ["hook_names", "run_with_cache", "run_with_hooks"]
