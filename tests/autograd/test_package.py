"""The autograd package's namespace: what `from autograd import *` brings and what it leaves."""
from __future__ import annotations

import builtins
from inspect import ismodule

import autograd


def test_star_import_keeps_the_builtins():
    ns: dict = {}
    exec("from autograd import *", ns)
    assert "Tensor" in ns and "softmax" in ns and "cross_entropy" in ns
    exec("result = (sum([1, 2, 3]), max(1, 5), min(4, 2), abs(-3), pow(2, 3))", ns)
    assert ns["result"] == (6, 5, 2, 3, 8)


def test_all_lists_every_public_function_except_the_builtin_names():
    public = {n for n, v in vars(autograd).items() if not n.startswith("_") and not ismodule(v)}
    shadowing = {n for n in public if hasattr(builtins, n)}
    assert shadowing == {"sum", "max", "min", "abs", "pow"}
    assert set(autograd.__all__) == (public - shadowing) | {"functional"}
    assert len(autograd.__all__) == len(set(autograd.__all__))
    assert all(callable(getattr(autograd, n)) for n in shadowing)   # still autograd.sum(x)
