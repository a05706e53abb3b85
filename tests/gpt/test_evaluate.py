"""gpt.training.evaluate.evaluate_split: the loss over every token of a split, each predicted once."""
import numpy as np
import pytest

from autograd import no_grad
from gpt.model.config import GPTConfig
from gpt.training.evaluate import evaluate_split
from gpt.model.gpt import GPT


def _model(block_size=8):
    cfg = GPTConfig(vocab_size=11, block_size=block_size, n_layer=1, n_head=2, n_embd=16, dropout=0.0)
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
