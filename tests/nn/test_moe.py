"""Mixture of experts: equals a dense reference, routes sparsely, gradients, load-balancing term."""
import numpy as np
import pytest

import autograd
import nn
from tests.nn.gradcheck_util import check_gradients, f64


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


def moe_reference(moe, x):
    """Every expert on every token, then per token the softmax over its top-k logits as weights."""
    flat = x.reshape(-1, moe.n_embd)
    logits = flat @ moe.router.weight.data
    dense = np.stack([moe.experts[e](autograd.Tensor(flat)).data for e in range(moe.n_experts)], axis=1)  # (N, E, C)
    out = np.zeros_like(flat)
    for n in range(flat.shape[0]):
        top = np.argsort(-logits[n])[:moe.top_k]
        w = np.exp(logits[n, top] - logits[n, top].max())
        w /= w.sum()
        out[n] = (w[:, None] * dense[n, top]).sum(0)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = np.argsort(-logits, axis=-1)[:, :moe.top_k]
    f = np.bincount(chosen.reshape(-1), minlength=moe.n_experts) / chosen.size
    aux = moe.n_experts * (f * probs.mean(0)).sum()
    return out.reshape(x.shape), aux


@pytest.mark.parametrize("n_experts,top_k", [(4, 2), (4, 1), (3, 3)])
def test_moe_equals_the_dense_reference(n_experts, top_k):
    moe = nn.MoE(6, 8, n_experts=n_experts, top_k=top_k).double()
    x = f64(2, 5, 6)
    y = moe(x)
    ref, aux = moe_reference(moe, x.data)
    np.testing.assert_allclose(y.data, ref, rtol=1e-10, atol=1e-12)
    assert moe.aux_loss.item() == pytest.approx(aux, rel=1e-12)
    assert moe.tokens_per_expert.sum() == 10 * top_k


def test_each_expert_computes_only_its_routed_tokens():
    moe = nn.MoE(6, 8, n_experts=4, top_k=2)
    seen = {}
    for e, expert in enumerate(moe.experts):
        expert.register_forward_hook(lambda m, args, out, e=e: seen.__setitem__(e, args[0].shape[0]))
    moe(autograd.randn(3, 7, 6))
    counts = moe.tokens_per_expert.tolist()
    assert sum(seen.values()) == 21 * 2 < 21 * 4
    assert all(seen.get(e, 0) == counts[e] for e in range(4))


def test_moe_gradients_for_router_experts_and_input():
    moe = nn.MoE(4, 6, n_experts=3, top_k=2).double()
    x = f64(2, 3, 4)
    params = list(moe.parameters())
    check_gradients(lambda: moe(x), params + [x], max_elems=5)
    # and the load-balancing term's gradient reaches the router
    check_gradients(lambda: (moe(x), moe.aux_loss)[1], [moe.router.weight], max_elems=12)


def test_aux_loss_is_one_for_a_uniform_router_and_near_n_experts_when_collapsed():
    moe = nn.MoE(4, 8, n_experts=4, top_k=1).double()
    x = f64(8, 4)
    moe.router.weight.data[...] = 0.0  # every probability 1/E
    moe(x)
    assert moe.aux_loss.item() == pytest.approx(1.0, rel=1e-12)
    moe.router.weight.data[...] = 0.0
    moe.router.weight.data[:, 0] = 100.0 * np.sign(x.data.sum(0))  # send everything to expert 0
    moe(autograd.Tensor(np.abs(x.data) * np.sign(x.data.sum(0))))
    assert moe.tokens_per_expert.tolist() == [8, 0, 0, 0]
    assert moe.aux_loss.item() == pytest.approx(4.0, rel=1e-6)


def test_moe_names_and_errors():
    moe = nn.MoE(4, 8, n_experts=2, top_k=1, bias=False)
    assert [n for n, _ in moe.named_parameters()] == [
        "router.weight", "experts.0.c_fc.weight", "experts.0.c_proj.weight",
        "experts.1.c_fc.weight", "experts.1.c_proj.weight"]
    with pytest.raises(ValueError, match="1 <= top_k <= n_experts"):
        nn.MoE(4, 8, n_experts=2, top_k=3)
    with pytest.raises(ValueError, match=r"expected x \(\.\.\., 4\)"):
        moe(f64(2, 5))


def test_halves_of_a_batch_whose_counts_are_summed_have_the_whole_batchs_aux_loss_and_gradient():
    """Data parallelism in one process: two 'ranks' each route half the tokens; with their counts
    summed (sum_counts), the mean of their aux losses and of their router gradients equals the
    whole batch's, as one process would compute it."""
    moe = nn.MoE(4, 8, n_experts=4, top_k=2).double()
    x = np.random.default_rng(1).standard_normal((6, 4))
    halves = (x[:3], x[3:])

    def aux_and_grad(rows):
        moe.router.weight.grad = None
        moe(autograd.Tensor(rows))
        moe.aux_loss.backward()
        return moe.aux_loss.item(), moe.router.weight.grad.copy(), moe.tokens_per_expert.copy()

    whole_aux, whole_grad, _ = aux_and_grad(x)
    counts = [aux_and_grad(h)[2] for h in halves]
    parts = []
    for r, h in enumerate(halves):
        moe.sum_counts = lambda c, other=counts[1 - r]: c + other  # what an all-reduce over 2 ranks returns
        parts.append(aux_and_grad(h))
    assert np.mean([p[0] for p in parts]) == pytest.approx(whole_aux, rel=1e-12)
    np.testing.assert_allclose(np.mean([p[1] for p in parts], axis=0), whole_grad, rtol=1e-10, atol=1e-14)
    with autograd.no_grad():  # outside training steps (evaluation, sampling on rank 0) nothing is summed
        moe.sum_counts = lambda c: pytest.fail("summed outside a training step")
        moe(autograd.Tensor(x))
