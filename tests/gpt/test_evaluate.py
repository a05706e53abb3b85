"""gpt.training.evaluate.evaluate_split: the loss over every token of a split, each predicted once."""
import numpy as np
import pytest

from autograd import no_grad
from gpt.model.config import GPTConfig
from gpt.training.evaluate import evaluate, evaluate_split
from gpt.model.gpt import GPT


def _model(block_size=8, **kw):
    cfg = GPTConfig(vocab_size=11, block_size=block_size, n_layer=1, n_head=2, n_embd=16, dropout=0.0, **kw)
    return GPT(cfg)


def _nll_per_token(model, ids):
    """-log p(ids[1:] | prefix) for one window, computed from the logits by hand."""
    with no_grad():
        logits, _ = model(np.asarray(ids[:-1], dtype=np.int64)[None])
    z = logits.numpy()[0].astype(np.float64)
    z -= z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[np.arange(len(ids) - 1), ids[1:]]


@pytest.mark.parametrize("n_tokens", [2, 9, 17, 30])  # one short window; exact fits; a remainder
def test_every_target_counted_once_in_consecutive_windows(n_tokens):
    model = _model(block_size=8)
    tokens = np.random.default_rng(n_tokens).integers(0, 11, n_tokens).astype(np.uint16)
    per_token = np.concatenate([_nll_per_token(model, tokens[s:s + 9]) for s in range(0, n_tokens - 1, 8)])
    assert len(per_token) == n_tokens - 1
    for batch_size in (1, 2, 32):
        assert evaluate_split(model, tokens, 8, batch_size=batch_size) == pytest.approx(per_token.mean(), rel=1e-6)


def test_leaves_training_mode_as_it_was_and_rejects_a_too_short_split():
    model = _model()
    model.train()
    evaluate_split(model, np.arange(10) % 11, 8)
    assert model.training
    with pytest.raises(ValueError, match="at least 2 tokens"):
        evaluate_split(model, np.array([3]), 8)


def test_a_moe_model_is_scored_by_its_cross_entropy_without_the_load_balancing_term():
    model = _model(block_size=8, mlp="moe", moe_aux_coef=1.0)
    tokens = np.random.default_rng(5).integers(0, 11, 9).astype(np.uint16)
    ce = _nll_per_token(model, tokens).mean()
    x, y = (np.asarray(a, dtype=np.int64)[None] for a in (tokens[:-1], tokens[1:]))
    with no_grad():
        assert model(x, y)[1].item() > ce + 1e-3  # the training loss carries the aux term
    assert evaluate_split(model, tokens, 8) == pytest.approx(ce, rel=1e-6)
    assert evaluate(model, [(x, y)]) == pytest.approx(ce, rel=1e-6)


def test_a_huge_block_size_over_a_short_split_allocates_nothing_for_it():
    """The window is the split itself: no (block_size + 1) offsets are built (8 TB here)."""
    model = _model(block_size=8)
    tokens = np.random.default_rng(2).integers(0, 11, 9).astype(np.uint16)
    assert evaluate_split(model, tokens, 10**12) == evaluate_split(model, tokens, 8)


@pytest.mark.parametrize("pos", ["rope", "sinusoidal"])
def test_a_model_with_a_huge_block_size_costs_memory_only_for_the_positions_it_sees(pos):
    """A tampered config.block_size (1e9 here, tables of 16 GB built up front) evaluates as the
    model it is: its position tables grow to the split's length."""
    small, huge = _model(block_size=8, pos=pos), _model(block_size=10**9, pos=pos)
    huge.load_state_dict(small.state_dict())
    tokens = np.random.default_rng(3).integers(0, 11, 9).astype(np.uint16)
    assert evaluate_split(huge, tokens, 10**9) == evaluate_split(small, tokens, 8)
