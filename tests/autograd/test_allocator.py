"""autograd.keep_freed_memory: freed large blocks are reused, not page-faulted in again."""
import sys

import numpy as np
import pytest

import autograd


def test_idempotent_and_boolean():
    first = autograd.keep_freed_memory()
    assert isinstance(first, bool)
    assert autograd.keep_freed_memory() is first


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_temporaries_reuse_memory():
    import resource

    if not autograd.keep_freed_memory():
        pytest.skip("no glibc mallopt here")

    def churn():
        for _ in range(5):  # a step: activations pile up (16 x 1 MiB), then are all freed
            saved = [np.ones((512, 512), np.float32) for _ in range(16)]
            del saved

    churn()  # the first round may grow the heap
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # Trimmed (or unmapped) and faulted in again each time, 5 x 16 MiB is ~20,000 4-KiB pages.
    assert faults < 2000, faults


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_training_loop_from_python_keeps_freed_memory_from_its_first_backward():
    """Not at import (a process that only imports the package keeps glibc's defaults), but from
    the first backward, as `gpt train` has it: a user's own loop gets the same allocator."""
    import subprocess

    code = ("import autograd, autograd.allocator as a, numpy as np\n"
            "before = a.freed_memory_kept()\n"
            "t = autograd.Tensor(np.ones(3), requires_grad=True)\n"
            "(t * t).sum().backward()\n"
            "print(before, a.freed_memory_kept())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
