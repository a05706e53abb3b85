"""gpt.inference.beam: when the search may stop, on hand-made log-probability trees."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gpt.inference.beam import beam_search

EOS, V, OTHER = 0, 6, -20.0  # token 0 ends a hypothesis; tokens a tree leaves out get log p = -20


def tree_fn(tree: dict):
    """logprob_fn of a tree: tree[prefix] = {token: log p}; every other token gets OTHER."""
    def fn(seqs, parents):
        rows = seqs if seqs.shape[1] else np.zeros((1, 0), dtype=np.int64)
        out = np.full((len(rows), V), OTHER)
        for i, row in enumerate(rows):
            for tok, lp in tree.get(tuple(int(t) for t in row), {}).items():
                out[i, tok] = lp
        return out
    return fn


def brute_force(fn, max_len: int, length_penalty: float = 1.0):
    """The best finished (or max-length) sequence by exhaustive enumeration, and its score."""
    best, best_score = None, -math.inf
    for n in range(1, max_len + 1):
        for seq in itertools.product(range(V), repeat=n):
            if EOS in seq[:-1] or (seq[-1] != EOS and n < max_len):
                continue
            lp = sum(fn(np.asarray([seq[:i]], dtype=np.int64), None)[0, seq[i]] for i in range(n))
            score = lp / n ** length_penalty
            if score > best_score:
                best, best_score = list(seq), score
    return best, best_score


# Like "100,001" read as "one hundred thousand": four short, unlikely endings fill the beam's
# finished list at step 1 while the likely path a -> b -> c -> <eos> (greedy's) is still live.
A, B, C, D, E = 1, 2, 3, 4, 5
TRAP = {
    (): {A: -0.01, EOS: -0.5, D: -0.6, E: -0.7, C: -0.8},
    (A,): {B: -0.01},
    (A, B): {C: -0.01},
    (A, B, C): {EOS: -0.01},
    (D,): {EOS: 0.0}, (E,): {EOS: 0.0}, (C,): {EOS: 0.0},
}


def final(toks):
    return toks[-1] == EOS


def test_greedy_finds_the_likely_path():
    assert beam_search(tree_fn(TRAP), 1, 6, final)[0].tokens == [A, B, C, EOS]


def test_beam_search_does_not_stop_while_a_live_beam_can_still_win():
    # After step 1 four hypotheses have finished ([eos], [d eos], [e eos], [c eos]: scores -0.5,
    # -0.3, -0.35, -0.4) but the live beam [a b] (log p -0.02) can still end far above them.
    best = beam_search(tree_fn(TRAP), 4, 6, final)[0]
    assert best.tokens == [A, B, C, EOS]
    assert best.score == pytest.approx(-0.04 / 4)


@pytest.mark.parametrize("length_penalty", [0.0, 0.5, 1.0, 2.0])
def test_beam_search_equals_brute_force_on_the_trap(length_penalty):
    fn = tree_fn(TRAP)
    want, want_score = brute_force(fn, 4, length_penalty)
    got = beam_search(fn, 4, 4, final, length_penalty=length_penalty)[0]
    assert got.tokens == want and got.score == pytest.approx(want_score)


def test_the_search_stops_early_once_no_live_beam_can_beat_the_kept_ones():
    # Every hypothesis ends after one token; a live beam (log p <= -20) cannot beat them.
    calls = []
    tree = {(): {EOS: -0.5, A: -0.2, B: -0.3}, (A,): {EOS: -0.1}, (B,): {EOS: -0.1}}
    inner = tree_fn(tree)

    def fn(seqs, parents):
        calls.append(seqs.shape[1])
        return inner(seqs, parents)
    best = beam_search(fn, 2, 50, final)
    assert best[0].tokens == [A, EOS] and len(calls) <= 3


def test_returned_hypotheses_are_the_best_kept_ones_best_first():
    hyps = beam_search(tree_fn(TRAP), 4, 6, final, num_return=4)
    assert [h.tokens for h in hyps][:2] == [[A, B, C, EOS], [D, EOS]]
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
