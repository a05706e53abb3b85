"""Graph semantics: accumulation, shared subexpressions, deep chains, freed graphs, hooks,
retain_grad, no_grad, memory release, and clear errors for bad calls."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import autograd
from autograd import Tensor, concat, matmul, no_grad


def leaf(values):
    return Tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


def test_shared_subexpression_a_times_a_plus_a():
    a = leaf([1.0, -2.0, 3.0])
    (a * a + a).sum().backward()
    np.testing.assert_allclose(a.grad, 2 * a.data + 1)


def test_diamond_sums_both_paths():
    a = leaf([0.5, 2.0])
    b = a * 2          # shared by both branches
    c = b + 1
    d = b * 3
    (c * d).sum().backward()
    # e = (2a + 1)(6a) = 12a^2 + 6a -> de/da = 24a + 6
    np.testing.assert_allclose(a.grad, 24 * a.data + 6)


def test_chain_of_100000_ops_needs_no_recursion():
    x = leaf([1.0])
    y = x
    for _ in range(100_000):
        y = y + 1.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [1.0])
    np.testing.assert_allclose(y.data, [100_001.0])


def test_gradients_accumulate_across_backward_calls_and_zero_grad_resets():
    x = leaf([1.0, 2.0])
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad, [6.0, 6.0])
    x.zero_grad()
    assert x.grad is None


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.copy()
    y.backward()
    np.testing.assert_allclose(x.grad, 2 * first)


def test_second_backward_through_a_freed_graph_raises_clearly():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()


def test_no_grad_builds_no_graph():
    x = leaf([1.0])
    with no_grad():
        y = x * 2 + 1
        assert not autograd.is_grad_enabled()
    assert autograd.is_grad_enabled()
    assert not y.requires_grad and y.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_detach_cuts_the_graph():
    x = leaf([2.0])
    y = x * x
    z = y.detach() * x + y
    z.backward()
    np.testing.assert_allclose(x.grad, [4.0 + 4.0])  # d(y0 * x)/dx + d(x^2)/dx


def test_hook_on_a_non_leaf_replaces_its_gradient():
    x = leaf([1.0, 2.0])
    h = x * 3
    seen = []
    h.register_hook(lambda g: seen.append(g.copy()) or g * 0 + 10)
    (h * h).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * h.data)
    np.testing.assert_allclose(x.grad, [30.0, 30.0])


def test_hook_on_a_leaf_sees_its_whole_gradient_once():
    x = leaf([1.0, 2.0])
    calls = []
    x.register_hook(lambda g: calls.append(g.copy()))
    (x * 2 + x * 5).sum().backward()
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0], [7.0, 7.0])


def test_hook_handle_removes_the_hook():
    x = leaf([1.0])
    handle = x.register_hook(lambda g: g * 100)
    handle.remove()
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad, [2.0])


def test_retain_grad_keeps_the_gradient_of_a_non_leaf():
    x = leaf([1.0, -1.0])
    h = x * 2
    h.retain_grad()
    other = x * 5
    (h * h + other).sum().backward()
    np.testing.assert_allclose(h.grad, 2 * h.data)
    assert other.grad is None


def test_leaf_gradients_never_share_a_buffer():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()
    a.grad *= 10  # an in-place update (e.g. clipping) of one gradient
    np.testing.assert_allclose(b.grad, [1.0, 1.0])
    seed = np.ones(2)
    c = leaf([1.0, 2.0])
    (c * 1.0).backward(seed)
    c.grad += 1
    np.testing.assert_allclose(seed, [1.0, 1.0])


def test_saved_intermediates_are_released_after_backward():
    x = Tensor(np.random.default_rng(0).standard_normal(1000), requires_grad=True)
    h = x.exp()                 # Exp saves its output
    ref = weakref.ref(h.data)
    loss = (h * x).sum()        # Mul saves both operands
    del h
    gc.collect()
    assert ref() is not None    # still needed by the graph
    loss.backward()
    gc.collect()
    assert ref() is None


def test_retain_graph_keeps_saved_intermediates():
    x = leaf(np.ones(10))
    h = x.exp()
    ref = weakref.ref(h.data)
    loss = (h * 2).sum() + h.sum()
    del h
    loss.backward(retain_graph=True)
    gc.collect()
    assert ref() is not None


def test_backward_on_a_non_scalar_needs_a_gradient():
    y = leaf(np.ones((2, 3))) * 2
    with pytest.raises(RuntimeError, match=r"non-scalar tensor of shape \(2, 3\) needs a gradient"):
        y.backward()
    with pytest.raises(ValueError, match=r"gradient of shape \(3,\) for a tensor of shape \(2, 3\)"):
        y.backward(np.ones(3))
    y.backward(np.ones((2, 3)))


def test_only_floating_tensors_can_require_grad():
    with pytest.raises(TypeError, match="floating-point"):
        Tensor(np.arange(3), requires_grad=True)


def test_backward_from_a_leaf_seeds_its_own_gradient():
    x = leaf([5.0])
    x.backward()
    np.testing.assert_allclose(x.grad, [1.0])


def test_unused_branch_gets_no_gradient_and_is_released():
    x = leaf([1.0, 2.0])
    y = leaf([3.0, 4.0])
    used = (x * 2).sum()
    unused = y * 3
    assert unused.requires_grad
    used.backward()
    assert y.grad is None


class _FakeGPU:
    """Stands in for the cupy module so device mixing can be tested without a GPU."""


class _FakeGPUTensor(Tensor):
    __slots__ = ()

    @property
    def xp(self):
        return _FakeGPU

    @property
    def device(self):
        return "cuda:0"


def test_mixing_devices_says_so():
    cpu = Tensor(np.ones((2, 2)))
    gpu = _FakeGPUTensor(np.ones((2, 2)))
    with pytest.raises(RuntimeError, match=r"add: operands on different devices \(cpu and cuda:0\)"):
        cpu + gpu
    with pytest.raises(RuntimeError, match="matmul: operands on different devices"):
        matmul(cpu, gpu)
    with pytest.raises(RuntimeError, match="concat: tensors on different devices"):
        concat([cpu, gpu])


def test_asking_for_cuda_without_a_gpu_is_clear():
    if autograd.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="cuda"):
        Tensor(np.ones(2)).to("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        Tensor(np.ones(2)).to("tpu")


def test_importing_autograd_does_not_import_cupy():
    import subprocess
    import sys

    code = "import sys, autograd, autograd.ops, autograd.functional; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_gradients_of_intermediates_are_freed_during_backward():
    # Hooks on the non-leaf tensors record weak references to the gradients flowing into them;
    # by the time the leaves' hooks run (at the end of the pass) all of them must be gone
    # except the seed of backward itself.
    rng = np.random.default_rng(0)
    weights = [Tensor(rng.standard_normal(1000), requires_grad=True) for _ in range(5)]
    h = Tensor(rng.standard_normal(1000))
    refs = []
    for w in weights:
        h = h * w
        h.register_hook(lambda g: refs.append(weakref.ref(g)))
    alive = []

    def check(g):
        gc.collect()
        alive.append(sum(r() is not None for r in refs[1:]))  # refs[0]: the caller's seed

    weights[0].register_hook(check)
    h.sum().backward()
    assert len(refs) == 5 and alive == [0]


def test_one_element_tensors_convert_like_numbers():
    loss = Tensor(np.array(2.5))
    assert float(loss) == 2.5 and int(loss) == 2 and bool(loss)
    assert not Tensor(np.array([0.0]))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(Tensor(np.ones(3)))
    with pytest.raises(TypeError, match="one element"):
        float(Tensor(np.ones(3)))


# ---- random graphs: the engine's bookkeeping against finite differences -----------------
from hypothesis import given, strategies as st  # noqa: E402

from autograd import gradcheck, split, where  # noqa: E402

_BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b * 0.5,
           lambda a, b: where(a.data > b.data, a, b)]
_UNARY = [lambda a: a.tanh(), lambda a: a * 2.0, lambda a: -a, lambda a: a.sigmoid(),
           lambda a: a.T.reshape(3, 2),
           lambda a: concat(split(a, 1, axis=-1)[::-1], axis=-1) * 1.5,     # split + concat
           lambda a: a[np.array([0, 0, 2])],                               # repeated rows
           lambda a: a.max(axis=0, keepdims=True) + a.mean(axis=1, keepdims=True) * a]


@st.composite
def random_graph(draw):
    """A list of steps; each reads earlier values by position, so values get reused."""
    steps = []
    for i in range(draw(st.integers(1, 12))):
        n_values = 2 + i  # two inputs, then one value per step
        if draw(st.booleans()):
            steps.append(("binary", draw(st.integers(0, len(_BINARY) - 1)),
                          draw(st.integers(0, n_values - 1)), draw(st.integers(0, n_values - 1))))
        else:
            steps.append(("unary", draw(st.integers(0, len(_UNARY) - 1)), draw(st.integers(0, n_values - 1))))
    return steps


def _evaluate(steps, x, y):
    values = [x, y]
    for step in steps:
        if step[0] == "binary":
            values.append(_BINARY[step[1]](values[step[2]], values[step[3]]))
        else:
            values.append(_UNARY[step[1]](values[step[2]]))
    # every value contributes, with its own weight, so unused-branch paths are covered too
    return sum((v * (0.1 * (i + 1))).sum() for i, v in enumerate(values[2:])) + values[-1].sum()


@given(steps=random_graph(), seed=st.integers(0, 2**32 - 1))
def test_random_graphs_with_shared_values_match_finite_differences(steps, seed):
    rng = np.random.default_rng(seed)
    x, y = leaf(rng.standard_normal((3, 2))), leaf(rng.standard_normal((3, 2)))
    gradcheck(lambda a, b: _evaluate(steps, a, b), [x, y])
